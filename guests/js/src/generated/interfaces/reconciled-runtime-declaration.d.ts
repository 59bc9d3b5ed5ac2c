/// <reference path="./reconciled-runtime-types.d.ts" />
declare module 'reconciled:runtime/declaration@0.1.3' {
  export type Gvk = import('reconciled:runtime/types@0.1.3').Gvk;
  /**
   * How a watched object maps to primary keys.
   */
  export type Mapping = MappingOwner | MappingLabel | MappingGuestMap;
  /**
   * Through its controller ownerReference to the `for` kind (what `owns` uses).
   */
  export interface MappingOwner {
    tag: 'owner',
  }
  /**
   * The value of this label names the primary, in the same namespace.
   */
  export interface MappingLabel {
    tag: 'label',
    val: string,
  }
  /**
   * Call the guest's exported `map` function.
   */
  export interface MappingGuestMap {
    tag: 'guest-map',
  }
  export interface Watch {
    kind: Gvk,
    mapping: Mapping,
  }
  export interface FieldIndex {
    kind: Gvk,
    /**
     * Dotted JSON path, e.g. `spec.nodeName`.
     */
    path: string,
  }
  /**
   * # Variants
   * 
   * ## `"read-your-writes"`
   * 
   * A cache read of an object this guest wrote waits, bounded, for the cache to reach that
   * write; a wait that runs out is one `timeout` answer, after which that write is no
   * longer waited for (see the `cache` interface).
   * ## `"eventual"`
   * 
   * Plain cache reads, possibly stale.
   */
  export type Consistency = 'read-your-writes' | 'eventual';
  export interface Description {
    /**
     * The kind reconciled: each of its objects is a primary key.
     */
    'for': Gvk,
    /**
     * Kinds created and controlled by the primary (mapped through the ownerReference).
     */
    owns: Array<Gvk>,
    /**
     * Other kinds whose changes trigger reconciles.
     */
    watches: Array<Watch>,
    /**
     * Namespaces to watch; empty means every namespace the guest is granted.
     */
    namespaces: Array<string>,
    /**
     * Label selector applied to the `for` kind; empty matches everything.
     */
    labelSelector: string,
    fieldIndexes: Array<FieldIndex>,
    consistency: Consistency,
  }
}
