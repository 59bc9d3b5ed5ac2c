// Package host is the seam between the SDK and the reconciled:runtime imports and exports: the
// SDK calls the host only through [Current], which a wasm build wires to the generated
// bindings (wasm.go) and a native test replaces with a fake. Its types are the WIT's, in plain
// Go, so that nothing here depends on the generated code.
package host

// Gvk is the WIT `gvk`.
type Gvk struct {
	Group   string
	Version string
	Kind    string
}

// ListOptions is the WIT `list-options`.
type ListOptions struct {
	Namespace     string
	LabelSelector string
	Fields        [][2]string
	Limit         uint32
	ContinueToken string
}

// Page is the WIT `list-page`.
type Page struct {
	Items         []string
	ContinueToken string
}

// PatchType is the case of the WIT `patch-body`.
type PatchType uint8

// The cases of the WIT `patch-body`.
const (
	Merge PatchType = iota
	JSON
	Apply
)

// Patch is the WIT `patch-body`; FieldManager and Force are only for [Apply].
type Patch struct {
	Type         PatchType
	Body         string
	FieldManager string
	Force        bool
}

// Level is the WIT log `level`.
type Level uint8

// The WIT log levels, in the WIT's order.
const (
	Debug Level = iota
	Info
	Warn
	Error
)

// Host is every import of the `reconciler` world, one method a WIT function, with the WIT's
// meaning (see wit/runtime.wit). Errors are made by [NewError].
type Host interface {
	// CacheGet is cache.get.
	CacheGet(kind Gvk, namespace, name string) (string, error)
	// CacheList is cache.list.
	CacheList(kind Gvk, options ListOptions) (Page, error)
	// APIGet is api.get.
	APIGet(kind Gvk, namespace, name string) (string, error)
	// APIList is api.list.
	APIList(kind Gvk, options ListOptions) (Page, error)
	// Create is client.create.
	Create(kind Gvk, namespace, object string) (string, error)
	// Update is client.update.
	Update(kind Gvk, namespace, object string) (string, error)
	// Patch is client.patch.
	Patch(kind Gvk, namespace, name string, patch Patch) (string, error)
	// Delete is client.delete.
	Delete(kind Gvk, namespace, name string) error
	// UpdateStatus is client.update-status.
	UpdateStatus(kind Gvk, namespace, object string) (string, error)
	// PatchStatus is client.patch-status.
	PatchStatus(kind Gvk, namespace, name string, patch Patch) (string, error)
	// RecordEvent is client.record-event; warning picks the Warning event type.
	RecordEvent(regarding Gvk, namespace, name string, warning bool, reason, message string) error
	// Log is log.log.
	Log(level Level, message string)
	// Settings is settings.get.
	Settings() string
	// SpanOpen is trace.open.
	SpanOpen(name string) uint32
	// SpanSetAttribute is trace.set-attribute.
	SpanSetAttribute(span uint32, key, value string)
	// SpanClose is trace.close; a nil failure closes it as a success.
	SpanClose(span uint32, failure *string)
}

// Current is the host the SDK calls: the wasm imports in a component, a fake in a native test.
var Current Host = missing{}

// NewError makes the error of WIT error case `tag` (its index in the WIT `error` variant). The
// SDK's root package sets it to build its typed error, which this package cannot name.
var NewError func(tag uint8, message string) error

// Failure is an error on its way out to the host: a WIT `error` case and its message.
type Failure struct {
	Tag     uint8
	Message string
}

// Watch is the WIT `watch`; Mapping is the index of the WIT `mapping` case (0 owner, 1 label,
// 2 guest-map), Label its payload.
type Watch struct {
	Kind    Gvk
	Mapping uint8
	Label   string
}

// FieldIndex is the WIT `field-index`.
type FieldIndex struct {
	Kind Gvk
	Path string
}

// Description is the WIT `description`.
type Description struct {
	For           Gvk
	Owns          []Gvk
	Watches       []Watch
	Namespaces    []string
	LabelSelector string
	FieldIndexes  []FieldIndex
	Eventual      bool
}

// Outcome is the WIT `outcome`: done, or requeue after RequeueAfterMs when Requeue.
type Outcome struct {
	Requeue        bool
	RequeueAfterMs uint64
}

// Guest is what the component exports, set by the SDK's Export.
type Guest struct {
	Describe  func() Description
	Reconcile func(namespace, name string) (Outcome, *Failure)
	Map       func(kind Gvk, object string) [][2]string
}

// Exported is the reconciler the exports call; nil until the guest's init calls Export.
var Exported *Guest

// missing is the host outside a component (a native test that set no fake): every call says so.
type missing struct{}

func (missing) fail() {
	panic("reconciled: no host: outside a wasm component, a test must install one (reconciled.dev/guest/fake)")
}

func (m missing) CacheGet(Gvk, string, string) (string, error) { m.fail(); return "", nil }
func (m missing) CacheList(Gvk, ListOptions) (Page, error)     { m.fail(); return Page{}, nil }
func (m missing) APIGet(Gvk, string, string) (string, error)   { m.fail(); return "", nil }
func (m missing) APIList(Gvk, ListOptions) (Page, error)       { m.fail(); return Page{}, nil }
func (m missing) Create(Gvk, string, string) (string, error)   { m.fail(); return "", nil }
func (m missing) Update(Gvk, string, string) (string, error)   { m.fail(); return "", nil }
func (m missing) Patch(Gvk, string, string, Patch) (string, error) {
	m.fail()
	return "", nil
}
func (m missing) Delete(Gvk, string, string) error { m.fail(); return nil }
func (m missing) UpdateStatus(Gvk, string, string) (string, error) {
	m.fail()
	return "", nil
}
func (m missing) PatchStatus(Gvk, string, string, Patch) (string, error) {
	m.fail()
	return "", nil
}
func (m missing) RecordEvent(Gvk, string, string, bool, string, string) error {
	m.fail()
	return nil
}
func (m missing) Log(Level, string)      { m.fail() }
func (m missing) Settings() string       { m.fail(); return "" }
func (m missing) SpanOpen(string) uint32 { m.fail(); return 0 }
func (m missing) SpanSetAttribute(uint32, string, string) {
	m.fail()
}
func (m missing) SpanClose(uint32, *string) { m.fail() }
