/// <reference path="./reconciled-runtime-cache.d.ts" />
/// <reference path="./reconciled-runtime-types.d.ts" />
declare module 'reconciled:runtime/api@0.1.3' {
  export function get(kind: Gvk, namespace: string, name: string): string;
  export function list(kind: Gvk, options: ListOptions): ListPage;
  export type Gvk = import('reconciled:runtime/types@0.1.3').Gvk;
  export type Error = import('reconciled:runtime/types@0.1.3').Error;
  export type ListOptions = import('reconciled:runtime/cache@0.1.3').ListOptions;
  export type ListPage = import('reconciled:runtime/cache@0.1.3').ListPage;
}
