// Package reconciled is the heart of the Go SDK for reconciled guests: Kubernetes reconcilers compiled to
// WebAssembly components of the `reconciled:runtime` WIT world `reconciler`, built with
// standard Go (GOOS=wasip1 GOARCH=wasm) by guests/go/build.sh.
//
// A guest is a package main that exports one [Reconciler] from an init function:
//
//	package main
//
//	import (
//		"reconciled.dev/guest/reconciled"
//		"reconciled.dev/guest/cache"
//		"reconciled.dev/guest/client"
//	)
//
//	var ConfigMaps = reconciled.NewKind[reconciled.Object]("", "v1", "ConfigMap")
//
//	type stamp struct{}
//
//	func (stamp) Describe() reconciled.Description {
//		return reconciled.Describe(ConfigMaps).LabelSelector("stamp=yes")
//	}
//
//	func (stamp) Reconcile(req reconciled.Request) (reconciled.Outcome, error) {
//		cm, err := cache.GetOpt(ConfigMaps, req.Namespace, req.Name)
//		if err != nil || cm == nil {
//			return reconciled.Done(), err // gone: nothing to do
//		}
//		patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"stamped": "yes"}}}
//		_, err = client.MergePatch(ConfigMaps, req.Namespace, req.Name, patch)
//		return reconciled.Done(), err
//	}
//
//	func init() { reconciled.Export(stamp{}) }
//
//	func main() {}
//
// The packages: this one (kinds, [Describe], errors, owner references, finalizers, conditions,
// settings), cache and api (reads), client (writes), events and log. Objects are any Go type
// that encodes to the object's JSON: a struct of your own with [TypeMeta] and [ObjectMeta], a
// k8s.io/api type, or raw JSON ([Object], json.RawMessage). The names are those of
// guests/VOCABULARY.md, shared by every SDK.
//
// Things that may surprise: main never runs (the component is a library; the host calls its
// exports), so Export belongs in init; a reconcile may run in a fresh instance, so package
// variables do not carry over between reconciles; a panic traps, which fails that reconcile
// only.
package reconciled

import (
	"encoding/json"
	"time"

	"reconciled.dev/guest/internal/host"
)

// Request is the object a reconcile is about.
type Request struct {
	// Namespace is empty for cluster-scoped kinds.
	Namespace string
	// Name is the object's name.
	Name string
}

// Outcome is what to do after a reconcile: [Done], or [RequeueAfter] a while.
type Outcome struct {
	requeue bool
	after   time.Duration
}

// Done is the outcome of a converged reconcile: wait for the next change.
func Done() Outcome { return Outcome{} }

// RequeueAfter is the outcome that asks for another reconcile after d (rounded down to the
// millisecond; a negative d is 0).
func RequeueAfter(d time.Duration) Outcome {
	return Outcome{requeue: true, after: max(d, 0)}
}

// IsDone reports whether o is [Done].
func (o Outcome) IsDone() bool { return !o.requeue }

// Requeue is the delay o asks for, and whether it asks for one.
func (o Outcome) Requeue() (after time.Duration, ok bool) { return o.after, o.requeue }

// String is "done" or "requeue-after <d>".
func (o Outcome) String() string {
	if !o.requeue {
		return "done"
	}
	return "requeue-after " + o.after.String()
}

// Reconciler is a guest: what it reconciles, and how.
type Reconciler interface {
	// Describe says what the guest reconciles, reads and needs. It is called once, at load,
	// in a fresh instance; no host call works in it.
	Describe() Description
	// Reconcile brings req's object to its desired state. It runs again after a deletion
	// too: a primary that is gone is usually nothing to do. An error is retried with backoff;
	// its case (an *Error's, else Other) is what the host records.
	Reconcile(req Request) (Outcome, error)
}

// Mapper is a Reconciler that also maps objects of the kinds it watches with
// [Description.WatchesGuestMap] to the primaries they concern.
type Mapper interface {
	// Map is the primaries that object (JSON) of kind maps to.
	Map(kind Gvk, object json.RawMessage) []Request
}

// Export makes r the guest's reconciler. Call it once, from an init function of package main.
func Export(r Reconciler) {
	g := &host.Guest{
		Describe: func() host.Description { return r.Describe().host() },
		Reconcile: func(namespace, name string) (host.Outcome, *host.Failure) {
			o, err := r.Reconcile(Request{Namespace: namespace, Name: name})
			if err != nil {
				return host.Outcome{}, failure(err)
			}
			return host.Outcome{Requeue: o.requeue, RequeueAfterMs: uint64(o.after / time.Millisecond)}, nil
		},
	}
	if m, ok := r.(Mapper); ok {
		g.Map = func(kind host.Gvk, obj string) [][2]string {
			reqs := m.Map(Gvk(kind), json.RawMessage(obj))
			keys := make([][2]string, len(reqs))
			for i, req := range reqs {
				keys[i] = [2]string{req.Namespace, req.Name}
			}
			return keys
		}
	}
	host.Exported = g
}
