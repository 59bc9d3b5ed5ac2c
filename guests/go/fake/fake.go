// Package fake is an in-memory host for testing a reconciler natively with go test: objects
// in a map stand for the cache and the API server, and every write, Event and log line is
// recorded for the test to check.
//
//	h := fake.New()
//	fake.Install(t, h)
//	h.Add(&generator)
//	outcome, err := myReconciler{}.Reconcile(reconciled.Request{Namespace: "default", Name: "g"})
//	// check h.Writes, h.Events
//
// It models what a test needs, not an API server: writes change the stored objects (merge and
// JSON patches as their RFCs say; an apply merges its body in, as a merge patch would), and
// nothing is validated, defaulted or garbage-collected.
package fake

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"reconciled.dev/guest/internal/host"
	"reconciled.dev/guest/internal/object"
	"reconciled.dev/guest/reconciled"
)

// Write is one write a reconciler made.
type Write struct {
	// Verb is "create", "update", "patch", "apply" or "delete".
	Verb string
	// Kind is the kind written.
	Kind reconciled.Gvk
	// Namespace and Name name the object.
	Namespace, Name string
	// Subresource is "status" for a status write, else empty.
	Subresource string
	// PatchType is "merge" or "json" for a patch.
	PatchType string
	// Body is what was sent: the object, the patch or the applied object.
	Body json.RawMessage
	// FieldManager is an apply's field manager.
	FieldManager string
	// Force is whether an apply was forced.
	Force bool
}

// Event is one Event a reconciler recorded.
type Event struct {
	// Kind, Namespace and Name are the object the Event is about.
	Kind            reconciled.Gvk
	Namespace, Name string
	// Type is "Normal" or "Warning".
	Type string
	// Reason is the UpperCamelCase reason.
	Reason string
	// Message is the Event's text.
	Message string
}

// Log is one log line.
type Log struct {
	// Level is "debug", "info", "warn" or "error".
	Level string
	// Message is the line.
	Message string
}

type key struct {
	kind            reconciled.Gvk
	namespace, name string
}

type fault struct {
	verb string
	kind reconciled.Gvk
	name string
	err  error
}

// Host is the fake host. Its exported fields are what the reconciler did; read them after
// the reconcile.
type Host struct {
	mu      sync.Mutex
	objects map[key]string
	faults  []fault
	uids    int
	rv      int
	// SettingsJSON is what reconciled.Settings reads; "{}" by default.
	SettingsJSON string
	// Writes are the reconciler's writes, in order.
	Writes []Write
	// Events are the Events it recorded, in order.
	Events []Event
	// Logs are its log lines, in order.
	Logs []Log
	// Spans are the spans it opened, in order.
	Spans []Span
}

// Span is one span the reconciler opened.
type Span struct {
	Name       string
	Attributes map[string]string
	// Open says whether it has not been closed yet.
	Open bool
	// Failure is the message it was closed with as failed; "" for a success.
	Failure string
}

// New is an empty fake host.
func New() *Host {
	return &Host{objects: map[key]string{}, SettingsJSON: "{}"}
}

// Install makes h the host until the test ends.
func Install(t testing.TB, h *Host) {
	t.Helper()
	old := host.Current
	host.Current = h
	t.Cleanup(func() { host.Current = old })
}

// Add stores objects as the cache and the API server hold them. Each must carry its kind
// (apiVersion and kind, or a type given to reconciled.NewKind); one without metadata.uid gets
// one, as the API server would give it.
func (h *Host) Add(objects ...any) error {
	for _, obj := range objects {
		kind, err := reconciled.KindOf(obj)
		if err != nil {
			return err
		}
		hd, data, err := object.HeadOf(obj)
		if err != nil {
			return err
		}
		fields, err := object.ReadFields(data)
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.store(kind, hd.Metadata.Namespace, hd.Metadata.Name, fields)
		h.mu.Unlock()
	}
	return nil
}

// Fail makes the next writes with verb ("create", "update", "patch", "apply", "delete",
// "event", or "get" and "list" for reads) of kind answer err; name limits it to one object
// (empty: any).
func (h *Host) Fail(verb string, kind reconciled.Kinded, name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, fault{verb, kind.GVK(), name, err})
}

// Get is the stored object namespace/name of kind as JSON, or nil.
func (h *Host) Get(kind reconciled.Kinded, namespace, name string) json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	data, ok := h.objects[key{kind.GVK(), namespace, name}]
	if !ok {
		return nil
	}
	return json.RawMessage(data)
}

func (h *Host) store(kind reconciled.Gvk, namespace, name string, fields object.Fields) string {
	fields["apiVersion"], _ = json.Marshal(kind.APIVersion())
	fields["kind"], _ = json.Marshal(kind.Kind)
	meta := object.Fields{}
	if raw, ok := fields["metadata"]; ok {
		if m, err := object.ReadFields(raw); err == nil {
			meta = m
		}
	}
	if _, ok := meta["uid"]; !ok {
		h.uids++
		meta["uid"], _ = json.Marshal(fmt.Sprintf("00000000-0000-4000-8000-%012d", h.uids))
	}
	h.rv++
	meta["resourceVersion"], _ = json.Marshal(strconv.Itoa(h.rv))
	fields["metadata"], _ = json.Marshal(meta)
	data, _ := json.Marshal(fields)
	h.objects[key{kind, namespace, name}] = string(data)
	return string(data)
}

func (h *Host) fault(verb string, kind host.Gvk, name string) error {
	for i, f := range h.faults {
		if f.verb == verb && f.kind == reconciled.Gvk(kind) && (f.name == "" || f.name == name) {
			h.faults = slices.Delete(h.faults, i, i+1)
			return f.err
		}
	}
	return nil
}

func notFound(kind host.Gvk, namespace, name string) error {
	return reconciled.Errorf(reconciled.NotFound, "%s %s not found", kind.Kind, object.Key(namespace, name))
}

// CacheGet implements the host's cache.get.
func (h *Host) CacheGet(kind host.Gvk, namespace, name string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fault("get", kind, name); err != nil {
		return "", err
	}
	data, ok := h.objects[key{reconciled.Gvk(kind), namespace, name}]
	if !ok {
		return "", notFound(kind, namespace, name)
	}
	return data, nil
}

// CacheList implements the host's cache.list: namespace, equality label selectors
// ("a=b,c=d"), fields and pages.
func (h *Host) CacheList(kind host.Gvk, options host.ListOptions) (host.Page, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fault("list", kind, ""); err != nil {
		return host.Page{}, err
	}
	var keys []key
	for k := range h.objects {
		if k.kind == reconciled.Gvk(kind) && (options.Namespace == "" || k.namespace == options.Namespace) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return strings.Compare(a.namespace+"/"+a.name, b.namespace+"/"+b.name)
	})
	var items []string
	for _, k := range keys {
		data := h.objects[k]
		if matches(data, options) {
			items = append(items, data)
		}
	}
	start, _ := strconv.Atoi(options.ContinueToken)
	start = min(start, len(items))
	end := len(items)
	if options.Limit > 0 {
		end = min(start+int(options.Limit), end)
	}
	page := host.Page{Items: items[start:end]}
	if end < len(items) {
		page.ContinueToken = strconv.Itoa(end)
	}
	return page, nil
}

func matches(data string, options host.ListOptions) bool {
	value, err := object.Generic([]byte(data))
	if err != nil {
		return false
	}
	if options.LabelSelector != "" {
		for _, term := range strings.Split(options.LabelSelector, ",") {
			k, v, _ := strings.Cut(term, "=")
			if at(value, "metadata.labels."+strings.TrimSpace(k)) != strings.TrimSpace(v) {
				return false
			}
		}
	}
	for _, f := range options.Fields {
		if at(value, f[0]) != f[1] {
			return false
		}
	}
	return true
}

// at is the text of the value at a dotted path, or "\x00" when there is none. Label keys hold
// dots, so a map key may take the whole rest of the path.
func at(value any, path string) string {
	for path != "" {
		m, ok := value.(map[string]any)
		if !ok {
			return "\x00"
		}
		if v, ok := m[path]; ok {
			value, path = v, ""
			break
		}
		head, rest, _ := strings.Cut(path, ".")
		value, path = m[head], rest
	}
	switch v := value.(type) {
	case string:
		return v
	case nil:
		return "\x00"
	default:
		data, _ := json.Marshal(v)
		return string(data)
	}
}

// APIGet implements the host's api.get, from the same objects as the cache.
func (h *Host) APIGet(kind host.Gvk, namespace, name string) (string, error) {
	return h.CacheGet(kind, namespace, name)
}

// APIList implements the host's api.list, from the same objects as the cache.
func (h *Host) APIList(kind host.Gvk, options host.ListOptions) (host.Page, error) {
	return h.CacheList(kind, options)
}

func (h *Host) record(w Write) {
	h.Writes = append(h.Writes, w)
}

func (h *Host) put(verb, subresource string, kind host.Gvk, namespace, body string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd, err := object.ReadHead([]byte(body))
	if err != nil {
		return "", reconciled.Errorf(reconciled.Invalid, "the body is not a JSON object: %v", err)
	}
	name := hd.Metadata.Name
	h.record(Write{Verb: verb, Kind: reconciled.Gvk(kind), Namespace: namespace, Name: name,
		Subresource: subresource, Body: json.RawMessage(body)})
	if err := h.fault(verb, kind, name); err != nil {
		return "", err
	}
	k := key{reconciled.Gvk(kind), namespace, name}
	old, exists := h.objects[k]
	switch {
	case verb == "create" && exists:
		return "", reconciled.Errorf(reconciled.Conflict, "%s %s already exists", kind.Kind, object.Key(namespace, name))
	case verb != "create" && !exists:
		return "", notFound(kind, namespace, name)
	}
	fields, _ := object.ReadFields([]byte(body))
	if subresource == "status" {
		stored, _ := object.ReadFields([]byte(old))
		stored["status"] = fields["status"]
		fields = stored
	}
	return h.store(reconciled.Gvk(kind), namespace, name, fields), nil
}

// Create implements the host's client.create.
func (h *Host) Create(kind host.Gvk, namespace, obj string) (string, error) {
	return h.put("create", "", kind, namespace, obj)
}

// Update implements the host's client.update.
func (h *Host) Update(kind host.Gvk, namespace, obj string) (string, error) {
	return h.put("update", "", kind, namespace, obj)
}

// UpdateStatus implements the host's client.update-status.
func (h *Host) UpdateStatus(kind host.Gvk, namespace, obj string) (string, error) {
	return h.put("update", "status", kind, namespace, obj)
}

// Patch implements the host's client.patch.
func (h *Host) Patch(kind host.Gvk, namespace, name string, patch host.Patch) (string, error) {
	return h.patch("", kind, namespace, name, patch)
}

// PatchStatus implements the host's client.patch-status.
func (h *Host) PatchStatus(kind host.Gvk, namespace, name string, patch host.Patch) (string, error) {
	return h.patch("status", kind, namespace, name, patch)
}

func (h *Host) patch(subresource string, kind host.Gvk, namespace, name string, patch host.Patch) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := Write{Verb: "patch", Kind: reconciled.Gvk(kind), Namespace: namespace, Name: name,
		Subresource: subresource, Body: json.RawMessage(patch.Body)}
	switch patch.Type {
	case host.Merge:
		w.PatchType = "merge"
	case host.JSON:
		w.PatchType = "json"
	default:
		w.Verb, w.FieldManager, w.Force = "apply", patch.FieldManager, patch.Force
	}
	h.record(w)
	if err := h.fault(w.Verb, kind, name); err != nil {
		return "", err
	}
	k := key{reconciled.Gvk(kind), namespace, name}
	old, exists := h.objects[k]
	if !exists && (patch.Type != host.Apply || subresource == "status") {
		return "", notFound(kind, namespace, name)
	}
	if !exists {
		old = "{}"
	}
	current, err := object.Generic([]byte(old))
	if err != nil {
		return "", err
	}
	change, err := object.Generic([]byte(patch.Body))
	if err != nil {
		return "", reconciled.Errorf(reconciled.Invalid, "the patch is not JSON: %v", err)
	}
	var patched any
	if patch.Type == host.JSON {
		if patched, err = jsonPatch(current, change); err != nil {
			return "", reconciled.Errorf(reconciled.Invalid, "the JSON patch does not apply: %v", err)
		}
	} else {
		patched = mergePatch(current, change)
	}
	if subresource == "status" {
		// The patch changed current in place: the object as stored is read again.
		before, _ := object.Generic([]byte(old))
		c, _ := before.(map[string]any)
		p, _ := patched.(map[string]any)
		if c != nil && p != nil {
			c["status"] = p["status"]
			patched = c
		}
	}
	data, _ := json.Marshal(patched)
	fields, err := object.ReadFields(data)
	if err != nil {
		return "", reconciled.Errorf(reconciled.Invalid, "the patched object is not a JSON object")
	}
	return h.store(reconciled.Gvk(kind), namespace, name, fields), nil
}

// mergePatch is RFC 7386.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

// jsonPatch is RFC 6902's test, add, remove and replace.
func jsonPatch(doc, ops any) (any, error) {
	list, ok := ops.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array of operations")
	}
	for _, raw := range list {
		o, _ := raw.(map[string]any)
		path, _ := o["path"].(string)
		var err error
		switch o["op"] {
		case "test":
			var got any
			if got, err = pointer(doc, path, "get", nil); err == nil && !reflect.DeepEqual(got, o["value"]) {
				err = fmt.Errorf("test of %s failed", path)
			}
		case "add", "replace", "remove":
			doc, err = pointer(doc, path, o["op"].(string), o["value"])
		default:
			err = fmt.Errorf("unsupported op %v", o["op"])
		}
		if err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// pointer does op at the JSON pointer path of doc and returns the new doc (for "get", the
// value there).
func pointer(doc any, path, op string, value any) (any, error) {
	if path == "" {
		if op == "get" {
			return doc, nil
		}
		return value, nil
	}
	head, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	head = strings.ReplaceAll(strings.ReplaceAll(head, "~1", "/"), "~0", "~")
	last := !strings.Contains(strings.TrimPrefix(path, "/"), "/")
	switch d := doc.(type) {
	case map[string]any:
		if last {
			switch op {
			case "get":
				return d[head], nil
			case "remove":
				delete(d, head)
			default:
				d[head] = value
			}
			return d, nil
		}
		child, err := pointer(d[head], "/"+rest, op, value)
		if err != nil {
			return nil, err
		}
		if op != "get" {
			d[head] = child
			return d, nil
		}
		return child, nil
	case []any:
		i := len(d)
		if head != "-" {
			n, err := strconv.Atoi(head)
			if err != nil || n < 0 || n > len(d) || (n == len(d) && op != "add") {
				return nil, fmt.Errorf("no index %s", head)
			}
			i = n
		}
		if last {
			switch op {
			case "get":
				return d[i], nil
			case "remove":
				return slices.Delete(d, i, i+1), nil
			case "replace":
				d[i] = value
				return d, nil
			default:
				return slices.Insert(d, i, value), nil
			}
		}
		child, err := pointer(d[i], "/"+rest, op, value)
		if err != nil || op == "get" {
			return child, err
		}
		d[i] = child
		return d, nil
	case nil:
		if op == "get" {
			return nil, nil
		}
		return nil, fmt.Errorf("no parent for %s", path)
	default:
		return nil, fmt.Errorf("%s is not in a container", path)
	}
}

// Delete implements the host's client.delete.
func (h *Host) Delete(kind host.Gvk, namespace, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record(Write{Verb: "delete", Kind: reconciled.Gvk(kind), Namespace: namespace, Name: name})
	if err := h.fault("delete", kind, name); err != nil {
		return err
	}
	k := key{reconciled.Gvk(kind), namespace, name}
	if _, ok := h.objects[k]; !ok {
		return notFound(kind, namespace, name)
	}
	delete(h.objects, k)
	return nil
}

// RecordEvent implements the host's client.record-event.
func (h *Host) RecordEvent(regarding host.Gvk, namespace, name string, warning bool, reason, message string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fault("event", regarding, name); err != nil {
		return err
	}
	t := "Normal"
	if warning {
		t = "Warning"
	}
	h.Events = append(h.Events, Event{reconciled.Gvk(regarding), namespace, name, t, reason, message})
	return nil
}

// Log implements the host's log.
func (h *Host) Log(level host.Level, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Logs = append(h.Logs, Log{[...]string{"debug", "info", "warn", "error"}[level], message})
}

// Settings implements the host's settings.get.
func (h *Host) Settings() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.SettingsJSON
}

// SpanOpen implements the host's trace.open: handles count from 1.
func (h *Host) SpanOpen(name string) uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Spans = append(h.Spans, Span{Name: name, Attributes: map[string]string{}, Open: true})
	return uint32(len(h.Spans))
}

// span is the open span of handle span, or nil.
func (h *Host) span(span uint32) *Span {
	if span == 0 || int(span) > len(h.Spans) || !h.Spans[span-1].Open {
		return nil
	}
	return &h.Spans[span-1]
}

// SpanSetAttribute implements the host's trace.set-attribute.
func (h *Host) SpanSetAttribute(span uint32, key, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.span(span); s != nil {
		s.Attributes[key] = value
	}
}

// SpanClose implements the host's trace.close.
func (h *Host) SpanClose(span uint32, failure *string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.span(span); s != nil {
		s.Open = false
		if failure != nil {
			s.Failure = *failure
		}
	}
}
