package client_test

import (
	"encoding/json"
	"testing"

	"reconciled.dev/guest/cache"
	"reconciled.dev/guest/client"
	"reconciled.dev/guest/events"
	"reconciled.dev/guest/fake"
	"reconciled.dev/guest/reconciled"
)

type ConfigMap struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	Data     map[string]string     `json:"data,omitempty"`
}

type Generator struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	Spec     struct {
		Copies int `json:"copies"`
	} `json:"spec"`
	Status *struct {
		Generated int `json:"generated"`
	} `json:"status,omitempty"`
}

var (
	configMaps = reconciled.NewKind[ConfigMap]("", "v1", "ConfigMap")
	generators = reconciled.NewKind[Generator]("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator")
	raw        = reconciled.NewKind[reconciled.Object]("", "v1", "ConfigMap")
)

func sent(t *testing.T, w fake.Write) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(w.Body, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func setup(t *testing.T, objects ...any) *fake.Host {
	t.Helper()
	h := fake.New()
	fake.Install(t, h)
	if err := h.Add(objects...); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestApplySendsTheObjectWithItsKindFilledIn(t *testing.T) {
	h := setup(t)
	cm := &ConfigMap{Metadata: reconciled.ObjectMeta{Name: "a", Namespace: "ns"}, Data: map[string]string{"k": "v"}}
	got, err := client.Apply(cm, "me", true)
	if err != nil || got.Data["k"] != "v" || got.Metadata.UID == "" {
		t.Fatal(got, err)
	}
	w := h.Writes[0]
	if w.Verb != "apply" || w.FieldManager != "me" || !w.Force || w.Kind != configMaps.GVK() || w.Name != "a" {
		t.Fatalf("%+v", w)
	}
	if b := sent(t, w); b != `{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}` {
		t.Fatal(b)
	}
}

func TestApplyStatusSendsOnlyTheNamesAndTheStatus(t *testing.T) {
	g := &Generator{Metadata: reconciled.ObjectMeta{Name: "g", Namespace: "ns", Generation: 3}}
	g.Spec.Copies = 2
	h := setup(t, g)
	g.Status = &struct {
		Generated int `json:"generated"`
	}{2}
	got, err := client.ApplyStatus(g, "me", true)
	if err != nil || got.Status == nil || got.Status.Generated != 2 || got.Spec.Copies != 2 {
		t.Fatal(got, err)
	}
	w := h.Writes[0]
	if w.Subresource != "status" || w.Verb != "apply" {
		t.Fatalf("%+v", w)
	}
	want := `{"apiVersion":"example.reconciled.dev/v1alpha1","kind":"ConfigMapGenerator","metadata":{"name":"g","namespace":"ns"},"status":{"generated":2}}`
	if b := sent(t, w); b != want {
		t.Fatal(b)
	}
}

func TestCreateOrUpdateCreatesUpdatesAndLeavesAloneWhatIsAsWanted(t *testing.T) {
	h := setup(t)
	set := func(v string) func(*ConfigMap) error {
		return func(cm *ConfigMap) error { cm.Data = map[string]string{"k": v}; return nil }
	}
	changed, cm, err := client.CreateOrUpdate(configMaps, "ns", "a", set("1"))
	if err != nil || changed != reconciled.Created || cm.Data["k"] != "1" || h.Writes[0].Verb != "create" {
		t.Fatal(changed, cm, err)
	}
	if b := sent(t, h.Writes[0]); b != `{"apiVersion":"v1","data":{"k":"1"},"kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}` {
		t.Fatal(b)
	}
	if changed, _, err = client.CreateOrUpdate(configMaps, "ns", "a", set("1")); err != nil || changed != reconciled.Unchanged || len(h.Writes) != 1 {
		t.Fatal(changed, err, h.Writes)
	}
	if changed, cm, err = client.CreateOrUpdate(configMaps, "ns", "a", set("2")); err != nil || changed != reconciled.Updated || cm.Data["k"] != "2" {
		t.Fatal(changed, err)
	}
	_, _, err = client.CreateOrUpdate(configMaps, "ns", "a", func(cm *ConfigMap) error { cm.Metadata.Name = "b"; return nil })
	if !reconciled.IsInvalid(err) {
		t.Fatal(err)
	}
}

func TestApplyIfChangedWritesOnlyWhatTheCacheDoesNotHold(t *testing.T) {
	h := setup(t)
	cm := &ConfigMap{Metadata: reconciled.ObjectMeta{Name: "a", Namespace: "ns"}, Data: map[string]string{"k": "v"}}
	changed, _, err := client.ApplyIfChanged(cm, "me")
	if err != nil || changed != reconciled.Created || !h.Writes[0].Force {
		t.Fatal(changed, err)
	}
	if changed, got, err := client.ApplyIfChanged(cm, "me"); err != nil || changed != reconciled.Unchanged || got.Metadata.UID == "" || len(h.Writes) != 1 {
		t.Fatal(changed, err, h.Writes)
	}
	cm.Data["k"] = "w"
	if changed, _, err := client.ApplyIfChanged(cm, "me"); err != nil || changed != reconciled.Updated || len(h.Writes) != 2 {
		t.Fatal(changed, err)
	}
}

func TestPatchesDeletesAndEventsNameTheirObject(t *testing.T) {
	h := setup(t, reconciled.Object{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "a", "namespace": "ns", "finalizers": []any{"x"}}, "data": map[string]any{"k": "v"}})
	got, err := client.MergePatch(raw, "ns", "a", map[string]any{"data": map[string]any{"k": nil, "n": "1"}})
	if err != nil || (*got)["data"].(map[string]any)["n"] != "1" || (*got)["data"].(map[string]any)["k"] != nil {
		t.Fatal(got, err)
	}
	if _, err := client.JSONPatch(raw, "ns", "a", []map[string]any{{"op": "test", "path": "/metadata/finalizers/0", "value": "y"}}); !reconciled.IsInvalid(err) {
		t.Fatal(err)
	}
	if _, err := client.MergePatchStatus(raw, "ns", "a", map[string]any{"status": map[string]any{"ok": true}, "data": nil}); err != nil {
		t.Fatal(err)
	}
	cm, _ := cache.Get(raw, "ns", "a")
	if (*cm)["data"] == nil || (*cm)["status"] == nil {
		t.Fatalf("a status patch changes the status only: %v", *cm)
	}
	if err := events.Warning(cm, "Broken", "it broke"); err != nil {
		t.Fatal(err)
	}
	if e := h.Events[0]; e.Kind != raw.GVK() || e.Name != "a" || e.Namespace != "ns" || e.Type != "Warning" || e.Reason != "Broken" {
		t.Fatalf("%+v", e)
	}
	if err := client.Delete(raw, "ns", "a"); err != nil {
		t.Fatal(err)
	}
	if err := client.Delete(raw, "ns", "a"); !reconciled.IsNotFound(err) {
		t.Fatal(err)
	}
}

func TestAHostErrorReachesTheCallerWithItsCase(t *testing.T) {
	h := setup(t)
	h.Fail("apply", configMaps, "", reconciled.Errorf(reconciled.Forbidden, "no"))
	_, err := client.Apply(&ConfigMap{Metadata: reconciled.ObjectMeta{Name: "a", Namespace: "ns"}}, "me", true)
	if !reconciled.IsForbidden(err) {
		t.Fatal(err)
	}
}
