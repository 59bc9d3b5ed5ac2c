package reconciled

import (
	"encoding/json"
	"reflect"

	"reconciled.dev/guest/internal/object"
)

// ControllerReference is the controller owner reference to owner: controller and
// blockOwnerDeletion true, so that deleting the owner deletes the object and a change to the
// object reconciles the owner (through Owns). Ownership is by uid: an owner without a name or
// uid (one not read from the cluster) is an [Invalid] error, and so is one whose kind cannot
// be told (see [KindOf]).
func ControllerReference(owner any) (OwnerReference, error) {
	h, _, err := object.HeadOf(owner)
	if err != nil {
		return OwnerReference{}, Errorf(Invalid, "cannot encode the owner (%T) as JSON: %v", owner, err)
	}
	return controllerReference(owner, h)
}

func controllerReference(owner any, h object.Head) (OwnerReference, error) {
	kind, err := kindOf(owner, h)
	if err != nil {
		return OwnerReference{}, err
	}
	for _, field := range [...][2]string{{"name", h.Metadata.Name}, {"uid", h.Metadata.UID}} {
		if field[1] == "" {
			return OwnerReference{}, Errorf(Invalid,
				"%s %s has no metadata.%s: an owner must be an object read from the cluster",
				kind.Kind, object.Key(h.Metadata.Namespace, h.Metadata.Name), field[0])
		}
	}
	yes := true
	return OwnerReference{
		APIVersion:         kind.APIVersion(),
		Kind:               kind.Kind,
		Name:               h.Metadata.Name,
		UID:                h.Metadata.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}, nil
}

// SetControllerReference makes owner the controller of obj (a pointer, or an [Object]), as
// controller-runtime's SetControllerReference: a reference to the same owner (by uid) is
// replaced where it stands, other non-controller references are kept. It is an [Invalid]
// error, and obj is left as it was, when another owner already controls obj (an object has at
// most one controller), or when owner is namespaced and obj is in another namespace (the
// garbage collector ignores such references).
func SetControllerReference(owner, obj any) error {
	oh, _, err := object.HeadOf(owner)
	if err != nil {
		return Errorf(Invalid, "cannot encode the owner (%T) as JSON: %v", owner, err)
	}
	ref, err := controllerReference(owner, oh)
	if err != nil {
		return err
	}
	h, data, err := object.HeadOf(obj)
	if err != nil {
		return Errorf(Invalid, "cannot encode %T as JSON: %v", obj, err)
	}
	key := object.Key(h.Metadata.Namespace, h.Metadata.Name)
	if oh.Metadata.Namespace != "" && oh.Metadata.Namespace != h.Metadata.Namespace {
		return Errorf(Invalid,
			"%s %s cannot control %s: an owner in a namespace can only own objects in that namespace",
			ref.Kind, object.Key(oh.Metadata.Namespace, ref.Name), key)
	}
	if c := controllerOf(h); c != nil && c.UID != ref.UID {
		return Errorf(Invalid,
			"%s is already controlled by %s %s (uid %s); it cannot also be controlled by %s %s (uid %s)",
			key, c.Kind, c.Name, c.UID, ref.Kind, ref.Name, ref.UID)
	}
	return editMetadata(obj, data, func(meta object.Fields) error {
		var refs []json.RawMessage
		if raw, ok := meta["ownerReferences"]; ok {
			if err := json.Unmarshal(raw, &refs); err != nil {
				return err
			}
		}
		encoded, err := json.Marshal(ref)
		if err != nil {
			return err
		}
		replaced := false
		for i, raw := range refs {
			var r object.Owner
			if json.Unmarshal(raw, &r) == nil && r.UID == ref.UID {
				refs[i], replaced = encoded, true
			}
		}
		if !replaced {
			refs = append(refs, encoded)
		}
		meta["ownerReferences"], err = json.Marshal(refs)
		return err
	})
}

// editMetadata changes obj's metadata (data is obj's JSON) through edit, and writes the result
// back into obj.
func editMetadata(obj any, data []byte, edit func(meta object.Fields) error) error {
	fields, err := object.ReadFields(data)
	if err != nil {
		return Errorf(Invalid, "%T is not a JSON object: %v", obj, err)
	}
	meta := object.Fields{}
	if raw, ok := fields["metadata"]; ok && string(raw) != "null" {
		if meta, err = object.ReadFields(raw); err != nil {
			return Errorf(Invalid, "the metadata of %T is not a JSON object: %v", obj, err)
		}
	}
	if err := edit(meta); err != nil {
		return Errorf(Invalid, "cannot change the metadata of %T: %v", obj, err)
	}
	if fields["metadata"], err = json.Marshal(meta); err != nil {
		return Errorf(Invalid, "cannot encode the metadata of %T: %v", obj, err)
	}
	edited, err := json.Marshal(fields)
	if err != nil {
		return Errorf(Invalid, "cannot encode %T: %v", obj, err)
	}
	if m, ok := obj.(map[string]any); ok {
		var fresh map[string]any
		if err := json.Unmarshal(edited, &fresh); err != nil {
			return Errorf(Invalid, "cannot decode the edited object: %v", err)
		}
		clear(m)
		for k, v := range fresh {
			m[k] = v
		}
		return nil
	}
	if v := reflect.ValueOf(obj); v.Kind() != reflect.Pointer || v.IsNil() {
		return Errorf(Invalid, "cannot change a %T: pass a pointer to the object", obj)
	}
	if err := object.Decode(edited, obj); err != nil {
		return Errorf(Invalid, "cannot decode the edited object into %T: %v", obj, err)
	}
	return nil
}

// IsControlledBy reports whether owner (by uid) is the controller of obj.
func IsControlledBy(obj, owner any) bool {
	h, _, err := object.HeadOf(obj)
	if err != nil {
		return false
	}
	oh, _, err := object.HeadOf(owner)
	if err != nil || oh.Metadata.UID == "" {
		return false
	}
	c := controllerOf(h)
	return c != nil && c.UID == oh.Metadata.UID
}

// ControllerOf is obj's controller reference (controller: true), or nil when it has none.
func ControllerOf(obj any) *OwnerReference {
	h, _, err := object.HeadOf(obj)
	if err != nil {
		return nil
	}
	return controllerOf(h)
}

func controllerOf(h object.Head) *OwnerReference {
	for _, r := range h.Metadata.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			ref := OwnerReference(r)
			return &ref
		}
	}
	return nil
}
