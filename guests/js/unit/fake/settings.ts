// The fake `reconciled:runtime/settings` import: `state.settings`, as the host gives it.

import { enter, state } from './state';

export function get(): string {
  enter({ fn: 'settings' });
  return state.settings;
}

void ({ get } satisfies typeof import('reconciled:runtime/settings@0.1.3'));
