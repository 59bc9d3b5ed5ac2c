// Command reservation-go is the second example reconciler in Go, exactly as
// examples/reservation/README.md says: a Reservation records spec.slots under its own name in
// the data of a pool ConfigMap (spec.pool, same namespace), with a finalizer that removes the
// entry before the Reservation goes, a Ready condition and its status by server-side apply,
// all with the SDK's helpers.
package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"reconciled.dev/guest/cache"
	"reconciled.dev/guest/client"
	"reconciled.dev/guest/events"
	"reconciled.dev/guest/log"
	"reconciled.dev/guest/reconciled"
)

// finalizer holds a Reservation until its entry is out of the pool.
const finalizer = "example.reconciled.dev/release"

// fieldManager is the server-side apply field manager.
const fieldManager = "reservation"

// Reservation is the custom resource (examples/reservation/crd.yaml).
type Reservation struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	Spec     ReservationSpec       `json:"spec"`
	Status   *ReservationStatus    `json:"status,omitempty"`
}

// ReservationSpec is what to reserve, and where.
type ReservationSpec struct {
	// Pool is the ConfigMap, in the same namespace, whose data records the reservation.
	Pool string `json:"pool"`
	// Slots is how many slots to reserve; the CRD defaults it to 1.
	Slots *int32 `json:"slots,omitempty"`
}

// ReservationStatus is what the last reconcile saw.
type ReservationStatus struct {
	// ObservedGeneration is the metadata.generation the last reconcile acted on.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Conditions holds Ready.
	Conditions []reconciled.Condition `json:"conditions"`
}

// Pool is the part of a v1 ConfigMap this reconciler reads.
type Pool struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	Data     map[string]string     `json:"data,omitempty"`
}

var (
	reservations = reconciled.NewKind[Reservation]("example.reconciled.dev", "v1alpha1", "Reservation")
	pools        = reconciled.NewKind[Pool]("", "v1", "ConfigMap")
)

type reserver struct{}

func (reserver) Describe() reconciled.Description {
	return reconciled.Describe(reservations).WatchesGuestMap(pools).FieldIndex(reservations, "spec.pool")
}

// Map is the Reservations in a pool's namespace whose spec.pool is its name.
func (reserver) Map(_ reconciled.Gvk, object json.RawMessage) []reconciled.Request {
	var pool Pool
	if err := json.Unmarshal(object, &pool); err != nil {
		log.Warnf("cannot read a ConfigMap to map: %v", err)
		return nil
	}
	using := cache.ListOptions{}.InNamespace(pool.Metadata.Namespace).Field("spec.pool", pool.Metadata.Name)
	found, err := cache.List(reservations, using)
	if err != nil {
		log.Warnf("cannot list the Reservations of pool %s/%s: %v", pool.Metadata.Namespace, pool.Metadata.Name, err)
		return nil
	}
	requests := make([]reconciled.Request, len(found))
	for i, r := range found {
		requests[i] = reconciled.Request{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name}
	}
	return requests
}

func (reserver) Reconcile(req reconciled.Request) (reconciled.Outcome, error) {
	r, err := cache.GetOpt(reservations, req.Namespace, req.Name)
	if err != nil || r == nil {
		return reconciled.Done(), err
	}
	return reconciled.WithFinalizer(r, finalizer, reserve, release)
}

func slots(r *Reservation) int32 {
	if r.Spec.Slots == nil {
		return 1
	}
	return *r.Spec.Slots
}

// reserve records the reservation in its pool and says so in the Ready condition.
func reserve(r *Reservation) (reconciled.Outcome, error) {
	generation, n, poolName := r.Metadata.Generation, slots(r), r.Spec.Pool
	var conditions []reconciled.Condition
	observed := int64(0)
	if r.Status != nil {
		conditions, observed = slices.Clone(r.Status.Conditions), r.Status.ObservedGeneration
	}

	pool, err := cache.GetOpt(pools, r.Metadata.Namespace, poolName)
	if err != nil {
		return reconciled.Done(), err
	}
	ready := reconciled.Condition{Type: "Ready", ObservedGeneration: generation}
	if pool == nil {
		ready.Status, ready.Reason = reconciled.ConditionFalse, "PoolMissing"
		ready.Message = fmt.Sprintf("ConfigMap %s does not exist", poolName)
	} else {
		want := strconv.Itoa(int(n))
		if got, ok := pool.Data[r.Metadata.Name]; !ok || got != want {
			patch := map[string]any{"data": map[string]any{r.Metadata.Name: want}}
			if _, err := client.MergePatch(pools, r.Metadata.Namespace, poolName, patch); err != nil {
				return reconciled.Done(), err
			}
		}
		ready.Status, ready.Reason = reconciled.ConditionTrue, "Reserved"
		ready.Message = fmt.Sprintf("%d slots reserved in ConfigMap %s", n, poolName)
	}

	before := ""
	if c := reconciled.FindCondition(conditions, "Ready"); c != nil {
		before = c.Status
	}
	if reconciled.SetCondition(&conditions, ready) || observed != generation {
		status := &Reservation{Metadata: reconciled.ObjectMeta{Name: r.Metadata.Name, Namespace: r.Metadata.Namespace},
			Status: &ReservationStatus{ObservedGeneration: generation, Conditions: conditions}}
		if _, err := client.ApplyStatus(status, fieldManager, true); err != nil {
			return reconciled.Done(), err
		}
	}
	if before != ready.Status {
		record, reason := events.Normal, "Reserved"
		if ready.Status == reconciled.ConditionFalse {
			record, reason = events.Warning, "PoolMissing"
		}
		if err := record(r, reason, ready.Message); err != nil {
			log.Warnf("cannot record event on %s/%s: %v", r.Metadata.Namespace, r.Metadata.Name, err)
		}
	}
	return reconciled.Done(), nil
}

// release takes the reservation's entry out of its pool, before the finalizer goes.
func release(r *Reservation) (reconciled.Outcome, error) {
	pool, err := cache.GetOpt(pools, r.Metadata.Namespace, r.Spec.Pool)
	if err != nil {
		return reconciled.Done(), err
	}
	if _, ok := pool.dataKey(r.Metadata.Name); ok {
		patch := map[string]any{"data": map[string]any{r.Metadata.Name: nil}}
		// A pool gone meanwhile holds no entry: that is what was wanted.
		if _, err := client.MergePatch(pools, r.Metadata.Namespace, r.Spec.Pool, patch); err != nil && !reconciled.IsNotFound(err) {
			return reconciled.Done(), err
		}
	}
	message := fmt.Sprintf("released %d slots in ConfigMap %s", slots(r), r.Spec.Pool)
	if err := events.Normal(r, "Released", message); err != nil {
		log.Warnf("cannot record event on %s/%s: %v", r.Metadata.Namespace, r.Metadata.Name, err)
	}
	return reconciled.Done(), nil
}

// dataKey is the pool's entry for key, if the pool exists and has one.
func (p *Pool) dataKey(key string) (string, bool) {
	if p == nil {
		return "", false
	}
	v, ok := p.Data[key]
	return v, ok
}

func init() { reconciled.Export(reserver{}) }

func main() {}
