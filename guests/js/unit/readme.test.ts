// The closing snippet of guests/js/README.md, bundled as written (unit/bundle.mjs hands it in
// as 'readme-snippet'): it must build, and its exports must answer without calling themselves.

import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import * as snippet from 'readme-snippet';

test('the README snippet bundles and its describe and reconcile answer', () => {
  const description = snippet.describe();
  assert.deepEqual(description.for, { group: 'example.com', version: 'v1', kind: 'MyKind' });
  assert.deepEqual(snippet.reconcile({ namespace: 'default', name: 'x' }), { tag: 'done' });
});
