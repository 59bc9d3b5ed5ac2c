package reconciled

import (
	"encoding/json"
	"time"
)

// TypeMeta is an object's apiVersion and kind, as k8s.io/apimachinery's metav1.TypeMeta.
// Embed it in an object type of your own.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ObjectMeta is an object's metadata, as k8s.io/apimachinery's metav1.ObjectMeta and with the
// same JSON, for object types of your own: `Metadata reconciled.ObjectMeta `json:"metadata"“.
// Fields left empty are left out of the JSON, so an apply sends only what was set.
type ObjectMeta struct {
	Name                       string            `json:"name,omitempty"`
	GenerateName               string            `json:"generateName,omitempty"`
	Namespace                  string            `json:"namespace,omitempty"`
	UID                        string            `json:"uid,omitempty"`
	ResourceVersion            string            `json:"resourceVersion,omitempty"`
	Generation                 int64             `json:"generation,omitempty"`
	CreationTimestamp          Time              `json:"creationTimestamp,omitzero"`
	DeletionTimestamp          *Time             `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64            `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string `json:"labels,omitempty"`
	Annotations                map[string]string `json:"annotations,omitempty"`
	OwnerReferences            []OwnerReference  `json:"ownerReferences,omitempty"`
	Finalizers                 []string          `json:"finalizers,omitempty"`
	// ManagedFields is kept as it was read, so that an update sends it back unchanged.
	ManagedFields json.RawMessage `json:"managedFields,omitempty"`
}

// OwnerReference is an entry of metadata.ownerReferences, as metav1.OwnerReference.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
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
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)
