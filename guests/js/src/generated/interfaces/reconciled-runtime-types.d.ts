declare module 'reconciled:runtime/types@0.1.3' {
  /**
   * A kind: API group (empty for the core group), version and kind.
   */
  export interface Gvk {
    group: string,
    version: string,
    kind: string,
  }
  /**
   * What went wrong. Each case carries a human-readable message; match on the case, not the
   * text.
   */
  export type Error = ErrorNotFound | ErrorConflict | ErrorForbidden | ErrorInvalid | ErrorTooLarge | ErrorNotDeclared | ErrorUnindexedField | ErrorTimeout | ErrorOther;
  /**
   * The object does not exist (in the cache, or on the API server for writes).
   */
  export interface ErrorNotFound {
    tag: 'not-found',
    val: string,
  }
  /**
   * The write lost a race: the object changed since it was read (HTTP 409).
   */
  export interface ErrorConflict {
    tag: 'conflict',
    val: string,
  }
  /**
   * RBAC (the host's own, or the guest's grant) denies this.
   */
  export interface ErrorForbidden {
    tag: 'forbidden',
    val: string,
  }
  /**
   * The API server rejected the object (HTTP 400 or 422), or the arguments are malformed:
   * a name, namespace, kind, selector, field path, body, field manager or event reason
   * that Kubernetes would refuse. The message names the value and says what a valid one
   * looks like.
   */
  export interface ErrorInvalid {
    tag: 'invalid',
    val: string,
  }
  /**
   * The answer would exceed this reconcile's byte budget (an answer refused so spends none
   * of it), or the request is too big: a body over about 3 MiB, or a URL or body the API
   * server would not read.
   */
  export interface ErrorTooLarge {
    tag: 'too-large',
    val: string,
  }
  /**
   * The kind was not declared in `describe`; declare it under `for`, `owns` or `watches`.
   */
  export interface ErrorNotDeclared {
    tag: 'not-declared',
    val: string,
  }
  /**
   * A field match names a field without an index; declare the index in `describe`.
   */
  export interface ErrorUnindexedField {
    tag: 'unindexed-field',
    val: string,
  }
  /**
   * A bounded wait ran out, e.g. read-your-writes waiting for the cache to catch up.
   */
  export interface ErrorTimeout {
    tag: 'timeout',
    val: string,
  }
  /**
   * Anything else: the cache not synced yet, an API server that cannot be reached or
   * fails (5xx, 429). Never the answer to malformed arguments, which are `invalid`.
   */
  export interface ErrorOther {
    tag: 'other',
    val: string,
  }
  /**
   * The object a reconcile is about.
   */
  export interface Request {
    /**
     * Empty for cluster-scoped kinds.
     */
    namespace: string,
    name: string,
  }
}
