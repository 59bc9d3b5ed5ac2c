// The fake `reconciled:runtime/cache` import (see ./state.ts).

import type { Gvk } from 'reconciled:runtime/types@0.1.3';
import type { ListOptions, ListPage } from 'reconciled:runtime/cache@0.1.3';
import * as server from './state';

export function get(kind: Gvk, namespace: string, name: string): string {
  return server.get('cache.get', kind, namespace, name);
}

export function list(kind: Gvk, options: ListOptions): ListPage {
  return server.list('cache.list', kind, options);
}

// The fake must offer what the generated bindings declare, with the same signatures.
void ({ get, list } satisfies typeof import('reconciled:runtime/cache@0.1.3'));
