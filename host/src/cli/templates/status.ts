// The reconciler's logic, pure (no host imports, only types), so ./test.sh runs it with node.

import type { KubeObject } from 'reconciled-guest';

/** The custom resource (crd.yaml). */
export interface {{Kind}} extends KubeObject {
  spec?: { message?: string };
  status?: Status;
}

/** What the reconciler did. */
export interface Status {
  message: string;
  observedGeneration: number;
}

/** The status `obj` should have. */
export function desiredStatus(obj: {{Kind}}): Status {
  return { message: `reconciled: ${obj.spec?.message ?? ''}`, observedGeneration: obj.metadata.generation ?? 0 };
}

/** Whether `obj`'s status already says what it should. */
export function upToDate(obj: {{Kind}}, want: Status): boolean {
  return obj.status?.message === want.message && obj.status?.observedGeneration === want.observedGeneration;
}
