// Example reconciler, in TypeScript: a Reservation records `spec.slots` under its own name in
// the data of a pool ConfigMap (`spec.pool`, same namespace). The pool is not owned by the
// Reservation, so the garbage collector cannot clean it up: a finalizer removes the entry
// before the Reservation goes. The same reconciler as examples/reservation (Rust), passing the
// same fixtures; its README says exactly what each reconcile does.

import {
  type Condition,
  type KubeObject,
  Kinds,
  ListOptions,
  Outcome,
  ReconcileError,
  type Request,
  cache,
  client,
  describe as describeKind,
  events,
  exportReconciler,
  findCondition,
  gvk,
  log,
  setCondition,
  withFinalizer,
} from '../../../guests/js/src/index';

/** The custom resource (../reservation/crd.yaml). */
const Reservation = gvk('example.reconciled.dev/v1alpha1', 'Reservation');

/** Held while the pool may still record this Reservation. */
const FINALIZER = 'example.reconciled.dev/release';

/** Server-side apply field manager of the status. */
const FIELD_MANAGER = 'reservation';

interface ReservationObject extends KubeObject {
  spec?: { pool?: string; slots?: number };
  status?: { observedGeneration?: number; conditions?: Condition[] };
}

interface Pool extends KubeObject {
  data?: Record<string, string>;
}

function reconcileReservation(req: Request): Outcome {
  const reservation = cache.getOpt<ReservationObject>(Reservation, req.namespace, req.name);
  if (!reservation) {
    return Outcome.done();
  }
  return withFinalizer(Reservation, reservation, FINALIZER, { apply: reserve, cleanup: release });
}

/** Records the reservation in the pool, and says in the `Ready` condition whether it could. */
function reserve(reservation: ReservationObject): Outcome {
  const { namespace = '', name = '' } = reservation.metadata;
  const generation = reservation.metadata.generation ?? 0;
  const slots = reservation.spec?.slots ?? 1;
  const pool = reservation.spec?.pool ?? '';
  const conditions: Condition[] = JSON.parse(JSON.stringify(reservation.status?.conditions ?? []));

  let ready: Condition;
  const poolMap = cache.getOpt<Pool>(Kinds.ConfigMap, namespace, pool);
  if (!poolMap) {
    ready = {
      type: 'Ready',
      status: 'False',
      reason: 'PoolMissing',
      message: `ConfigMap ${pool} does not exist`,
      observedGeneration: generation,
    };
  } else {
    if (poolMap.data?.[name] !== String(slots)) {
      client.mergePatch(Kinds.ConfigMap, namespace, pool, { data: { [name]: String(slots) } });
    }
    ready = {
      type: 'Ready',
      status: 'True',
      reason: 'Reserved',
      message: `${slots} slots reserved in ConfigMap ${pool}`,
      observedGeneration: generation,
    };
  }

  const before = findCondition(conditions, 'Ready')?.status;
  const changed = setCondition(conditions, ready);
  if (changed || (reservation.status?.observedGeneration ?? 0) !== generation) {
    client.applyStatus(
      Reservation,
      { metadata: { name, namespace }, status: { observedGeneration: generation, conditions } },
      FIELD_MANAGER,
      true,
    );
  }
  if (ready.status !== before) {
    try {
      if (ready.status === 'True') {
        events.normal(Reservation, reservation, 'Reserved', ready.message);
      } else {
        events.warning(Reservation, reservation, 'PoolMissing', ready.message);
      }
    } catch (e) {
      // The status is written; a lost event is not worth a retry that would not resend it.
      log.warn(`cannot record event on ${namespace}/${name}: ${ReconcileError.from(e).message}`);
    }
  }
  return Outcome.done();
}

/** Removes the reservation from the pool, before the finalizer lets the Reservation go. */
function release(reservation: ReservationObject): Outcome {
  const { namespace = '', name = '' } = reservation.metadata;
  const slots = reservation.spec?.slots ?? 1;
  const pool = reservation.spec?.pool ?? '';
  const poolMap = cache.getOpt<Pool>(Kinds.ConfigMap, namespace, pool);
  if (poolMap?.data && Object.prototype.hasOwnProperty.call(poolMap.data, name)) {
    try {
      client.mergePatch(Kinds.ConfigMap, namespace, pool, { data: { [name]: null } });
    } catch (e) {
      // A pool deleted meanwhile holds nothing to release.
      if (!(e instanceof ReconcileError && e.isNotFound())) {
        throw e;
      }
    }
  }
  try {
    events.normal(Reservation, reservation, 'Released', `released ${slots} slots in ConfigMap ${pool}`);
  } catch (e) {
    log.warn(`cannot record event on ${namespace}/${name}: ${ReconcileError.from(e).message}`);
  }
  return Outcome.done();
}

/** A pool ConfigMap concerns the Reservations in its namespace that name it. */
function reservationsOf(_kind: unknown, pool: KubeObject): Request[] {
  const namespace = pool.metadata.namespace ?? '';
  const naming = new ListOptions().inNamespace(namespace).field('spec.pool', pool.metadata.name ?? '');
  return cache.list(Reservation, naming).map((r) => ({ namespace, name: r.metadata.name ?? '' }));
}

const exported = exportReconciler({
  describe: () =>
    describeKind(Reservation).watchesGuestMap(Kinds.ConfigMap).fieldIndex(Reservation, 'spec.pool').build(),
  reconcile: reconcileReservation,
  map: reservationsOf,
});

// The component's exports, by the names the WIT world gives them.
export const describe = exported.describe;
export const reconcile = exported.reconcile;
export const map = exported.map;
