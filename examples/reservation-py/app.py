"""Example reconciler, in Python: a Reservation records ``spec.slots`` under its own name in the
data of a pool ConfigMap (``spec.pool``, same namespace). The pool is not owned by the
Reservation, so the garbage collector cannot clean it up: a finalizer removes the entry before
the Reservation goes. The same reconciler as examples/reservation (Rust), passing the same
fixtures; its README says exactly what each reconcile does.
"""

import copy

from reconciled_guest import (
    Kinds,
    ListOptions,
    Outcome,
    ReconcileError,
    Reconciler,
    Request,
    cache,
    client,
    describe,
    events,
    export,
    find_condition,
    gvk,
    log,
    set_condition,
    with_finalizer,
)

# The custom resource (../reservation/crd.yaml).
RESERVATION = gvk("example.reconciled.dev/v1alpha1", "Reservation")

# Held while the pool may still record this Reservation.
FINALIZER = "example.reconciled.dev/release"

# Server-side apply field manager of the status.
FIELD_MANAGER = "reservation"


def reserve(reservation):
    """Records the reservation in the pool, and says in the ``Ready`` condition whether it could."""
    meta = reservation["metadata"]
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    generation = meta.get("generation", 0)
    spec = reservation.get("spec") or {}
    slots = spec.get("slots", 1)
    pool = spec.get("pool", "")
    status = reservation.get("status") or {}
    conditions = copy.deepcopy(status.get("conditions") or [])

    pool_map = cache.get_opt(Kinds.CONFIG_MAP, namespace, pool)
    if pool_map is None:
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "PoolMissing",
            "message": f"ConfigMap {pool} does not exist",
            "observedGeneration": generation,
        }
    else:
        if (pool_map.get("data") or {}).get(name) != str(slots):
            client.merge_patch(Kinds.CONFIG_MAP, namespace, pool, {"data": {name: str(slots)}})
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "Reserved",
            "message": f"{slots} slots reserved in ConfigMap {pool}",
            "observedGeneration": generation,
        }

    before = find_condition(conditions, "Ready")
    before_status = before["status"] if before is not None else None
    changed = set_condition(conditions, ready)
    if changed or status.get("observedGeneration", 0) != generation:
        client.apply_status(
            RESERVATION,
            {
                "metadata": {"name": name, "namespace": namespace},
                "status": {"observedGeneration": generation, "conditions": conditions},
            },
            FIELD_MANAGER,
            force=True,
        )
    if ready["status"] != before_status:
        try:
            if ready["status"] == "True":
                events.normal(RESERVATION, reservation, "Reserved", ready["message"])
            else:
                events.warning(RESERVATION, reservation, "PoolMissing", ready["message"])
        except ReconcileError as e:
            # The status is written; a lost event is not worth a retry that would not resend it.
            log.warn(f"cannot record event on {namespace}/{name}: {e}")
    return Outcome.done()


def release(reservation):
    """Removes the reservation from the pool, before the finalizer lets the Reservation go."""
    meta = reservation["metadata"]
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    spec = reservation.get("spec") or {}
    slots = spec.get("slots", 1)
    pool = spec.get("pool", "")
    pool_map = cache.get_opt(Kinds.CONFIG_MAP, namespace, pool)
    if pool_map is not None and name in (pool_map.get("data") or {}):
        try:
            client.merge_patch(Kinds.CONFIG_MAP, namespace, pool, {"data": {name: None}})
        except ReconcileError as e:
            # A pool deleted meanwhile holds nothing to release.
            if not e.is_not_found():
                raise
    try:
        events.normal(RESERVATION, reservation, "Released", f"released {slots} slots in ConfigMap {pool}")
    except ReconcileError as e:
        log.warn(f"cannot record event on {namespace}/{name}: {e}")
    return Outcome.done()


class Reservations(Reconciler):
    def describe(self):
        return describe(RESERVATION).watches_guest_map(Kinds.CONFIG_MAP).field_index(RESERVATION, "spec.pool").build()

    def reconcile(self, request):
        reservation = cache.get_opt(RESERVATION, request.namespace, request.name)
        if reservation is None:
            return Outcome.done()
        return with_finalizer(RESERVATION, reservation, FINALIZER, reserve, release)

    def map(self, kind, obj):
        """A pool ConfigMap concerns the Reservations in its namespace that name it."""
        meta = obj["metadata"]
        namespace = meta.get("namespace", "")
        naming = ListOptions().in_namespace(namespace).field("spec.pool", meta.get("name", ""))
        return [Request(namespace, r["metadata"]["name"]) for r in cache.list(RESERVATION, naming)]


WitWorld = export(Reservations())
