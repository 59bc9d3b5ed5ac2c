// The TypeScript examples, reconciled against the fake host: what examples/reservation/README.md
// says each reconcile writes, and the configmap-generator's status by server-side apply. The
// shared fixtures (`reconciled test`) hold every language to the same; these run without wasm.

import { strict as assert } from 'node:assert';
import { afterEach, beforeEach, test } from 'node:test';
import { Kinds, Outcome, gvk } from '../src/index';
import * as generator from '../../../examples/configmap-generator-ts/src/index';
import * as reservation from '../../../examples/reservation-ts/src/index';
import * as fake from './fake/state';

const Reservation = gvk('example.reconciled.dev/v1alpha1', 'Reservation');
const Generator = gvk('example.reconciled.dev/v1alpha1', 'ConfigMapGenerator');
const FIN = 'example.reconciled.dev/release';
const realNow = Date.now;

beforeEach(() => {
  fake.reset();
  Date.now = () => Date.parse('2026-01-01T00:00:00.250Z');
});
afterEach(() => {
  Date.now = realNow;
});

const request = { namespace: 'default', name: 'training' };
const seedReservation = (extra: Record<string, any> = {}) =>
  fake.seed(Reservation, {
    metadata: { name: 'training', namespace: 'default', generation: 1, ...extra.metadata },
    spec: { pool: 'gpus', slots: 2 },
    ...(extra.status ? { status: extra.status } : {}),
  });
const summary = () =>
  fake.writes().map((w) => [w.fn, w.kind!.split('/').pop(), w.name, w.patch?.type, w.patch?.body]);
const readyTrue = {
  type: 'Ready',
  status: 'True',
  reason: 'Reserved',
  message: '2 slots reserved in ConfigMap gpus',
  observedGeneration: 1,
  lastTransitionTime: '2026-01-01T00:00:00Z',
};

test('reservation: a new Reservation takes the finalizer, records itself in the pool, and is Ready', () => {
  seedReservation();
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'gpus', namespace: 'default' } });
  assert.deepEqual(reservation.reconcile(request), Outcome.done());
  assert.deepEqual(summary(), [
    [
      'patch',
      'Reservation',
      'training',
      'json',
      [
        { op: 'test', path: '/metadata/finalizers', value: null },
        { op: 'add', path: '/metadata/finalizers', value: [FIN] },
      ],
    ],
    ['patch', 'ConfigMap', 'gpus', 'merge', { data: { training: '2' } }],
    [
      'patchStatus',
      'Reservation',
      'training',
      'apply',
      {
        apiVersion: 'example.reconciled.dev/v1alpha1',
        kind: 'Reservation',
        metadata: { name: 'training', namespace: 'default' },
        status: { observedGeneration: 1, conditions: [readyTrue] },
      },
    ],
  ]);
  const status = fake.writes()[2].patch!;
  assert.equal(status.fieldManager, 'reservation');
  assert.equal(status.force, true);
  assert.deepEqual(fake.recorded().map((e) => e.event), [
    { type: 'normal', reason: 'Reserved', message: '2 slots reserved in ConfigMap gpus' },
  ]);
});

test('reservation: converged, nothing is written and no Event recorded', () => {
  seedReservation({ metadata: { finalizers: [FIN] }, status: { observedGeneration: 1, conditions: [readyTrue] } });
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'gpus', namespace: 'default' }, data: { training: '2' } });
  assert.deepEqual(reservation.reconcile(request), Outcome.done());
  assert.deepEqual(fake.writes(), []);
  assert.deepEqual(fake.recorded(), []);
});

test('reservation: a missing pool is Ready False, PoolMissing, with a Warning', () => {
  seedReservation({ metadata: { finalizers: [FIN] } });
  reservation.reconcile(request);
  assert.deepEqual(summary(), [
    [
      'patchStatus',
      'Reservation',
      'training',
      'apply',
      {
        apiVersion: 'example.reconciled.dev/v1alpha1',
        kind: 'Reservation',
        metadata: { name: 'training', namespace: 'default' },
        status: {
          observedGeneration: 1,
          conditions: [
            {
              type: 'Ready',
              status: 'False',
              reason: 'PoolMissing',
              message: 'ConfigMap gpus does not exist',
              observedGeneration: 1,
              lastTransitionTime: '2026-01-01T00:00:00Z',
            },
          ],
        },
      },
    ],
  ]);
  assert.deepEqual(fake.recorded().map((e) => e.event), [
    { type: 'warning', reason: 'PoolMissing', message: 'ConfigMap gpus does not exist' },
  ]);
});

test('reservation: a new generation rewrites the status (time kept) and records no Event', () => {
  seedReservation({
    metadata: { finalizers: [FIN], generation: 2 },
    status: { observedGeneration: 1, conditions: [{ ...readyTrue, lastTransitionTime: '2025-06-01T00:00:00Z' }] },
  });
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'gpus', namespace: 'default' }, data: { training: '2' } });
  reservation.reconcile(request);
  assert.deepEqual(summary().map((w) => w[0]), ['patchStatus']);
  assert.deepEqual(fake.writes()[0].patch!.body.status, {
    observedGeneration: 2,
    conditions: [{ ...readyTrue, observedGeneration: 2, lastTransitionTime: '2025-06-01T00:00:00Z' }],
  });
  assert.deepEqual(fake.recorded(), []);
});

test('reservation: deletion releases the entry, records Released, then removes the finalizer', () => {
  seedReservation({ metadata: { finalizers: [FIN], deletionTimestamp: '2026-01-01T00:00:00Z' } });
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'gpus', namespace: 'default' }, data: { training: '2', other: '1' } });
  assert.deepEqual(reservation.reconcile(request), Outcome.done());
  assert.deepEqual(summary(), [
    ['patch', 'ConfigMap', 'gpus', 'merge', { data: { training: null } }],
    [
      'patch',
      'Reservation',
      'training',
      'json',
      [
        { op: 'test', path: '/metadata/finalizers/0', value: FIN },
        { op: 'remove', path: '/metadata/finalizers/0' },
      ],
    ],
  ]);
  assert.deepEqual(fake.recorded().map((e) => e.event), [
    { type: 'normal', reason: 'Released', message: 'released 2 slots in ConfigMap gpus' },
  ]);
  assert.deepEqual(fake.stored(Kinds.ConfigMap, 'default', 'gpus')!.data, { other: '1' });
});

test('reservation: deletion with the pool gone, or the entry gone, still releases', () => {
  seedReservation({ metadata: { finalizers: [FIN], deletionTimestamp: '2026-01-01T00:00:00Z' } });
  reservation.reconcile(request);
  assert.deepEqual(summary().map((w) => [w[0], w[2]]), [['patch', 'training']]);
  assert.equal(fake.recorded().length, 1);
});

test('reservation: a failed Event is logged, not retried', () => {
  seedReservation({ metadata: { finalizers: [FIN] } });
  fake.fail('recordEvent', 'forbidden');
  assert.deepEqual(reservation.reconcile(request), Outcome.done());
  const warned = fake.state.calls.filter((c) => c.fn === 'log' && c.log!.level === 'warn');
  assert.equal(warned.length, 1);
  assert.match(warned[0].log!.message, /cannot record event on default\/training: forbidden/);
});

test('reservation: a missing Reservation is done, without writes', () => {
  assert.deepEqual(reservation.reconcile(request), Outcome.done());
  assert.deepEqual(fake.writes(), []);
});

test('reservation: describe and map', () => {
  const d = reservation.describe();
  assert.deepEqual(d.for, Reservation);
  assert.deepEqual(d.watches, [{ kind: Kinds.ConfigMap, mapping: { tag: 'guest-map' } }]);
  assert.deepEqual(d.fieldIndexes, [{ kind: Reservation, path: 'spec.pool' }]);
  fake.seed(Reservation, { metadata: { name: 'a', namespace: 'default' }, spec: { pool: 'gpus' } });
  fake.seed(Reservation, { metadata: { name: 'b', namespace: 'default' }, spec: { pool: 'cpus' } });
  fake.seed(Reservation, { metadata: { name: 'c', namespace: 'other' }, spec: { pool: 'gpus' } });
  const pool = JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'gpus', namespace: 'default' } });
  assert.deepEqual(reservation.map(Kinds.ConfigMap, pool), [{ namespace: 'default', name: 'a' }]);
});

test('configmap-generator: the status by server-side apply, and the Event by events.normal', () => {
  fake.seed(Generator, { metadata: { name: 'greeting', namespace: 'default', uid: 'g-1' }, spec: { copies: 1, data: { a: 'b' } } });
  assert.deepEqual(generator.reconcile({ namespace: 'default', name: 'greeting' }), Outcome.done());
  const [cm, status] = fake.writes();
  assert.deepEqual(cm.patch!.body.metadata.ownerReferences, [
    { apiVersion: 'example.reconciled.dev/v1alpha1', kind: 'ConfigMapGenerator', name: 'greeting', uid: 'g-1', controller: true, blockOwnerDeletion: true },
  ]);
  assert.equal(status.fn, 'patchStatus');
  assert.deepEqual(status.patch, {
    type: 'apply',
    body: {
      apiVersion: 'example.reconciled.dev/v1alpha1',
      kind: 'ConfigMapGenerator',
      metadata: { name: 'greeting', namespace: 'default' },
      status: { generated: 1, observedGeneration: 1 },
    },
    fieldManager: 'configmap-generator',
    force: true,
  });
  assert.deepEqual(fake.recorded().map((e) => [e.name, e.event]), [['greeting', { type: 'normal', reason: 'Generated', message: 'generated 1 ConfigMaps' }]]);
});

test('configmap-generator: deletes only the surplus copies it controls', () => {
  fake.seed(Generator, { metadata: { name: 'g', namespace: 'default', uid: 'g-1' }, spec: { copies: 1 }, status: { generated: 1, observedGeneration: 1 } });
  const label = { 'example.reconciled.dev/generator': 'g' };
  const mine = [{ apiVersion: 'example.reconciled.dev/v1alpha1', kind: 'ConfigMapGenerator', name: 'g', uid: 'g-1', controller: true }];
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'g-1', namespace: 'default', labels: label, ownerReferences: mine } });
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'g-2', namespace: 'default', labels: label, ownerReferences: [{ ...mine[0], uid: 'other' }] } });
  generator.reconcile({ namespace: 'default', name: 'g' });
  assert.deepEqual(fake.writes().map((w) => [w.fn, w.name]), [
    ['patch', 'g-0'],
    ['delete', 'g-1'],
  ]);
});
