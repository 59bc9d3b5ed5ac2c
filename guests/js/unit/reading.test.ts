// ListOptions, list paging, settings and the describe builder, against the fake host.

import { strict as assert } from 'node:assert';
import { beforeEach, test } from 'node:test';
import { Kinds, ListOptions, cache, describe, gvk, settings } from '../src/index';
import * as fake from './fake/state';

beforeEach(() => fake.reset());

test('ListOptions: labels, field, limit and continueFrom reach the host', () => {
  const o = new ListOptions().inNamespace('ns').labels('a=b').field('spec.x', '1').field('spec.y', '2').limit(7).continueFrom('t');
  assert.deepEqual(ListOptions.raw(o), {
    namespace: 'ns',
    labelSelector: 'a=b',
    fields: [
      ['spec.x', '1'],
      ['spec.y', '2'],
    ],
    limit: 7,
    continueToken: 't',
  });
  assert.deepEqual(ListOptions.raw(undefined), { namespace: '', labelSelector: '', fields: [], limit: 0, continueToken: '' });
});

test('ListOptions: pageSize is the deprecated alias of limit', () => {
  assert.equal(ListOptions.raw(new ListOptions().pageSize(3)).limit, 3);
});

test('cache.list follows continue tokens; listPage returns one page and its token', () => {
  for (const n of ['a', 'b', 'c', 'd', 'e']) {
    fake.seed(Kinds.ConfigMap, { metadata: { name: n, namespace: 'ns', labels: { app: n === 'c' ? 'other' : 'web' } } });
  }
  const web = new ListOptions().inNamespace('ns').labels('app=web').limit(2);
  assert.deepEqual(
    cache.list(Kinds.ConfigMap, web).map((o) => o.metadata.name),
    ['a', 'b', 'd', 'e'],
  );
  assert.equal(fake.state.calls.filter((c) => c.fn === 'cache.list').length, 2);
  const first = cache.listPage(Kinds.ConfigMap, new ListOptions().limit(2));
  assert.deepEqual(first.items.map((o) => o.metadata.name), ['a', 'b']);
  const second = cache.listPage(Kinds.ConfigMap, new ListOptions().limit(2).continueFrom(first.continueToken));
  assert.deepEqual(second.items.map((o) => o.metadata.name), ['c', 'd']);
});

test('cache.getOpt is undefined for not-found and throws any other case', () => {
  assert.equal(cache.getOpt(Kinds.ConfigMap, 'ns', 'missing'), undefined);
  fake.fail('cache.get', 'timeout');
  assert.throws(() => cache.getOpt(Kinds.ConfigMap, 'ns', 'missing'), (e: any) => e.case === 'timeout');
});

test('settings parses the host JSON', () => {
  fake.state.settings = '{"replicas": 3}';
  assert.deepEqual(settings<{ replicas: number }>(), { replicas: 3 });
});

test('describe: watchesOwner maps through the controller reference', () => {
  const d = describe(gvk('example.dev/v1', 'Thing'))
    .owns(Kinds.ConfigMap)
    .watchesOwner(Kinds.Secret)
    .watchesLabel(Kinds.Pod, 'thing')
    .watchesGuestMap(Kinds.Service)
    .fieldIndex(Kinds.Pod, 'spec.nodeName')
    .namespaces(['a'])
    .labelSelector('x=y')
    .eventual()
    .build();
  assert.deepEqual(d.watches, [
    { kind: Kinds.Secret, mapping: { tag: 'owner' } },
    { kind: Kinds.Pod, mapping: { tag: 'label', val: 'thing' } },
    { kind: Kinds.Service, mapping: { tag: 'guest-map' } },
  ]);
  assert.deepEqual(d.owns, [Kinds.ConfigMap]);
  assert.equal(d.consistency, 'eventual');
  assert.deepEqual(d.namespaces, ['a']);
  assert.equal(d.labelSelector, 'x=y');
});
