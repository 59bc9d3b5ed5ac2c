package reconciled

import (
	"encoding/json"
	"time"
)

// TypeMeta is an object's apiVersion and kind, as k8s.io/apimachinery's metav1.TypeMeta.
// Embed it in an object type of your own.
type TypeMeta struct {
	// APIVersion is "<group>/<version>", or "<version>" for the core group.
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind is the object's kind.
	Kind string `json:"kind,omitempty"`
}

// ObjectMeta is an object's metadata, as k8s.io/apimachinery's metav1.ObjectMeta and with the
// same JSON, for object types of your own: `Metadata reconciled.ObjectMeta `json:"metadata"“.
// Fields left empty are left out of the JSON, so an apply sends only what was set.
type ObjectMeta struct {
	// Name is unique among the kind's objects in a namespace.
	Name string `json:"name,omitempty"`
	// GenerateName asks the server to make a unique name with this prefix on create.
	GenerateName string `json:"generateName,omitempty"`
	// Namespace is empty for cluster-scoped kinds.
	Namespace string `json:"namespace,omitempty"`
	// UID identifies this object for its whole life; set by the server.
	UID string `json:"uid,omitempty"`
	// ResourceVersion is the version an update is guarded by; set by the server.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Generation counts changes of the spec; set by the server.
	Generation int64 `json:"generation,omitempty"`
	// CreationTimestamp is when the object was created; set by the server.
	CreationTimestamp Time `json:"creationTimestamp,omitzero"`
	// DeletionTimestamp is set once the object is being deleted (it waits for its finalizers).
	DeletionTimestamp *Time `json:"deletionTimestamp,omitempty"`
	// DeletionGracePeriodSeconds is the grace period of a deletion under way.
	DeletionGracePeriodSeconds *int64 `json:"deletionGracePeriodSeconds,omitempty"`
	// Labels are for selecting objects.
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are for anything else.
	Annotations map[string]string `json:"annotations,omitempty"`
	// OwnerReferences name the objects this one belongs to; see ControllerReference.
	OwnerReferences []OwnerReference `json:"ownerReferences,omitempty"`
	// Finalizers hold the object while it is being deleted; see WithFinalizer.
	Finalizers []string `json:"finalizers,omitempty"`
	// ManagedFields is kept as it was read, so that an update sends it back unchanged.
	ManagedFields json.RawMessage `json:"managedFields,omitempty"`
}

// OwnerReference is an entry of metadata.ownerReferences, as metav1.OwnerReference.
type OwnerReference struct {
	// APIVersion is the owner's apiVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is the owner's kind.
	Kind string `json:"kind"`
	// Name is the owner's name, in the same namespace.
	Name string `json:"name"`
	// UID is the owner's uid: ownership is by uid.
	UID string `json:"uid"`
	// Controller marks the one owner that controls the object.
	Controller *bool `json:"controller,omitempty"`
	// BlockOwnerDeletion makes a foreground deletion of the owner wait for this object.
	BlockOwnerDeletion *bool `json:"blockOwnerDeletion,omitempty"`
}

// IsController reports whether r is a controller reference (controller: true).
func (r OwnerReference) IsController() bool { return r.Controller != nil && *r.Controller }

// Time is a timestamp as Kubernetes writes one: RFC 3339 in UTC, to the second
// ("2026-01-01T00:00:00Z"), as metav1.Time. The zero Time is null in JSON.
type Time struct {
	time.Time
}

// Now is the guest's clock, to the second, as Kubernetes keeps times.
func Now() Time { return Time{time.Now().UTC().Truncate(time.Second)} }

// MarshalJSON writes t as RFC 3339 in UTC to the second, or null when zero.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}

// UnmarshalJSON reads an RFC 3339 time, or null as the zero Time.
func (t *Time) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*t = Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	*t = Time{parsed.Local()}
	return nil
}

// Condition is a status condition, as metav1.Condition and with its JSON.
type Condition struct {
	// Type is the condition's type, in CamelCase ("Ready").
	Type string `json:"type"`
	// Status is "True", "False" or "Unknown".
	Status string `json:"status"`
	// ObservedGeneration is the metadata.generation the condition was set for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastTransitionTime is when Status last changed.
	LastTransitionTime Time `json:"lastTransitionTime"`
	// Reason is a CamelCase word for machines.
	Reason string `json:"reason"`
	// Message says it for people.
	Message string `json:"message"`
}

// The condition statuses.
const (
	// ConditionTrue: the condition holds.
	ConditionTrue = "True"
	// ConditionFalse: it does not.
	ConditionFalse = "False"
	// ConditionUnknown: it cannot be told.
	ConditionUnknown = "Unknown"
)
