/// <reference path="./reconciled-runtime-types.d.ts" />
declare module 'reconciled:runtime/client@0.1.3' {
  /**
   * Creates the object; returns it as stored.
   */
  export function create(kind: Gvk, namespace: string, object: string): string;
  /**
   * Replaces the object (optimistic concurrency on its resourceVersion).
   */
  export function update(kind: Gvk, namespace: string, object: string): string;
  /**
   * Patches the object.
   */
  export function patch(kind: Gvk, namespace: string, name: string, patch: PatchBody): string;
  /**
   * Deletes the object.
   */
  export { _delete as delete };
  function _delete(kind: Gvk, namespace: string, name: string): void;
  /**
   * Replaces the status subresource.
   */
  export function updateStatus(kind: Gvk, namespace: string, object: string): string;
  /**
   * Patches the status subresource: what controllers use to write status without a
   * read-modify-write. Server-side apply (`apply`) sends only the fields this field manager
   * owns and never conflicts on `resourceVersion`, so it cannot lose a race with a spec edit;
   * a merge or JSON patch is applied to the status as stored. Changes outside `status` are
   * ignored by the server. The object must exist: a missing one is `not-found`, never created.
   */
  export function patchStatus(kind: Gvk, namespace: string, name: string, patch: PatchBody): string;
  /**
   * Records a Kubernetes Event about an object. `reason` is UpperCamelCase: an upper-case
   * ASCII letter, then ASCII letters and digits, at most 128 bytes (else `invalid`).
   * `message` is stored as written, except that one over 1024 bytes is cut to at most 1020
   * bytes, at a character boundary, and ` ...` appended.
   */
  export function recordEvent(regarding: Gvk, namespace: string, name: string, eventType: EventType, reason: string, message: string): void;
  export type Gvk = import('reconciled:runtime/types@0.1.3').Gvk;
  export type Error = import('reconciled:runtime/types@0.1.3').Error;
  export interface ApplyPatch {
    body: string,
    fieldManager: string,
    force: boolean,
  }
  export type PatchBody = PatchBodyMerge | PatchBodyJson | PatchBodyApply;
  /**
   * JSON merge patch (RFC 7386).
   */
  export interface PatchBodyMerge {
    tag: 'merge',
    val: string,
  }
  /**
   * JSON patch (RFC 6902).
   */
  export interface PatchBodyJson {
    tag: 'json',
    val: string,
  }
  /**
   * Server-side apply of this object, as `field-manager`.
   */
  export interface PatchBodyApply {
    tag: 'apply',
    val: ApplyPatch,
  }
  /**
   * # Variants
   * 
   * ## `"normal"`
   * 
   * ## `"warning"`
   */
  export type EventType = 'normal' | 'warning';
}
