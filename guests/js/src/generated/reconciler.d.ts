/// <reference path="./interfaces/reconciled-runtime-api.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-cache.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-client.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-declaration.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-log.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-settings.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-trace.d.ts" />
/// <reference path="./interfaces/reconciled-runtime-types.d.ts" />
declare module 'reconciled:runtime/reconciler@0.1.3' {
  export type Gvk = import('reconciled:runtime/types@0.1.3').Gvk;
  export type Request = import('reconciled:runtime/types@0.1.3').Request;
  export type Error = import('reconciled:runtime/types@0.1.3').Error;
  export type Description = import('reconciled:runtime/declaration@0.1.3').Description;
  /**
  * What to do after a reconcile.
  */
  /**
  * What to do after a reconcile.
  */
  export type Outcome = OutcomeDone | OutcomeRequeueAfter;
  /**
  * Converged; wait for the next change.
  */
  export interface OutcomeDone {
    tag: 'done',
  }
  /**
  * Reconcile again after this many milliseconds.
  */
  export interface OutcomeRequeueAfter {
    tag: 'requeue-after',
    val: bigint,
  }
  export type * as ReconciledRuntimeApi013 from 'reconciled:runtime/api@0.1.3'; // import reconciled:runtime/api@0.1.3
  export type * as ReconciledRuntimeCache013 from 'reconciled:runtime/cache@0.1.3'; // import reconciled:runtime/cache@0.1.3
  export type * as ReconciledRuntimeClient013 from 'reconciled:runtime/client@0.1.3'; // import reconciled:runtime/client@0.1.3
  export type * as ReconciledRuntimeDeclaration013 from 'reconciled:runtime/declaration@0.1.3'; // import reconciled:runtime/declaration@0.1.3
  export type * as ReconciledRuntimeLog013 from 'reconciled:runtime/log@0.1.3'; // import reconciled:runtime/log@0.1.3
  export type * as ReconciledRuntimeSettings013 from 'reconciled:runtime/settings@0.1.3'; // import reconciled:runtime/settings@0.1.3
  export type * as ReconciledRuntimeTrace013 from 'reconciled:runtime/trace@0.1.3'; // import reconciled:runtime/trace@0.1.3
  export type * as ReconciledRuntimeTypes013 from 'reconciled:runtime/types@0.1.3'; // import reconciled:runtime/types@0.1.3
  /**
  * Called once at load time, in a fresh instance: what this guest reconciles and needs.
  */
  export function describe(): Description;
  /**
  * Bring `request`'s object to its desired state. Errors are retried with backoff.
  */
  export function reconcile(request: Request): Outcome;
  /**
  * For `watches` with `guest-map`: the primaries an object (JSON) maps to.
  */
  export function map(kind: Gvk, object: string): Array<Request>;
}
