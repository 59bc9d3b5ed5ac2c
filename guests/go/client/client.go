// Package client writes straight to the API server; each write returns the server's answer.
//
// An object written is any Go value that encodes to its JSON (a pointer to a struct, an
// Object); its namespace and name come from its metadata, and apiVersion and kind are filled
// in from its Go type's reconciled.NewKind when it does not carry them. With read-your-writes
// (the default), a later cache read of the same object waits until the cache holds at least
// what the write returned.
package client

import (
	"encoding/json"
	"reflect"

	"reconciled.dev/guest/internal/host"
	"reconciled.dev/guest/internal/object"
	"reconciled.dev/guest/internal/reader"
	"reconciled.dev/guest/reconciled"
)

// encoded is an object on its way to the host: its kind, namespace, name and JSON (with
// apiVersion and kind).
type encoded struct {
	kind      reconciled.Gvk
	namespace string
	name      string
	body      []byte
}

func encode(obj any) (encoded, error) {
	h, data, err := object.HeadOf(obj)
	if err != nil {
		return encoded{}, reconciled.Errorf(reconciled.Invalid, "cannot encode %T as JSON: %v", obj, err)
	}
	kind := reconciled.GvkOf(h.APIVersion, h.Kind)
	if h.APIVersion == "" || h.Kind == "" {
		if kind, err = reconciled.KindOf(obj); err != nil {
			return encoded{}, err
		}
	}
	body, err := object.WithType(data, kind.APIVersion(), kind.Kind)
	if err != nil {
		return encoded{}, reconciled.Errorf(reconciled.Invalid, "%T is not a JSON object: %v", obj, err)
	}
	return encoded{kind: kind, namespace: h.Metadata.Namespace, name: h.Metadata.Name, body: body}, nil
}

func decode[T any](kind reconciled.Gvk, answer string) (*T, error) {
	v := new(T)
	if err := object.Decode([]byte(answer), v); err != nil {
		return nil, reconciled.Errorf(reconciled.Invalid, "cannot decode the %s the server returned into %T: %v", kind.Kind, v, err)
	}
	return v, nil
}

func gvk(k reconciled.Gvk) host.Gvk { return host.Gvk(k) }

type put func(h host.Host, kind host.Gvk, namespace, object string) (string, error)

func write[T any](obj *T, call put) (*T, error) {
	e, err := encode(obj)
	if err != nil {
		return nil, err
	}
	answer, err := call(host.Current, gvk(e.kind), e.namespace, string(e.body))
	if err != nil {
		return nil, err
	}
	return decode[T](e.kind, answer)
}

// Create creates obj and returns it as stored; an existing one is a Conflict error.
func Create[T any](obj *T) (*T, error) {
	return write(obj, host.Host.Create)
}

// Update replaces obj, guarded by its metadata.resourceVersion: a Conflict error when the
// object changed since it was read. The status is left as it is (see UpdateStatus).
func Update[T any](obj *T) (*T, error) {
	return write(obj, host.Host.Update)
}

// UpdateStatus replaces obj's status subresource, guarded by its resourceVersion: a Conflict
// error whenever the object changed since it was read, spec edits included. Prefer
// ApplyStatus, which cannot lose that race.
func UpdateStatus[T any](obj *T) (*T, error) {
	return write(obj, host.Host.UpdateStatus)
}

func apply[T any](e encoded, fieldManager string, force bool, status bool) (*T, error) {
	call := host.Current.Patch
	if status {
		call = host.Current.PatchStatus
	}
	answer, err := call(gvk(e.kind), e.namespace, e.name, host.Patch{
		Type: host.Apply, Body: string(e.body), FieldManager: fieldManager, Force: force,
	})
	if err != nil {
		return nil, err
	}
	return decode[T](e.kind, answer)
}

// Apply server-side applies obj as fieldManager: the fields it sends become this manager's,
// and fields it sent before and no longer sends are removed. With force, fields other managers
// own are taken over instead of failing with Conflict (a controller passes true). Creates the
// object when it does not exist. Send only the fields you own: leave the rest empty.
func Apply[T any](obj *T, fieldManager string, force bool) (*T, error) {
	e, err := encode(obj)
	if err != nil {
		return nil, err
	}
	return apply[T](e, fieldManager, force, false)
}

// ApplyStatus server-side applies obj's status subresource as fieldManager. Only apiVersion,
// kind, metadata.name, metadata.namespace and status are sent, so the object as read with a
// new status is fine to pass. It never conflicts on resourceVersion, so unlike UpdateStatus it
// cannot lose a race with a spec edit. The object must exist (NotFound otherwise).
func ApplyStatus[T any](obj *T, fieldManager string, force bool) (*T, error) {
	e, err := encode(obj)
	if err != nil {
		return nil, err
	}
	fields, err := object.ReadFields(e.body)
	if err != nil {
		return nil, reconciled.Errorf(reconciled.Invalid, "%T is not a JSON object: %v", obj, err)
	}
	type meta struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
	}
	sent := struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   meta            `json:"metadata"`
		Status     json.RawMessage `json:"status,omitempty"`
	}{e.kind.APIVersion(), e.kind.Kind, meta{e.name, e.namespace}, fields["status"]}
	if e.body, err = json.Marshal(sent); err != nil {
		return nil, reconciled.Errorf(reconciled.Invalid, "cannot encode the status of %T: %v", obj, err)
	}
	return apply[T](e, fieldManager, force, true)
}

func patch[T any](kind reconciled.Kind[T], namespace, name string, p any, typ host.PatchType, status bool) (*T, error) {
	body, err := object.Encode(p)
	if err != nil {
		return nil, reconciled.Errorf(reconciled.Invalid, "cannot encode the patch (%T) as JSON: %v", p, err)
	}
	call := host.Current.Patch
	if status {
		call = host.Current.PatchStatus
	}
	answer, err := call(gvk(kind.GVK()), namespace, name, host.Patch{Type: typ, Body: string(body)})
	if err != nil {
		return nil, err
	}
	return decode[T](kind.GVK(), answer)
}

// MergePatch applies a JSON merge patch (RFC 7386) to namespace/name: null removes a field,
// objects merge, anything else (a list too) replaces. p is any value that encodes to a JSON
// object.
func MergePatch[T any](kind reconciled.Kind[T], namespace, name string, p any) (*T, error) {
	return patch(kind, namespace, name, p, host.Merge, false)
}

// MergePatchStatus applies a JSON merge patch to the status subresource of namespace/name,
// e.g. {"status": {"phase": "Ready"}}: written from the object's root, and whatever it says
// outside status is ignored.
func MergePatchStatus[T any](kind reconciled.Kind[T], namespace, name string, p any) (*T, error) {
	return patch(kind, namespace, name, p, host.Merge, true)
}

// JSONPatch applies a JSON patch (RFC 6902) to namespace/name: ops encodes to an array of
// operations. A failed operation, a test included, is an Invalid error.
func JSONPatch[T any](kind reconciled.Kind[T], namespace, name string, ops any) (*T, error) {
	return patch(kind, namespace, name, ops, host.JSON, false)
}

// Delete deletes namespace/name; a missing object is a NotFound error (reconciled.IsNotFound).
func Delete(kind reconciled.Kinded, namespace, name string) error {
	return host.Current.Delete(gvk(kind.GVK()), namespace, name)
}

// EventType is the type of an Event: Normal or Warning.
type EventType uint8

// The Event types.
const (
	// EventNormal: something happened as it should.
	EventNormal EventType = iota
	// EventWarning: something is wrong that a person may need to fix.
	EventWarning
)

// RecordEvent records an Event about namespace/name of kind. reason is UpperCamelCase, at
// most 128 bytes (else Invalid); a message over 1024 bytes is cut. events.Normal and
// events.Warning take the object instead.
func RecordEvent(kind reconciled.Kinded, namespace, name string, eventType EventType, reason, message string) error {
	return host.Current.RecordEvent(gvk(kind.GVK()), namespace, name, eventType == EventWarning, reason, message)
}

// CreateOrUpdate is controller-runtime's CreateOrUpdate: it reads namespace/name from the
// cache. When it is missing, mutate fills in a new object holding only apiVersion, kind, name
// and namespace, which is created (Created). Otherwise mutate changes a copy of the cached
// object, which is written with Update only if it differs from what was read (Updated; else
// Unchanged, and nothing is written). It returns the object as it now is.
//
// mutate may change anything but the name and namespace (an Invalid error). The update is
// guarded by the cached resourceVersion, so a stale cache makes it a Conflict (the retry reads
// again); the kind must be declared in Describe.
func CreateOrUpdate[T any](kind reconciled.Kind[T], namespace, name string, mutate func(*T) error) (reconciled.Changed, *T, error) {
	current, err := reader.GetOpt(reader.Cache, kind, namespace, name)
	if err != nil {
		return reconciled.Unchanged, nil, err
	}
	draft := new(T)
	var before []byte
	if current == nil {
		type meta struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace,omitempty"`
		}
		fresh, _ := json.Marshal(struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   meta   `json:"metadata"`
		}{kind.APIVersion(), kind.GVK().Kind, meta{name, namespace}})
		err = object.Decode(fresh, draft)
	} else if before, err = object.Encode(current); err == nil {
		err = object.Decode(before, draft)
	}
	if err != nil {
		return reconciled.Unchanged, nil, reconciled.Errorf(reconciled.Invalid, "cannot copy a %s into %T: %v", kind.GVK().Kind, draft, err)
	}
	if err := mutate(draft); err != nil {
		return reconciled.Unchanged, nil, err
	}
	h, after, err := object.HeadOf(draft)
	if err != nil {
		return reconciled.Unchanged, nil, reconciled.Errorf(reconciled.Invalid, "cannot encode %T as JSON: %v", draft, err)
	}
	if h.Metadata.Name != name || h.Metadata.Namespace != namespace {
		return reconciled.Unchanged, nil, reconciled.Errorf(reconciled.Invalid,
			"CreateOrUpdate of %s %s: the function renamed it to %s; it may change anything but the name and namespace",
			kind.GVK().Kind, object.Key(namespace, name), object.Key(h.Metadata.Namespace, h.Metadata.Name))
	}
	if current == nil {
		created, err := Create(draft)
		return reconciled.Created, created, err
	}
	if sameJSON(before, after) {
		return reconciled.Unchanged, current, nil
	}
	updated, err := Update(draft)
	return reconciled.Updated, updated, err
}

func sameJSON(a, b []byte) bool {
	x, errA := object.Generic(a)
	y, errB := object.Generic(b)
	return errA == nil && errB == nil && reflect.DeepEqual(x, y)
}

// ApplyIfChanged server-side applies obj (forced) as fieldManager, unless the cached object
// already holds every field of obj with the same values: then Unchanged, and nothing is
// written. Created when the cache held no such object, Updated otherwise. It returns the
// object as it now is.
//
// The comparison is against the cache, which read-your-writes makes see this guest's own
// writes: a stale cache costs at most a write the server finds has nothing to change. Lists
// must match in length, so a list other managers add entries to is applied every time. The
// kind must be declared in Describe.
func ApplyIfChanged[T any](obj *T, fieldManager string) (reconciled.Changed, *T, error) {
	e, err := encode(obj)
	if err != nil {
		return reconciled.Unchanged, nil, err
	}
	cached, err := host.Current.CacheGet(gvk(e.kind), e.namespace, e.name)
	changed := reconciled.Updated
	switch {
	case reconciled.IsNotFound(err):
		changed = reconciled.Created
	case err != nil:
		return reconciled.Unchanged, nil, err
	default:
		have, errHave := object.Generic([]byte(cached))
		want, errWant := object.Generic(e.body)
		if errHave == nil && errWant == nil && object.Holds(have, want) {
			current, err := decode[T](e.kind, cached)
			return reconciled.Unchanged, current, err
		}
	}
	applied, err := apply[T](e, fieldManager, true, false)
	return changed, applied, err
}
