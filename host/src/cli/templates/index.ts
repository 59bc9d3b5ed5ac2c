// Reconciles {{group}}/{{version}} {{Kind}}: writes status.message from spec.message.

import { Outcome, type Request, cache, client, describe as describeKind, exportReconciler, gvk, log } from 'reconciled-guest';
import { type {{Kind}}, desiredStatus, upToDate } from './status';

const Kind = gvk('{{group}}/{{version}}', '{{Kind}}');

function reconcileOne(req: Request): Outcome {
  const obj = cache.getOpt<{{Kind}}>(Kind, req.namespace, req.name);
  if (!obj) {
    return Outcome.done();
  }
  const status = desiredStatus(obj);
  if (!upToDate(obj, status)) {
    client.updateStatus(Kind, { ...obj, status });
    log.info(`reconciled ${req.namespace}/${req.name}`);
  }
  return Outcome.done();
}

const exported = exportReconciler({ describe: () => describeKind(Kind).build(), reconcile: reconcileOne });

// The component's exports, by the names the WIT world gives them.
export const describe = exported.describe;
export const reconcile = exported.reconcile;
export const map = exported.map;
