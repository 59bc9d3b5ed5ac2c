import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { desiredStatus, upToDate } from '../src/status';

test('the status echoes the spec at its generation', () => {
  const obj = { metadata: { name: 'sample', generation: 3 }, spec: { message: 'hello' } };
  const want = desiredStatus(obj);
  assert.deepEqual(want, { message: 'reconciled: hello', observedGeneration: 3 });
  assert.equal(upToDate(obj, want), false);
  assert.equal(upToDate({ ...obj, status: want }, want), true);
});
