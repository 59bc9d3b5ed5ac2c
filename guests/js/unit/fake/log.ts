// The fake `reconciled:runtime/log` import: records each line.

import type { Level } from 'reconciled:runtime/log@0.1.3';
import { state } from './state';

export function log(level: Level, message: string): void {
  state.calls.push({ fn: 'log', log: { level, message } });
}

void ({ log } satisfies typeof import('reconciled:runtime/log@0.1.3'));
