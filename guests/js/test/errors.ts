// A test guest: its reconcile throws, so that tests see what reaches the host. A ConfigMap
// named `conflict` gets a ReconcileError('conflict'), one named `plain` a plain Error (which
// the SDK turns into `other`, never a trap); anything else is done.

import { Kinds, Outcome, ReconcileError, describe as describeKind, exportReconciler } from '../src/index';

const exported = exportReconciler({
  describe: () => describeKind(Kinds.ConfigMap).build(),
  reconcile: (request) => {
    if (request.name === 'conflict') {
      throw new ReconcileError('conflict', 'thrown by the guest');
    }
    if (request.name === 'plain') {
      throw new Error('a plain failure');
    }
    return Outcome.done();
  },
});

export const describe = exported.describe;
export const reconcile = exported.reconcile;
export const map = exported.map;
