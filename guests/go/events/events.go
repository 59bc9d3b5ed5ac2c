// Package events records Kubernetes Events about objects you hold, named by their kind,
// namespace and name. An Event is a side note: a reconciler that must not fail for a lost one
// logs the error instead of returning it (the write it reports is already done).
package events

import (
	"reconciled.dev/guest/client"
	"reconciled.dev/guest/internal/object"
	"reconciled.dev/guest/reconciled"
)

func record(obj any, eventType client.EventType, reason, message string) error {
	h, _, err := object.HeadOf(obj)
	if err != nil {
		return reconciled.Errorf(reconciled.Invalid, "cannot encode %T as JSON: %v", obj, err)
	}
	kind := reconciled.GvkOf(h.APIVersion, h.Kind)
	if h.APIVersion == "" || h.Kind == "" {
		if kind, err = reconciled.KindOf(obj); err != nil {
			return err
		}
	}
	return client.RecordEvent(kind, h.Metadata.Namespace, h.Metadata.Name, eventType, reason, message)
}

// Normal records a Normal Event about obj: something happened as it should. reason is
// UpperCamelCase ("Generated"), message a sentence for people.
func Normal(obj any, reason, message string) error {
	return record(obj, client.EventNormal, reason, message)
}

// Warning records a Warning Event about obj: something is wrong that a person may need to fix.
func Warning(obj any, reason, message string) error {
	return record(obj, client.EventWarning, reason, message)
}
