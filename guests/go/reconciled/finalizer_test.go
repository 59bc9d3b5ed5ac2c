package reconciled_test

import (
	"encoding/json"
	"testing"

	"reconciled.dev/guest/fake"
	"reconciled.dev/guest/reconciled"
)

const finalizer = "example.com/cleanup"

func run(t *testing.T, d *Deployment) (h *fake.Host, applied, cleaned *Deployment, err error) {
	t.Helper()
	h = fake.New()
	fake.Install(t, h)
	if err := h.Add(d); err != nil {
		t.Fatal(err)
	}
	_, err = reconciled.WithFinalizer(d, finalizer,
		func(d *Deployment) (reconciled.Outcome, error) { applied = d; return reconciled.Done(), nil },
		func(d *Deployment) (reconciled.Outcome, error) { cleaned = d; return reconciled.Done(), nil })
	return h, applied, cleaned, err
}

func body(t *testing.T, w fake.Write) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(w.Body, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestALiveObjectWithoutTheFinalizerGetsItByAPatchThatTestsTheListFirst(t *testing.T) {
	h, applied, cleaned, err := run(t, deployment("web", "u1"))
	if err != nil || cleaned != nil || applied == nil {
		t.Fatal(err, applied, cleaned)
	}
	if len(h.Writes) != 1 || h.Writes[0].PatchType != "json" {
		t.Fatalf("%+v", h.Writes)
	}
	want := `[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["example.com/cleanup"]}]`
	if got := body(t, h.Writes[0]); got != want {
		t.Fatalf("got %s", got)
	}
	if !reconciled.HasFinalizer(applied, finalizer) {
		t.Fatal("apply runs with the patched object")
	}

	d := deployment("web", "u1")
	d.Metadata.Finalizers = []string{"other"}
	h, _, _, err = run(t, d)
	want = `[{"op":"test","path":"/metadata/finalizers","value":["other"]},{"op":"add","path":"/metadata/finalizers/-","value":"example.com/cleanup"}]`
	if got := body(t, h.Writes[0]); err != nil || got != want {
		t.Fatalf("got %s, %v", got, err)
	}
}

func TestALiveObjectWithTheFinalizerIsAppliedWithNoWrite(t *testing.T) {
	d := deployment("web", "u1")
	d.Metadata.Finalizers = []string{"other", finalizer}
	h, applied, _, err := run(t, d)
	if err != nil || applied != d || len(h.Writes) != 0 {
		t.Fatal(err, h.Writes)
	}
}

func TestAnObjectBeingDeletedIsCleanedUpThenItsEntryRemovedAtItsIndex(t *testing.T) {
	d := deployment("web", "u1")
	d.Metadata.Finalizers = []string{"other", finalizer}
	now := reconciled.Now()
	d.Metadata.DeletionTimestamp = &now
	h, applied, cleaned, err := run(t, d)
	if err != nil || applied != nil || cleaned != d {
		t.Fatal(err, applied, cleaned)
	}
	want := `[{"op":"test","path":"/metadata/finalizers/1","value":"example.com/cleanup"},{"op":"remove","path":"/metadata/finalizers/1"}]`
	if got := body(t, h.Writes[0]); got != want {
		t.Fatalf("got %s", got)
	}
	var stored Deployment
	_ = json.Unmarshal(h.Get(deployments, "ns", "web"), &stored)
	if reconciled.HasFinalizer(&stored, finalizer) || !reconciled.HasFinalizer(&stored, "other") {
		t.Fatalf("%+v", stored.Metadata.Finalizers)
	}
}

func TestAnObjectBeingDeletedWithoutTheFinalizerIsLeftAlone(t *testing.T) {
	d := deployment("web", "u1")
	now := reconciled.Now()
	d.Metadata.DeletionTimestamp = &now
	h, applied, cleaned, err := run(t, d)
	if err != nil || applied != nil || cleaned != nil || len(h.Writes) != 0 {
		t.Fatal(err, applied, cleaned, h.Writes)
	}
}

func TestAFailedTestOfTheListIsAConflict(t *testing.T) {
	h := fake.New()
	fake.Install(t, h)
	d := deployment("web", "u1")
	_ = h.Add(d)
	h.Fail("patch", deployments, "web", reconciled.Errorf(reconciled.Invalid, "test failed"))
	_, err := reconciled.WithFinalizer(d, finalizer,
		func(*Deployment) (reconciled.Outcome, error) { t.Fatal("apply ran"); return reconciled.Done(), nil },
		func(*Deployment) (reconciled.Outcome, error) { return reconciled.Done(), nil })
	if !reconciled.IsConflict(err) {
		t.Fatal(err)
	}
}
