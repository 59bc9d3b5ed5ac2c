// The little of Node's test runner and assert that the unit tests use, declared here so that
// tsc checks the tests without @types/node (which the SDK itself must not see: no Node APIs
// exist in a component).

declare module 'node:test' {
  export function test(name: string, fn: () => void | Promise<void>): void;
  export function beforeEach(fn: () => void): void;
  export function afterEach(fn: () => void): void;
}

declare module 'node:assert' {
  export const strict: {
    (value: unknown, message?: string): asserts value;
    equal(actual: unknown, expected: unknown, message?: string): void;
    notEqual(actual: unknown, expected: unknown, message?: string): void;
    deepEqual(actual: unknown, expected: unknown, message?: string): void;
    ok(value: unknown, message?: string): asserts value;
    throws(fn: () => unknown, expected?: ((e: any) => boolean) | RegExp | object, message?: string): void;
    match(value: string, re: RegExp, message?: string): void;
  };
}

// The README's snippet (unit/bundle.mjs writes it out and points this name at it).
declare module 'readme-snippet' {
  export const describe: () => import('../src/index').Description;
  export const reconcile: (request: import('../src/index').Request) => import('../src/index').Outcome;
  export const map: unknown;
}
