// Owner references, finalizers, conditions and spans, against the fake host.

import { strict as assert } from 'node:assert';
import { afterEach, beforeEach, test } from 'node:test';
import {
  type Condition,
  type KubeObject,
  Kinds,
  Outcome,
  controllerOf,
  controllerReference,
  findCondition,
  gvk,
  hasFinalizer,
  isConditionTrue,
  isControlledBy,
  removeCondition,
  setCondition,
  setControllerReference,
  withFinalizer,
  ReconcileError,
  inSpan,
  openSpan,
} from '../src/index';
import * as fake from './fake/state';

const Thing = gvk('example.dev/v1', 'Thing');
const FIN = 'example.dev/cleanup';
const realNow = Date.now;

beforeEach(() => fake.reset());
afterEach(() => {
  Date.now = realNow;
});

const owner = (uid = 'u-1', name = 'owner'): KubeObject => ({ metadata: { name, namespace: 'ns', uid } });

// --- owner references ---------------------------------------------------------------------------

test('controllerReference: controller and blockOwnerDeletion, apiVersion and kind from the kind', () => {
  assert.deepEqual(controllerReference(Thing, owner()), {
    apiVersion: 'example.dev/v1',
    kind: 'Thing',
    name: 'owner',
    uid: 'u-1',
    controller: true,
    blockOwnerDeletion: true,
  });
  assert.throws(() => controllerReference(Thing, { metadata: { name: 'new' } }), (e: any) => e.case === 'invalid');
});

test('setControllerReference appends, keeps other owners, and replaces its own by uid', () => {
  const other = { apiVersion: 'v1', kind: 'ConfigMap', name: 'x', uid: 'u-9' };
  const obj: KubeObject = { metadata: { name: 'o', ownerReferences: [other, { apiVersion: 'old/v0', kind: 'Thing', name: 'renamed', uid: 'u-1' }] } };
  setControllerReference(Thing, owner(), obj);
  assert.deepEqual(obj.metadata.ownerReferences, [other, controllerReference(Thing, owner())]);
  setControllerReference(Thing, owner(), obj);
  assert.equal(obj.metadata.ownerReferences!.length, 2);
  const bare: KubeObject = { metadata: { name: 'b' } };
  setControllerReference(Thing, owner(), bare);
  assert.deepEqual(bare.metadata.ownerReferences, [controllerReference(Thing, owner())]);
});

test('setControllerReference refuses a second controller, naming both, and changes nothing', () => {
  const obj: KubeObject = { kind: 'ConfigMap', metadata: { name: 'o', namespace: 'ns', ownerReferences: [controllerReference(Thing, owner('u-1', 'first'))] } };
  const before = JSON.stringify(obj);
  assert.throws(
    () => setControllerReference(Thing, owner('u-2', 'second'), obj),
    (e: any) => e.case === 'invalid' && /ConfigMap ns\/o/.test(e.message) && /first/.test(e.message) && /second/.test(e.message),
  );
  assert.equal(JSON.stringify(obj), before);
});

test('controllerOf and isControlledBy go by the controller reference and uid', () => {
  const obj: KubeObject = {
    metadata: { name: 'o', ownerReferences: [{ apiVersion: 'v1', kind: 'X', name: 'n', uid: 'u-1' }, controllerReference(Thing, owner('u-2'))] },
  };
  assert.equal(controllerOf(obj)!.uid, 'u-2');
  assert.equal(isControlledBy(obj, owner('u-2')), true);
  // An owner, but not the controller.
  assert.equal(isControlledBy(obj, owner('u-1')), false);
  assert.equal(isControlledBy(obj, { metadata: { name: 'no-uid' } }), false);
  assert.equal(controllerOf({ metadata: {} }), undefined);
});

// --- finalizers ----------------------------------------------------------------------------------

function handlers(log: string[], seen: KubeObject[] = []) {
  return {
    apply: (o: KubeObject) => {
      log.push('apply');
      seen.push(o);
      return Outcome.requeueAfter(5);
    },
    cleanup: (o: KubeObject) => {
      log.push('cleanup');
      seen.push(o);
      return Outcome.requeueAfter(7);
    },
  };
}

test('withFinalizer adds a missing finalizer (test null, add the list), then applies with the patched object', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns' } }) as KubeObject;
  const log: string[] = [];
  const seen: KubeObject[] = [];
  const out = withFinalizer(Thing, read, FIN, handlers(log, seen));
  assert.deepEqual(out, Outcome.requeueAfter(5));
  assert.deepEqual(log, ['apply']);
  assert.deepEqual(fake.writes().map((w) => [w.fn, w.name, w.patch]), [
    [
      'patch',
      't',
      {
        type: 'json',
        body: [
          { op: 'test', path: '/metadata/finalizers', value: null },
          { op: 'add', path: '/metadata/finalizers', value: [FIN] },
        ],
      },
    ],
  ]);
  assert.deepEqual(seen[0].metadata.finalizers, [FIN]);
  assert.notEqual(seen[0].metadata.resourceVersion, read.metadata.resourceVersion);
});

test('withFinalizer appends to an existing list, testing the whole list as read', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns', finalizers: ['a', 'b'] } }) as KubeObject;
  withFinalizer(Thing, read, FIN, handlers([]));
  assert.deepEqual(fake.writes()[0].patch!.body, [
    { op: 'test', path: '/metadata/finalizers', value: ['a', 'b'] },
    { op: 'add', path: '/metadata/finalizers/-', value: FIN },
  ]);
  assert.deepEqual(fake.stored(Thing, 'ns', 't')!.metadata.finalizers, ['a', 'b', FIN]);
});

test('withFinalizer only applies when the finalizer is there', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns', finalizers: [FIN] } }) as KubeObject;
  const log: string[] = [];
  withFinalizer(Thing, read, FIN, handlers(log));
  assert.deepEqual(log, ['apply']);
  assert.deepEqual(fake.writes(), []);
});

test('withFinalizer on deletion: cleanup, then remove the entry at its index after testing it', () => {
  const read = fake.seed(Thing, {
    metadata: { name: 't', namespace: 'ns', finalizers: ['a', FIN, 'b'], deletionTimestamp: '2026-01-01T00:00:00Z' },
  }) as KubeObject;
  const log: string[] = [];
  const out = withFinalizer(Thing, read, FIN, {
    ...handlers(log),
    cleanup: () => {
      // Nothing is written before cleanup returns.
      assert.deepEqual(fake.writes(), []);
      log.push('cleanup');
      return Outcome.done();
    },
  });
  assert.deepEqual(out, Outcome.done());
  assert.deepEqual(log, ['cleanup']);
  assert.deepEqual(fake.writes().map((w) => w.patch!.body), [
    [
      { op: 'test', path: '/metadata/finalizers/1', value: FIN },
      { op: 'remove', path: '/metadata/finalizers/1' },
    ],
  ]);
  assert.deepEqual(fake.stored(Thing, 'ns', 't')!.metadata.finalizers, ['a', 'b']);
});

test('withFinalizer: a finalizer gone with its object (a reconcile from a cache that had not seen it go) is not an error', () => {
  // Read from the cache, but no longer on the server: the finalizer removal finds nothing.
  const read = {
    metadata: { name: 'gone', namespace: 'ns', finalizers: [FIN], deletionTimestamp: 'x' },
  } as KubeObject;
  const out = withFinalizer(Thing, read, FIN, { ...handlers([]), cleanup: () => Outcome.done() });
  assert.deepEqual(out, Outcome.done());
});

test('withFinalizer: a failing cleanup keeps the finalizer', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns', finalizers: [FIN], deletionTimestamp: 'x' } }) as KubeObject;
  assert.throws(
    () =>
      withFinalizer(Thing, read, FIN, {
        apply: () => Outcome.done(),
        cleanup: () => {
          throw new Error('pool unreachable');
        },
      }),
    /pool unreachable/,
  );
  assert.deepEqual(fake.writes(), []);
});

test('withFinalizer on deletion without the finalizer runs nothing and is done', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns', finalizers: ['other'], deletionTimestamp: 'x' } }) as KubeObject;
  const log: string[] = [];
  assert.deepEqual(withFinalizer(Thing, read, FIN, handlers(log)), Outcome.done());
  assert.deepEqual(log, []);
  assert.deepEqual(fake.writes(), []);
});

test('withFinalizer: a list changed since it was read fails the test, as conflict, and apply does not run', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns', finalizers: ['a'] } }) as KubeObject;
  // Another writer adds a finalizer after the read.
  fake.seed(Thing, { metadata: { ...read.metadata, finalizers: ['a', 'z'] } });
  const log: string[] = [];
  assert.throws(
    () => withFinalizer(Thing, read, FIN, handlers(log)),
    (e: any) => e.case === 'conflict' && /finalizers of Thing ns\/t changed since they were read/.test(e.message),
  );
  assert.deepEqual(log, []);
  assert.deepEqual(fake.stored(Thing, 'ns', 't')!.metadata.finalizers, ['a', 'z']);
});

test('withFinalizer: a removal whose index moved fails the test, as conflict, without removing another entry', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns', finalizers: ['a', FIN], deletionTimestamp: 'x' } }) as KubeObject;
  fake.seed(Thing, { metadata: { ...read.metadata, finalizers: [FIN, 'a'] } });
  assert.throws(() => withFinalizer(Thing, read, FIN, handlers([])), (e: any) => e.case === 'conflict');
  assert.deepEqual(fake.stored(Thing, 'ns', 't')!.metadata.finalizers, [FIN, 'a']);
});

test('withFinalizer: the host answering invalid is conflict; other cases pass through', () => {
  const read = fake.seed(Thing, { metadata: { name: 't', namespace: 'ns' } }) as KubeObject;
  fake.fail('patch', 'invalid');
  assert.throws(() => withFinalizer(Thing, read, FIN, handlers([])), (e: any) => e.case === 'conflict');
  fake.fail('patch', 'forbidden');
  assert.throws(() => withFinalizer(Thing, read, FIN, handlers([])), (e: any) => e.case === 'forbidden');
  fake.fail('patch', 'not-found');
  assert.throws(() => withFinalizer(Thing, read, FIN, handlers([])), (e: any) => e.case === 'not-found');
});

test('hasFinalizer', () => {
  assert.equal(hasFinalizer({ metadata: { finalizers: ['a', FIN] } }, FIN), true);
  assert.equal(hasFinalizer({ metadata: { finalizers: ['a'] } }, FIN), false);
  assert.equal(hasFinalizer({ metadata: {} }, FIN), false);
});

// --- conditions ----------------------------------------------------------------------------------

function at(iso: string): void {
  const t = Date.parse(iso);
  Date.now = () => t;
}

const ready = (status: Condition['status'], reason = 'R', message = 'm', observedGeneration?: number): Condition => ({
  type: 'Ready',
  status,
  reason,
  message,
  ...(observedGeneration === undefined ? {} : { observedGeneration }),
});

test('setCondition appends a new type at now, to the second, with Z', () => {
  at('2026-03-04T05:06:07.891Z');
  const conds: Condition[] = [];
  assert.equal(setCondition(conds, ready('True', 'R', 'm', 2)), true);
  assert.deepEqual(conds, [{ type: 'Ready', status: 'True', reason: 'R', message: 'm', observedGeneration: 2, lastTransitionTime: '2026-03-04T05:06:07Z' }]);
});

test('setCondition keeps a given lastTransitionTime', () => {
  const conds: Condition[] = [];
  setCondition(conds, { ...ready('False'), lastTransitionTime: '2020-01-01T00:00:00Z' });
  assert.equal(conds[0].lastTransitionTime, '2020-01-01T00:00:00Z');
});

test('setCondition moves lastTransitionTime only when the status changes', () => {
  at('2026-01-01T00:00:00Z');
  const conds: Condition[] = [{ type: 'Other', status: 'True', reason: 'X', message: '', lastTransitionTime: '2025-01-01T00:00:00Z' }];
  setCondition(conds, ready('False', 'A', 'a', 1));
  at('2026-01-01T00:10:00Z');
  // Same status, new reason, message and generation: changed, time kept.
  assert.equal(setCondition(conds, ready('False', 'B', 'b', 2)), true);
  assert.deepEqual(findCondition(conds, 'Ready'), { ...ready('False', 'B', 'b', 2), lastTransitionTime: '2026-01-01T00:00:00Z' });
  // Nothing new: unchanged.
  assert.equal(setCondition(conds, ready('False', 'B', 'b', 2)), false);
  // A new status: the time moves.
  at('2026-01-01T00:20:00.5Z');
  assert.equal(setCondition(conds, ready('True', 'B', 'b', 2)), true);
  assert.equal(findCondition(conds, 'Ready')!.lastTransitionTime, '2026-01-01T00:20:00Z');
  // A status change with a given time takes that time.
  setCondition(conds, { ...ready('Unknown', 'B', 'b', 2), lastTransitionTime: '2027-01-01T00:00:00Z' });
  assert.equal(findCondition(conds, 'Ready')!.lastTransitionTime, '2027-01-01T00:00:00Z');
  // The other condition is untouched, and stays first.
  assert.equal(conds[0].type, 'Other');
  assert.equal(conds.length, 2);
});

test('setCondition: dropping observedGeneration is a change', () => {
  const conds: Condition[] = [];
  setCondition(conds, ready('True', 'R', 'm', 3));
  assert.equal(setCondition(conds, ready('True', 'R', 'm')), true);
  assert.equal('observedGeneration' in conds[0], false);
});

test('findCondition, isConditionTrue, removeCondition', () => {
  const conds: Condition[] = [ready('True'), { ...ready('False'), type: 'Degraded' }];
  assert.equal(isConditionTrue(conds, 'Ready'), true);
  assert.equal(isConditionTrue(conds, 'Degraded'), false);
  assert.equal(isConditionTrue(conds, 'Missing'), false);
  assert.equal(isConditionTrue(undefined, 'Ready'), false);
  assert.equal(findCondition(conds, 'Missing'), undefined);
  assert.equal(removeCondition(conds, 'Ready'), true);
  assert.equal(removeCondition(conds, 'Ready'), false);
  assert.deepEqual(conds.map((c) => c.type), ['Degraded']);
});

test('Kinds are unaffected by the helpers', () => {
  assert.deepEqual(Kinds.ConfigMap, { group: '', version: 'v1', kind: 'ConfigMap' });
});

test('inSpan ends its span, and marks it failed with the message when the function throws', () => {
  const value = inSpan('render', (span) => {
    span.attribute('template', 'a').attribute('replicas', 3);
    return 42;
  });
  assert.equal(value, 42);
  assert.throws(
    () =>
      inSpan('write', () => {
        throw new ReconcileError('conflict', 'changed meanwhile');
      }),
    ReconcileError,
  );
  assert.deepEqual(fake.state.spans, [
    { name: 'render', attributes: { template: 'a', replicas: '3' }, open: false, error: undefined },
    { name: 'write', attributes: {}, open: false, error: 'conflict: changed meanwhile' },
  ]);
});

test('a span ends once, and its attributes stop with it', () => {
  const span = openSpan('once');
  span.end();
  span.attribute('late', 'x');
  span.fail('too late');
  assert.deepEqual(fake.state.spans, [
    { name: 'once', attributes: {}, open: false, error: undefined },
  ]);
});
