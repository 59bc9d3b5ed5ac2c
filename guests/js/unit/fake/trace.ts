// The fake `reconciled:runtime/trace` import: records each span as the host would open it.

import { state } from './state';

export function open(name: string): number {
  state.spans.push({ name, attributes: {}, open: true });
  return state.spans.length;
}

export function setAttribute(span: number, key: string, value: string): void {
  const s = state.spans[span - 1];
  if (s?.open) {
    s.attributes[key] = value;
  }
}

export function close(span: number, error: string | undefined): void {
  const s = state.spans[span - 1];
  if (s?.open) {
    s.open = false;
    s.error = error;
  }
}

void ({ open, setAttribute, close } satisfies typeof import('reconciled:runtime/trace@0.1.3'));
