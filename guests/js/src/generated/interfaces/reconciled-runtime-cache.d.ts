/// <reference path="./reconciled-runtime-types.d.ts" />
declare module 'reconciled:runtime/cache@0.1.3' {
  /**
   * One object as JSON.
   */
  export function get(kind: Gvk, namespace: string, name: string): string;
  /**
   * A page of objects.
   */
  export function list(kind: Gvk, options: ListOptions): ListPage;
  export type Gvk = import('reconciled:runtime/types@0.1.3').Gvk;
  export type Error = import('reconciled:runtime/types@0.1.3').Error;
  export interface ListOptions {
    /**
     * Empty: all namespaces the guest may read.
     */
    namespace: string,
    /**
     * Kubernetes label selector syntax; empty matches everything.
     */
    labelSelector: string,
    /**
     * Exact field matches. Each field must be declared as a field index in `describe`
     * (`metadata.name` and `metadata.namespace` need none); otherwise `unindexed-field`.
     */
    fields: Array<[string, string]>,
    /**
     * Page size; 0 means the host's default. The host caps it.
     */
    limit: number,
    /**
     * From the previous page; empty for the first page.
     */
    continueToken: string,
  }
  export interface ListPage {
    /**
     * Objects as JSON, sorted by namespace/name.
     */
    items: Array<string>,
    /**
     * Empty when this was the last page.
     */
    continueToken: string,
  }
}
