// The fake `reconciled:runtime/client` import (see ./state.ts).

import * as server from './state';

export const create = server.create;
export const update = server.update;
export const patch = server.patch;
export const patchStatus = server.patchStatus;
export const updateStatus = server.updateStatus;
export const recordEvent = server.recordEvent;
export { del as delete } from './state';

// The fake must offer what the generated bindings declare, with the same signatures.
type Real = typeof import('reconciled:runtime/client@0.1.3');
const self = { create, update, patch, patchStatus, updateStatus, recordEvent, delete: server.del };
void (self satisfies Real);
