package main

import (
	"encoding/json"
	"testing"

	"reconciled.dev/guest/fake"
	"reconciled.dev/guest/reconciled"
)

func reservation(name, pool string) *Reservation {
	return &Reservation{
		Metadata: reconciled.ObjectMeta{Name: name, Namespace: "default", Generation: 1, Finalizers: []string{finalizer}},
		Spec:     ReservationSpec{Pool: pool},
	}
}

func TestAPoolMapsToTheReservationsThatNameIt(t *testing.T) {
	h := fake.New()
	fake.Install(t, h)
	if err := h.Add(reservation("a", "gpus"), reservation("b", "cpus"), reservation("c", "gpus")); err != nil {
		t.Fatal(err)
	}
	pool, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "gpus", "namespace": "default"}})
	got := reserver{}.Map(pools.GVK(), pool)
	want := []reconciled.Request{{Namespace: "default", Name: "a"}, {Namespace: "default", Name: "c"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v", got)
	}
}

func TestAReservationIsRecordedInItsPoolAndReadyOnce(t *testing.T) {
	h := fake.New()
	fake.Install(t, h)
	pool := &Pool{Metadata: reconciled.ObjectMeta{Name: "gpus", Namespace: "default"}}
	if err := h.Add(reservation("a", "gpus"), pool); err != nil {
		t.Fatal(err)
	}
	req := reconciled.Request{Namespace: "default", Name: "a"}
	if _, err := (reserver{}).Reconcile(req); err != nil {
		t.Fatal(err)
	}
	var stored Pool
	_ = json.Unmarshal(h.Get(pools, "default", "gpus"), &stored)
	if stored.Data["a"] != "1" {
		t.Fatalf("pool data %v", stored.Data)
	}
	if len(h.Events) != 1 || h.Events[0].Reason != "Reserved" {
		t.Fatalf("%+v", h.Events)
	}
	// Again: nothing changed, so nothing is written and no Event recorded.
	writes := len(h.Writes)
	if _, err := (reserver{}).Reconcile(req); err != nil {
		t.Fatal(err)
	}
	if len(h.Writes) != writes || len(h.Events) != 1 {
		t.Fatalf("%+v %+v", h.Writes[writes:], h.Events)
	}
}
