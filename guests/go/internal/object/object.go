// Package object is the JSON plumbing every part of the SDK shares: an object of any Go type
// (a struct, a map, json.RawMessage) as the JSON the host speaks, and back.
package object

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// Encode is obj as JSON. JSON already (json.RawMessage, []byte) is taken as it is.
func Encode(obj any) ([]byte, error) {
	switch v := obj.(type) {
	case json.RawMessage:
		return v, nil
	case *json.RawMessage:
		return *v, nil
	case []byte:
		return v, nil
	}
	return json.Marshal(obj)
}

// Decode replaces what into points to with the object in data; unlike json.Unmarshal, nothing
// of the old value survives (a map is not merged into).
func Decode(data []byte, into any) error {
	v := reflect.ValueOf(into)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("cannot decode into %T: it must be a non-nil pointer", into)
	}
	v.Elem().SetZero()
	return json.Unmarshal(data, into)
}

// Owner is an entry of metadata.ownerReferences, as far as the SDK reads it.
type Owner struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// Head is the part of an object the SDK reads: its type and the metadata that names it.
type Head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string   `json:"name"`
		Namespace         string   `json:"namespace"`
		UID               string   `json:"uid"`
		Generation        int64    `json:"generation"`
		DeletionTimestamp *string  `json:"deletionTimestamp"`
		Finalizers        []string `json:"finalizers"`
		OwnerReferences   []Owner  `json:"ownerReferences"`
	} `json:"metadata"`
}

// ReadHead reads data's Head.
func ReadHead(data []byte) (Head, error) {
	var h Head
	if err := json.Unmarshal(data, &h); err != nil {
		return h, err
	}
	return h, nil
}

// HeadOf is obj's Head and its JSON.
func HeadOf(obj any) (Head, []byte, error) {
	data, err := Encode(obj)
	if err != nil {
		return Head{}, nil, err
	}
	h, err := ReadHead(data)
	return h, data, err
}

// Key is namespace/name, or name alone for a cluster-scoped object, as messages name objects.
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Fields is a JSON object, its values kept as JSON.
type Fields map[string]json.RawMessage

// ReadFields reads a JSON object.
func ReadFields(data []byte) (Fields, error) {
	var f Fields
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("not a JSON object: %.40s", data)
	}
	return f, nil
}

// WithType is data with apiVersion and kind set where they are missing or empty.
func WithType(data []byte, apiVersion, kind string) ([]byte, error) {
	h, err := ReadHead(data)
	if err != nil {
		return nil, err
	}
	if h.APIVersion != "" && h.Kind != "" {
		return data, nil
	}
	f, err := ReadFields(data)
	if err != nil {
		return nil, err
	}
	if h.APIVersion == "" {
		f["apiVersion"], _ = json.Marshal(apiVersion)
	}
	if h.Kind == "" {
		f["kind"], _ = json.Marshal(kind)
	}
	return json.Marshal(f)
}

// Holds reports whether have holds every field of want with the same value: objects field by
// field (have may hold more), lists element by element and of the same length, anything else
// equal. A null in want asks for the field to be absent, so absent or null holds it.
func Holds(have, want any) bool {
	if want == nil {
		return have == nil
	}
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !Holds(h[k], v) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !Holds(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(have, want)
	}
}

// Generic is data decoded as plain JSON values, numbers kept exact (json.Number).
func Generic(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
