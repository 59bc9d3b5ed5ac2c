// A test guest in TypeScript, for what must hold whatever the language.
//
// Errors: its reconcile throws, so that tests see what reaches the host. A ConfigMap named
// `conflict` gets a ReconcileError('conflict'), one named `plain` a plain Error (which the SDK
// turns into `other`, never a trap).
//
// Isolation: a ConfigMap named `leak-*` gets annotation `probe.reconciled.dev/result` set to
// `v:<data.v> runs:<n> held:<m>`: how many reconciles this instance has run (a module-level
// counter) and how many blocks an earlier reconcile left in a module-level array; it then
// leaves both marks behind (the counter bumped, a 4 MiB block held) for a next reconcile to
// find. A fresh instance per reconcile reports `runs:1 held:0` every time.
//
// Anything else is done.

import { Kinds, Outcome, ReconcileError, cache, client, describe as describeKind, exportReconciler } from '../src/index';

const RESULT = 'probe.reconciled.dev/result';

let runs = 0;
const held: Uint8Array[] = [];

function leaveMarks(): string {
  runs += 1;
  const marks = `runs:${runs} held:${held.length}`;
  held.push(new Uint8Array(4 << 20).fill(0xcd));
  return marks;
}

const exported = exportReconciler({
  describe: () => describeKind(Kinds.ConfigMap).build(),
  reconcile: (request) => {
    if (request.name === 'conflict') {
      throw new ReconcileError('conflict', 'thrown by the guest');
    }
    if (request.name === 'plain') {
      throw new Error('a plain failure');
    }
    if (request.name.startsWith('leak-')) {
      const marks = leaveMarks();
      const cm = cache.getOpt(Kinds.ConfigMap, request.namespace, request.name);
      if (!cm) {
        return Outcome.done();
      }
      const v = (cm.data as Record<string, string> | undefined)?.v ?? '';
      const record = `v:${v} ${marks}`;
      if (cm.metadata.annotations?.[RESULT] !== record) {
        client.mergePatch(Kinds.ConfigMap, request.namespace, request.name, {
          metadata: { annotations: { [RESULT]: record } },
        });
      }
    }
    return Outcome.done();
  },
});

export const describe = exported.describe;
export const reconcile = exported.reconcile;
export const map = exported.map;
