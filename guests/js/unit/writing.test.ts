// applyStatus, mergePatchStatus, createOrUpdate, applyIfChanged and events, against the fake host.

import { strict as assert } from 'node:assert';
import { beforeEach, test } from 'node:test';
import { type KubeObject, Kinds, client, events, gvk } from '../src/index';
import * as fake from './fake/state';

const Thing = gvk('example.dev/v1', 'Thing');

beforeEach(() => fake.reset());

test('applyStatus sends only apiVersion, kind, name, namespace and status, through patch-status', () => {
  const read = fake.seed(Thing, {
    metadata: { name: 't', namespace: 'ns', labels: { a: 'b' }, finalizers: ['f'] },
    spec: { size: 1 },
  }) as KubeObject;
  const answer = client.applyStatus(Thing, { ...read, status: { ready: true } }, 'mgr', true);
  assert.deepEqual(fake.writes(), [
    {
      fn: 'patchStatus',
      kind: 'example.dev/v1/Thing',
      namespace: 'ns',
      name: 't',
      patch: {
        type: 'apply',
        body: { apiVersion: 'example.dev/v1', kind: 'Thing', metadata: { name: 't', namespace: 'ns' }, status: { ready: true } },
        fieldManager: 'mgr',
        force: true,
      },
    },
  ]);
  assert.deepEqual(answer.status, { ready: true });
  assert.deepEqual(fake.stored(Thing, 'ns', 't')!.spec, { size: 1 });
});

test('applyStatus of a cluster-scoped object sends no namespace; force defaults to false', () => {
  fake.seed(Thing, { metadata: { name: 'c' } });
  client.applyStatus(Thing, { metadata: { name: 'c' }, status: { n: 1 } }, 'mgr');
  const [w] = fake.writes();
  assert.deepEqual(w.patch!.body.metadata, { name: 'c' });
  assert.equal(w.namespace, '');
  assert.equal(w.patch!.force, false);
});

test('applyStatus of a missing object is not-found', () => {
  assert.throws(
    () => client.applyStatus(Thing, { metadata: { name: 'x', namespace: 'ns' }, status: {} }, 'mgr', true),
    (e: any) => e.case === 'not-found',
  );
});

test('mergePatchStatus sends a merge patch to the status subresource', () => {
  fake.seed(Thing, { metadata: { name: 't', namespace: 'ns' }, status: { a: 1, b: 2 } });
  const answer = client.mergePatchStatus(Thing, 'ns', 't', { status: { b: null, c: 3 } });
  assert.deepEqual(fake.writes().map((w) => [w.fn, w.patch]), [['patchStatus', { type: 'merge', body: { status: { b: null, c: 3 } } }]]);
  assert.deepEqual((answer as KubeObject).status, { a: 1, c: 3 });
});

test('createOrUpdate creates a missing object from the name and namespace', () => {
  const seen: KubeObject[] = [];
  const r = client.createOrUpdate(Kinds.ConfigMap, 'ns', 'cm', (cm) => {
    seen.push(JSON.parse(JSON.stringify(cm)));
    cm.data = { k: 'v' };
  });
  assert.deepEqual(seen, [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm', namespace: 'ns' } }]);
  assert.equal(r.changed, 'created');
  assert.deepEqual(fake.writes().map((w) => [w.fn, w.body]), [
    ['create', { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm', namespace: 'ns' }, data: { k: 'v' } }],
  ]);
  assert.ok(r.object.metadata.uid);
});

test('createOrUpdate updates a changed copy, guarded by the resourceVersion read', () => {
  const read = fake.seed(Kinds.ConfigMap, { metadata: { name: 'cm', namespace: 'ns' }, data: { k: 'old' } });
  const r = client.createOrUpdate<KubeObject & { data?: Record<string, string> }>(Kinds.ConfigMap, 'ns', 'cm', (cm) => {
    cm.data = { k: 'new' };
  });
  assert.equal(r.changed, 'updated');
  const [w] = fake.writes();
  assert.equal(w.fn, 'update');
  assert.equal(w.body!.metadata.resourceVersion, read.metadata.resourceVersion);
  assert.deepEqual(w.body!.data, { k: 'new' });
  assert.deepEqual(r.object.data, { k: 'new' });
});

test('createOrUpdate writes nothing when the function changes nothing', () => {
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'cm', namespace: 'ns', labels: { a: 'b' } }, data: { k: 'v' } });
  const r = client.createOrUpdate(Kinds.ConfigMap, 'ns', 'cm', (cm) => {
    // The same values, written anew and in another key order.
    cm.data = { k: 'v' };
    cm.metadata.labels = { a: 'b' };
  });
  assert.equal(r.changed, 'unchanged');
  assert.deepEqual(fake.writes(), []);
});

test('createOrUpdate takes a returned replacement object', () => {
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'cm', namespace: 'ns' }, data: { k: 'v' } });
  const r = client.createOrUpdate(Kinds.ConfigMap, 'ns', 'cm', (cm) => ({ ...cm, data: { k: 'w' } }));
  assert.equal(r.changed, 'updated');
  assert.deepEqual(fake.writes()[0].body!.data, { k: 'w' });
});

test('createOrUpdate refuses a function that renames the object', () => {
  assert.throws(
    () =>
      client.createOrUpdate(Kinds.ConfigMap, 'ns', 'cm', (cm) => {
        cm.metadata.name = 'other';
      }),
    (e: any) => e.case === 'invalid' && /renamed it to ns\/other/.test(e.message),
  );
  assert.deepEqual(fake.writes(), []);
});

test('createOrUpdate: a stale resourceVersion is the conflict the retry needs', () => {
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'cm', namespace: 'ns' }, data: { k: 'v' } });
  fake.fail('update', 'conflict');
  assert.throws(
    () => client.createOrUpdate(Kinds.ConfigMap, 'ns', 'cm', (cm) => void (cm.data = { k: 'x' })),
    (e: any) => e.case === 'conflict',
  );
});

const desired = (): KubeObject => ({
  metadata: { name: 'cm', namespace: 'ns', labels: { a: 'b' } },
  data: { k: 'v' },
});

test('applyIfChanged applies (forced) what the cache does not hold: created', () => {
  const r = client.applyIfChanged(Kinds.ConfigMap, desired(), 'mgr');
  assert.equal(r.changed, 'created');
  assert.deepEqual(fake.writes().map((w) => [w.fn, w.patch]), [
    [
      'patch',
      {
        type: 'apply',
        body: { apiVersion: 'v1', kind: 'ConfigMap', ...desired() },
        fieldManager: 'mgr',
        force: true,
      },
    ],
  ]);
});

test('applyIfChanged writes nothing when the cache holds every applied field', () => {
  // The server added fields of its own, and another manager a label: still unchanged.
  fake.seed(Kinds.ConfigMap, {
    metadata: { name: 'cm', namespace: 'ns', labels: { a: 'b', other: 'x' }, annotations: { z: '1' } },
    data: { k: 'v' },
  });
  const r = client.applyIfChanged(Kinds.ConfigMap, desired(), 'mgr');
  assert.equal(r.changed, 'unchanged');
  assert.deepEqual(fake.writes(), []);
  assert.equal(r.object.metadata.annotations!.z, '1');
});

test('applyIfChanged applies a changed value: updated', () => {
  fake.seed(Kinds.ConfigMap, { metadata: { name: 'cm', namespace: 'ns', labels: { a: 'c' } }, data: { k: 'v' } });
  const r = client.applyIfChanged(Kinds.ConfigMap, desired(), 'mgr');
  assert.equal(r.changed, 'updated');
  assert.equal(fake.writes().length, 1);
  assert.deepEqual(fake.stored(Kinds.ConfigMap, 'ns', 'cm')!.metadata.labels, { a: 'b' });
});

test('applyIfChanged compares lists by length and element; null asks for absence', () => {
  const withList = (items: unknown[]) => ({ metadata: { name: 'p', namespace: 'ns' }, spec: { items } });
  // Defaulted fields inside list elements are fine...
  fake.seed(Kinds.Pod, withList([{ name: 'a', image: 'x', pullPolicy: 'Always' }]));
  assert.equal(client.applyIfChanged(Kinds.Pod, withList([{ name: 'a', image: 'x' }]), 'm').changed, 'unchanged');
  // ...an element more or fewer is a change...
  assert.equal(client.applyIfChanged(Kinds.Pod, withList([{ name: 'a', image: 'x' }, { name: 'b' }]), 'm').changed, 'updated');
  fake.reset();
  fake.seed(Kinds.Pod, withList([{ name: 'a' }, { name: 'b' }]));
  assert.equal(client.applyIfChanged(Kinds.Pod, withList([{ name: 'a' }]), 'm').changed, 'updated');
  // ...and a null holds only where the field is absent.
  fake.reset();
  fake.seed(Kinds.Pod, { metadata: { name: 'p', namespace: 'ns' }, spec: { gone: 1 } });
  assert.equal(client.applyIfChanged(Kinds.Pod, { metadata: { name: 'p', namespace: 'ns' }, spec: { gone: null } }, 'm').changed, 'updated');
  assert.equal(client.applyIfChanged(Kinds.Pod, { metadata: { name: 'p', namespace: 'ns' }, spec: { never: null } }, 'm').changed, 'unchanged');
});

test('applyIfChanged tells 1 from "1" and false from absent', () => {
  fake.seed(Thing, { metadata: { name: 't', namespace: 'ns' }, spec: { n: 1 } });
  assert.equal(client.applyIfChanged(Thing, { metadata: { name: 't', namespace: 'ns' }, spec: { n: '1' } }, 'm').changed, 'updated');
  assert.equal(client.applyIfChanged(Thing, { metadata: { name: 't', namespace: 'ns' }, spec: { off: false } }, 'm').changed, 'updated');
});

test('events.normal and events.warning name the object by its kind, namespace and name', () => {
  const obj = { metadata: { name: 't', namespace: 'ns' } };
  events.normal(Thing, obj, 'Done', 'all good');
  events.warning(Thing, { metadata: { name: 'c' } }, 'Broken', 'not good');
  assert.deepEqual(fake.recorded(), [
    { fn: 'recordEvent', kind: 'example.dev/v1/Thing', namespace: 'ns', name: 't', event: { type: 'normal', reason: 'Done', message: 'all good' } },
    { fn: 'recordEvent', kind: 'example.dev/v1/Thing', namespace: '', name: 'c', event: { type: 'warning', reason: 'Broken', message: 'not good' } },
  ]);
  assert.throws(() => events.normal(Thing, obj, 'not camel', 'x'), (e: any) => e.case === 'invalid');
});
