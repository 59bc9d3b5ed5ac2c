package reconciled

import (
	"reflect"
	"strings"
	"sync"

	"reconciled.dev/guest/internal/host"
	"reconciled.dev/guest/internal/object"
)

// Gvk is a kind: API group (empty for the core group), version and kind.
type Gvk struct {
	// Group is the API group, empty for the core group ("", "apps").
	Group string
	// Version is the API version ("v1").
	Version string
	// Kind is the kind, in CamelCase ("ConfigMap").
	Kind string
}

// APIVersion is the kind's apiVersion: "v1" for the core group, else "<group>/<version>".
func (g Gvk) APIVersion() string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// GVK is g itself, so that a Gvk is a [Kinded] wherever a kind is asked for.
func (g Gvk) GVK() Gvk { return g }

// String is "<apiVersion>/<kind>", e.g. "apps/v1/Deployment".
func (g Gvk) String() string { return g.APIVersion() + "/" + g.Kind }

// GvkOf is the Gvk of an object's apiVersion and kind ("apps/v1", "Deployment").
func GvkOf(apiVersion, kind string) Gvk {
	group, version, found := strings.Cut(apiVersion, "/")
	if !found {
		return Gvk{Version: apiVersion, Kind: kind}
	}
	return Gvk{Group: group, Version: version, Kind: kind}
}

func (g Gvk) host() host.Gvk { return host.Gvk(g) }

// Kinded is anything that names a kind: a [Gvk] or a [Kind].
type Kinded interface {
	// GVK is the kind named.
	GVK() Gvk
}

// Kind is a kind and the Go type its objects are read into: a struct of your own, a
// k8s.io/api type, or raw JSON ([Object], json.RawMessage).
//
//	var ConfigMaps = reconciled.NewKind[corev1.ConfigMap]("", "v1", "ConfigMap")
//	cm, err := cache.Get(ConfigMaps, ns, name) // *corev1.ConfigMap
type Kind[T any] struct {
	gvk Gvk
}

// NewKind is the kind group/version/kind, read into T.
//
// When T is a struct type, the SDK also remembers that its values are of this kind, so that
// writes and helpers that take an object (client.Apply, events.Normal, ControllerReference,
// ...) know its kind even when its apiVersion and kind are not set. A struct type used for two
// kinds is not remembered: its objects must then carry apiVersion and kind.
func NewKind[T any](group, version, kind string) Kind[T] {
	g := Gvk{Group: group, Version: version, Kind: kind}
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Struct {
		kindsMu.Lock()
		defer kindsMu.Unlock()
		if old, ok := kinds[t]; ok && old != g {
			kinds[t] = Gvk{}
		} else if !ok {
			kinds[t] = g
		}
	}
	return Kind[T]{gvk: g}
}

// GVK is the kind's group, version and kind.
func (k Kind[T]) GVK() Gvk { return k.gvk }

// APIVersion is the kind's apiVersion.
func (k Kind[T]) APIVersion() string { return k.gvk.APIVersion() }

// Object is an object as plain JSON values, for a reconciler that wants no types:
// NewKind[reconciled.Object](...).
type Object = map[string]any

var (
	kindsMu sync.Mutex
	// The kind of each struct type given to NewKind; a zero Gvk for a type given two kinds.
	kinds = map[reflect.Type]Gvk{}
)

// KindOf is the kind of obj: its own apiVersion and kind when it has both, else the kind its
// Go type was given with [NewKind]. Neither is an [Invalid] error.
func KindOf(obj any) (Gvk, error) {
	h, _, err := object.HeadOf(obj)
	if err != nil {
		return Gvk{}, Errorf(Invalid, "cannot encode %T as JSON: %v", obj, err)
	}
	return kindOf(obj, h)
}

func kindOf(obj any, h object.Head) (Gvk, error) {
	if h.APIVersion != "" && h.Kind != "" {
		return GvkOf(h.APIVersion, h.Kind), nil
	}
	t := reflect.TypeOf(obj)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	kindsMu.Lock()
	g, ok := kinds[t]
	kindsMu.Unlock()
	if ok && g != (Gvk{}) {
		return g, nil
	}
	return Gvk{}, Errorf(Invalid,
		"cannot tell the kind of a %v (%s): set its apiVersion and kind, or declare its type with reconciled.NewKind",
		t, object.Key(h.Metadata.Namespace, h.Metadata.Name))
}
