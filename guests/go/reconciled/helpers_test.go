package reconciled_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"reconciled.dev/guest/fake"
	"reconciled.dev/guest/reconciled"
)

// Deployment is a typed object of a kind given to NewKind, without apiVersion and kind set.
type Deployment struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
}

var deployments = reconciled.NewKind[Deployment]("apps", "v1", "Deployment")

func deployment(name, uid string) *Deployment {
	return &Deployment{Metadata: reconciled.ObjectMeta{Name: name, Namespace: "ns", UID: uid}}
}

func TestErrorsAreMatchedByCaseThroughWrapping(t *testing.T) {
	err := reconciled.Errorf(reconciled.NotFound, "ConfigMap ns/a")
	if err.Error() != "not-found: ConfigMap ns/a" {
		t.Fatal(err.Error())
	}
	if !reconciled.IsNotFound(err) || reconciled.IsConflict(err) || reconciled.IsNotFound(nil) {
		t.Fatal("IsNotFound")
	}
	if c, ok := reconciled.CaseOf(err); !ok || c.String() != "not-found" {
		t.Fatal(c, ok)
	}
	if reconciled.UnindexedField.String() != "unindexed-field" || reconciled.TooLarge.String() != "too-large" {
		t.Fatal("case names are the WIT's")
	}
}

func TestTheKindOfAnObjectIsItsOwnElseItsTypes(t *testing.T) {
	if k, err := reconciled.KindOf(deployment("web", "u1")); err != nil || k != deployments.GVK() {
		t.Fatal(k, err)
	}
	cm := reconciled.Object{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}}
	if k, err := reconciled.KindOf(cm); err != nil || k.String() != "v1/ConfigMap" {
		t.Fatal(k, err)
	}
	_, err := reconciled.KindOf(reconciled.Object{"metadata": map[string]any{"name": "a"}})
	if !reconciled.IsInvalid(err) || !strings.Contains(err.Error(), "NewKind") {
		t.Fatal(err)
	}
	if g := reconciled.GvkOf("apps/v1", "Deployment"); g != deployments.GVK() || g.APIVersion() != "apps/v1" {
		t.Fatal(g)
	}
}

func TestTheControllerReferenceNamesTheOwnerByKindNameAndUID(t *testing.T) {
	r, err := reconciled.ControllerReference(deployment("web", "u1"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(r)
	want := `{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"u1","controller":true,"blockOwnerDeletion":true}`
	if string(got) != want {
		t.Fatalf("got %s", got)
	}
	if _, err := reconciled.ControllerReference(deployment("web", "")); !reconciled.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.uid") {
		t.Fatal(err)
	}
}

func TestSettingTheControllerReplacesTheSameOwnerKeepsOthersAndRefusesASecondController(t *testing.T) {
	web, api := deployment("web", "u1"), deployment("api", "u2")
	plain, _ := reconciled.ControllerReference(api)
	plain.Controller = nil
	cm := reconciled.Object{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns", "ownerReferences": []any{plain}}}
	for range 2 {
		if err := reconciled.SetControllerReference(web, cm); err != nil {
			t.Fatal(err)
		}
	}
	refs := cm["metadata"].(map[string]any)["ownerReferences"].([]any)
	if len(refs) != 2 {
		t.Fatalf("%v", refs)
	}
	if !reconciled.IsControlledBy(cm, web) || reconciled.IsControlledBy(cm, api) {
		t.Fatal("IsControlledBy")
	}
	if c := reconciled.ControllerOf(cm); c == nil || c.Name != "web" || !c.IsController() {
		t.Fatal(c)
	}
	err := reconciled.SetControllerReference(api, cm)
	if !reconciled.IsInvalid(err) || !strings.Contains(err.Error(), "already controlled by Deployment web") {
		t.Fatal(err)
	}

	typed := deployment("child", "")
	if err := reconciled.SetControllerReference(web, typed); err != nil {
		t.Fatal(err)
	}
	if len(typed.Metadata.OwnerReferences) != 1 || typed.Metadata.OwnerReferences[0].UID != "u1" {
		t.Fatalf("%+v", typed.Metadata)
	}
	other := &Deployment{Metadata: reconciled.ObjectMeta{Name: "x", Namespace: "other"}}
	if err := reconciled.SetControllerReference(web, other); !strings.Contains(err.Error(), "only own objects in that namespace") {
		t.Fatal(err)
	}
}

func TestTheTransitionTimeMovesOnlyWhenTheStatusChanges(t *testing.T) {
	at := func(s int64) reconciled.Time { return reconciled.Time{Time: time.Unix(s, 0)} }
	var conds []reconciled.Condition
	if !reconciled.SetCondition(&conds, reconciled.Condition{Type: "Ready", Status: "False", Reason: "Waiting", LastTransitionTime: at(10)}) {
		t.Fatal("a new type is a change")
	}
	if !reconciled.SetCondition(&conds, reconciled.Condition{Type: "Ready", Status: "False", Reason: "Still", LastTransitionTime: at(20)}) {
		t.Fatal("a new reason is a change")
	}
	if c := reconciled.FindCondition(conds, "Ready"); c.Reason != "Still" || c.LastTransitionTime.Unix() != 10 {
		t.Fatalf("%+v", c)
	}
	if reconciled.SetCondition(&conds, reconciled.Condition{Type: "Ready", Status: "False", Reason: "Still", LastTransitionTime: at(99)}) {
		t.Fatal("the same condition again changes nothing, whatever its time")
	}
	if !reconciled.SetCondition(&conds, reconciled.Condition{Type: "Ready", Status: "True", Reason: "Done", ObservedGeneration: 2}) {
		t.Fatal("a new status is a change")
	}
	if c := conds[0]; c.LastTransitionTime.Unix() == 10 || !reconciled.IsConditionTrue(conds, "Ready") {
		t.Fatalf("%+v", c)
	}
	data, _ := json.Marshal(conds[0])
	var back map[string]any
	_ = json.Unmarshal(data, &back)
	if s := back["lastTransitionTime"].(string); len(s) != 20 || !strings.HasSuffix(s, "Z") {
		t.Fatalf("metav1.Time's format: %s", s)
	}
	reconciled.SetCondition(&conds, reconciled.Condition{Type: "Degraded", Status: "False"})
	if !reconciled.RemoveCondition(&conds, "Ready") || reconciled.RemoveCondition(&conds, "Ready") || len(conds) != 1 {
		t.Fatalf("%+v", conds)
	}
}

func TestSettingsDecodeWhatTheDeploymentGave(t *testing.T) {
	h := fake.New()
	fake.Install(t, h)
	h.SettingsJSON = `{"copies": 2}`
	var s struct {
		Copies int  `json:"copies"`
		Debug  bool `json:"debug"`
	}
	if err := reconciled.Settings(&s); err != nil || s.Copies != 2 || s.Debug {
		t.Fatal(s, err)
	}
	h.SettingsJSON = `{"copies": "two"}`
	if err := reconciled.Settings(&s); !reconciled.IsInvalid(err) {
		t.Fatal(err)
	}
}

func TestInSpanEndsItsSpanAndMarksItFailedWithTheError(t *testing.T) {
	h := fake.New()
	fake.Install(t, h)
	if err := reconciled.InSpan("render", func(s *reconciled.Span) error {
		s.Attribute("template", "a").Attribute("replicas", 3)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	conflict := reconciled.Errorf(reconciled.Conflict, "changed meanwhile")
	if err := reconciled.InSpan("write", func(*reconciled.Span) error { return conflict }); err != conflict {
		t.Fatal(err)
	}
	late := reconciled.OpenSpan("once")
	late.End()
	late.Attribute("late", "x")
	late.Fail("too late")
	want := []fake.Span{
		{Name: "render", Attributes: map[string]string{"template": "a", "replicas": "3"}},
		{Name: "write", Attributes: map[string]string{}, Failure: conflict.Error()},
		{Name: "once", Attributes: map[string]string{}},
	}
	if len(h.Spans) != len(want) {
		t.Fatalf("%+v", h.Spans)
	}
	for i, s := range h.Spans {
		if s.Name != want[i].Name || s.Open || s.Failure != want[i].Failure || len(s.Attributes) != len(want[i].Attributes) {
			t.Fatalf("span %d: %+v, want %+v", i, s, want[i])
		}
		for k, v := range want[i].Attributes {
			if s.Attributes[k] != v {
				t.Fatalf("span %d: %+v, want %+v", i, s, want[i])
			}
		}
	}
}
