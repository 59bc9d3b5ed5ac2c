package reconciled

import (
	"encoding/json"
	"fmt"
	"slices"

	"reconciled.dev/guest/internal/host"
	"reconciled.dev/guest/internal/object"
)

// HasFinalizer reports whether obj carries finalizer name.
func HasFinalizer(obj any, name string) bool {
	h, _, err := object.HeadOf(obj)
	return err == nil && slices.Contains(h.Metadata.Finalizers, name)
}

// WithFinalizer runs apply while obj lives and cleanup once it is being deleted, keeping
// finalizer name in step, as kube-runtime's finalizer helper does:
//
//   - not being deleted, finalizer missing: the finalizer is added, then apply runs with the
//     object as the server returned it;
//   - not being deleted, finalizer there: apply runs with obj;
//   - being deleted (deletionTimestamp set), finalizer there: cleanup runs, and only if it
//     succeeds is the finalizer removed (the object may then be gone at once);
//   - being deleted, finalizer gone: nothing runs; [Done].
//
// Both changes are JSON patches whose first operation tests the finalizer list as it was read,
// so an edit of the list by anyone else in between fails the patch instead of being
// overwritten. That failure is a [Conflict] (the retry reads the list again), though the API
// server reports it as invalid. It returns what apply or cleanup returned.
//
// Where it may surprise: cleanup runs again if removing the finalizer fails, so it must be
// safe to repeat; and a finalizer added here stays when the reconciler stops being deployed,
// so a deleted object then waits until someone removes it.
func WithFinalizer[T any](obj *T, name string, apply, cleanup func(*T) (Outcome, error)) (Outcome, error) {
	h, _, err := object.HeadOf(obj)
	if err != nil {
		return Done(), Errorf(Invalid, "cannot encode %T as JSON: %v", obj, err)
	}
	kind, err := kindOf(obj, h)
	if err != nil {
		return Done(), err
	}
	at := slices.Index(h.Metadata.Finalizers, name)
	deleting := h.Metadata.DeletionTimestamp != nil
	switch {
	case !deleting && at >= 0:
		return apply(obj)
	case !deleting:
		patched, err := patchFinalizers[T](kind, h, addFinalizer(h.Metadata.Finalizers, name))
		if err != nil {
			return Done(), err
		}
		return apply(patched)
	case at >= 0:
		outcome, err := cleanup(obj)
		if err != nil {
			return outcome, err
		}
		// Someone else let it go first: it is deleted, which is what was wanted.
		if _, err := patchFinalizers[T](kind, h, removeFinalizer(at, name)); err != nil && !IsNotFound(err) {
			return outcome, err
		}
		return outcome, nil
	default:
		return Done(), nil
	}
}

// op is a JSON patch operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// addFinalizer is the JSON patch that adds name to finalizers as read. An absent list is
// tested as null: an `add` of a whole list would replace one that appeared meanwhile.
func addFinalizer(finalizers []string, name string) []any {
	if finalizers == nil {
		return []any{
			op{"test", "/metadata/finalizers", nil},
			op{"add", "/metadata/finalizers", []string{name}},
		}
	}
	return []any{
		op{"test", "/metadata/finalizers", finalizers},
		op{"add", "/metadata/finalizers/-", name},
	}
}

// removeFinalizer is the JSON patch that removes name, read at index at.
func removeFinalizer(at int, name string) []any {
	path := fmt.Sprintf("/metadata/finalizers/%d", at)
	return []any{
		op{"test", path, name},
		struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{"remove", path},
	}
}

func patchFinalizers[T any](kind Gvk, h object.Head, ops []any) (*T, error) {
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, Errorf(Invalid, "cannot encode the finalizer patch: %v", err)
	}
	key := object.Key(h.Metadata.Namespace, h.Metadata.Name)
	answer, err := host.Current.Patch(kind.host(), h.Metadata.Namespace, h.Metadata.Name,
		host.Patch{Type: host.JSON, Body: string(body)})
	if IsInvalid(err) {
		return nil, Errorf(Conflict, "the finalizers of %s %s changed since they were read (%s); read it again",
			kind.Kind, key, err.(*Error).Message)
	}
	if err != nil {
		return nil, err
	}
	patched := new(T)
	if err := object.Decode([]byte(answer), patched); err != nil {
		return nil, Errorf(Invalid, "cannot decode %s %s into %T: %v", kind.Kind, key, patched, err)
	}
	return patched, nil
}
