// The reconciled guest SDK for TypeScript: a typed layer over the `reconciled:runtime` WIT
// (whose raw types `jco guest-types` generates into ./generated), mirroring the Rust SDK in
// guests/sdk: a describe builder, cache and api reads, client writes, typed errors, logging.
//
// Where it may surprise:
// - Objects cross the boundary as JSON text; here they are plain objects (`KubeObject`), not
//   generated Kubernetes models.
// - Every call is synchronous: the host answers each import before the guest goes on.
// - A guest's module-level code runs once, at build time (the component is a snapshot of the
//   initialised JavaScript engine), where no import works. Call the host only from `describe`,
//   `reconcile` and `map`.
// - Each call runs in a fresh instance: nothing a call leaves in a global survives to the next.

import * as rawApi from 'reconciled:runtime/api@0.1.2';
import * as rawCache from 'reconciled:runtime/cache@0.1.2';
import * as rawClient from 'reconciled:runtime/client@0.1.2';
import type {
  Consistency,
  Description,
  FieldIndex,
  Mapping,
  Watch,
} from 'reconciled:runtime/declaration@0.1.2';
import { log as rawLog } from 'reconciled:runtime/log@0.1.2';
import { get as rawSettings } from 'reconciled:runtime/settings@0.1.2';
import type * as World from 'reconciled:runtime/reconciler@0.1.2';
import type { Error as WitError, Gvk, Request } from 'reconciled:runtime/types@0.1.2';

export type { Description, Gvk, Request };

/** What to do after a reconcile, as the WIT world spells it. */
export type Outcome = { tag: 'done' } | { tag: 'requeue-after'; val: bigint };

/** Outcomes. */
export const Outcome = {
  /** Converged; wait for the next change. */
  done(): Outcome {
    return { tag: 'done' };
  },
  /** Reconcile again after `ms` milliseconds. */
  requeueAfter(ms: number): Outcome {
    return { tag: 'requeue-after', val: BigInt(Math.max(0, Math.floor(ms))) };
  },
};

/** The cases of the host's typed error, as the WIT spells them. */
export type ErrorCase = WitError['tag'];

/**
 * An error from the host, or one a reconciler raises: `case` says what kind (match on it, not
 * on the text). Thrown out of `reconcile`, it reaches the host as that case.
 */
export class ReconcileError extends Error {
  readonly case: ErrorCase;
  /** The WIT value; componentize-js returns a thrown value's `payload` as the `err`. */
  readonly payload: WitError;

  constructor(kase: ErrorCase, message: string) {
    super(`${kase}: ${message}`);
    this.name = 'ReconcileError';
    this.case = kase;
    this.payload = { tag: kase, val: message } as WitError;
  }

  /** The host's message, without the case. */
  get detail(): string {
    return this.payload.val;
  }

  isNotFound(): boolean {
    return this.case === 'not-found';
  }

  isConflict(): boolean {
    return this.case === 'conflict';
  }

  /** Turns whatever an import threw into a `ReconcileError`. */
  static from(e: unknown): ReconcileError {
    if (e instanceof ReconcileError) {
      return e;
    }
    const payload = (e as { payload?: { tag?: unknown; val?: unknown } } | null)?.payload;
    if (payload && typeof payload.tag === 'string') {
      return new ReconcileError(payload.tag as ErrorCase, String(payload.val ?? ''));
    }
    return new ReconcileError('other', e instanceof Error ? e.message : String(e));
  }
}

/** Runs an import, turning its error into a `ReconcileError`. */
function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw ReconcileError.from(e);
  }
}

/** A kind from an `apiVersion` (`v1`, `apps/v1`) and a kind name. */
export function gvk(apiVersion: string, kind: string): Gvk {
  const slash = apiVersion.lastIndexOf('/');
  return slash < 0
    ? { group: '', version: apiVersion, kind }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1), kind };
}

/** The `apiVersion` of a kind. */
export function apiVersion(kind: Gvk): string {
  return kind.group ? `${kind.group}/${kind.version}` : kind.version;
}

/** Kinds every reconciler meets. */
export const Kinds = {
  ConfigMap: gvk('v1', 'ConfigMap'),
  Secret: gvk('v1', 'Secret'),
  Pod: gvk('v1', 'Pod'),
  Service: gvk('v1', 'Service'),
  Deployment: gvk('apps/v1', 'Deployment'),
};

/** Object metadata, as much of it as a reconciler usually touches. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  deletionTimestamp?: string;
  [field: string]: unknown;
}

/** An owner reference. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** Any Kubernetes object, as JSON. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** Starts a description of a reconciler for `kind` (see `DescriptionBuilder`). */
export function describe(kind: Gvk): DescriptionBuilder {
  return new DescriptionBuilder(kind);
}

/**
 * What a reconciler declares: its primary kind, what it owns and watches, where, and how
 * consistent its reads must be. Defaults: every namespace it is granted, read-your-writes.
 */
export class DescriptionBuilder {
  private readonly forKind: Gvk;
  private readonly owned: Gvk[] = [];
  private readonly watched: Watch[] = [];
  private readonly scope: string[] = [];
  private selector = '';
  private readonly indexes: FieldIndex[] = [];
  private reads: Consistency = 'read-your-writes';

  constructor(kind: Gvk) {
    this.forKind = kind;
  }

  /** Objects of `kind` this reconciler controls (ownerReferences): a change reconciles the owner. */
  owns(kind: Gvk): this {
    this.owned.push(kind);
    return this;
  }

  /** Watches `kind`, mapping each object to primaries with `mapping`. */
  watches(kind: Gvk, mapping: Mapping): this {
    this.watched.push({ kind, mapping });
    return this;
  }

  /** Watches `kind`; an object's label `key` names its primary (in its own namespace). */
  watchesLabel(kind: Gvk, key: string): this {
    return this.watches(kind, { tag: 'label', val: key });
  }

  /** Watches `kind`; the reconciler's `map` says which primaries an object concerns. */
  watchesGuestMap(kind: Gvk): this {
    return this.watches(kind, { tag: 'guest-map' });
  }

  /** Only these namespaces (within the grant). */
  namespaces(names: Iterable<string>): this {
    this.scope.push(...names);
    return this;
  }

  /** Only primaries matching this label selector. */
  labelSelector(selector: string): this {
    this.selector = selector;
    return this;
  }

  /** Indexes `kind` by the field at `path`, so that lists may match on it. */
  fieldIndex(kind: Gvk, path: string): this {
    this.indexes.push({ kind, path });
    return this;
  }

  /** Reads need not see this reconciler's own writes at once. */
  eventual(): this {
    this.reads = 'eventual';
    return this;
  }

  /** The description the host reads. */
  build(): Description {
    return {
      for: this.forKind,
      owns: [...this.owned],
      watches: [...this.watched],
      namespaces: [...this.scope],
      labelSelector: this.selector,
      fieldIndexes: [...this.indexes],
      consistency: this.reads,
    };
  }
}

/** Which objects a list returns. */
export class ListOptions {
  namespace = '';
  labelSelector = '';
  fields: Array<[string, string]> = [];
  limit = 0;
  continueToken = '';

  /** Only namespace `ns`. */
  inNamespace(ns: string): this {
    this.namespace = ns;
    return this;
  }

  /** Only objects matching this label selector. */
  labels(selector: string): this {
    this.labelSelector = selector;
    return this;
  }

  /** Only objects whose field `path` equals `value` (an indexed field, or an error that names the index). */
  field(path: string, value: string): this {
    this.fields.push([path, value]);
    return this;
  }

  /** Page size (the host caps it). */
  pageSize(n: number): this {
    this.limit = n;
    return this;
  }

  /** Continues after a previous page. */
  continueFrom(token: string): this {
    this.continueToken = token;
    return this;
  }

  private raw(): rawCache.ListOptions {
    return {
      namespace: this.namespace,
      labelSelector: this.labelSelector,
      fields: this.fields,
      limit: this.limit,
      continueToken: this.continueToken,
    };
  }

  /** @internal */
  static raw(o: ListOptions | undefined): rawCache.ListOptions {
    return (o ?? new ListOptions()).raw();
  }
}

/** One page of a list. */
export interface Page<T> {
  items: T[];
  continueToken: string;
}

function parse<T>(kind: Gvk, json: string): T {
  try {
    return JSON.parse(json) as T;
  } catch (e) {
    throw new ReconcileError('other', `the host sent a ${kind.kind} that is not JSON: ${String(e)}`);
  }
}

/** Reads through one of the two read interfaces. */
function reader(raw: { get: typeof rawCache.get; list: typeof rawCache.list }) {
  return {
    /** Object `namespace/name` of `kind` (`namespace` empty for a cluster-scoped kind). */
    get<T = KubeObject>(kind: Gvk, namespace: string, name: string): T {
      return parse<T>(kind, call(() => raw.get(kind, namespace, name)));
    },
    /** Like `get`, but `undefined` when the object does not exist. */
    getOpt<T = KubeObject>(kind: Gvk, namespace: string, name: string): T | undefined {
      try {
        return this.get<T>(kind, namespace, name);
      } catch (e) {
        if (e instanceof ReconcileError && e.isNotFound()) {
          return undefined;
        }
        throw e;
      }
    },
    /** The object as the host's JSON text. */
    getRaw(kind: Gvk, namespace: string, name: string): string {
      return call(() => raw.get(kind, namespace, name));
    },
    /** One page of objects. */
    listPage<T = KubeObject>(kind: Gvk, options?: ListOptions): Page<T> {
      const page = call(() => raw.list(kind, ListOptions.raw(options)));
      return {
        items: page.items.map((i) => parse<T>(kind, i)),
        continueToken: page.continueToken,
      };
    },
    /** Every object that matches, page after page. */
    list<T = KubeObject>(kind: Gvk, options?: ListOptions): T[] {
      const opts = ListOptions.raw(options);
      const all: T[] = [];
      for (;;) {
        const page = call(() => raw.list(kind, opts));
        for (const item of page.items) {
          all.push(parse<T>(kind, item));
        }
        if (!page.continueToken) {
          return all;
        }
        opts.continueToken = page.continueToken;
      }
    },
  };
}

/** Reads from the host's cache: cheap, and by default they see this reconciler's own writes. */
export const cache = reader(rawCache);

/** Reads from the API server itself, uncached; only when the operator granted it. */
export const api = reader(rawApi);

/** `obj` as the JSON a write sends, with `apiVersion` and `kind` filled in from `kind`. */
function body(kind: Gvk, obj: KubeObject): { namespace: string; name: string; json: string } {
  const full = { ...obj, apiVersion: obj.apiVersion ?? apiVersion(kind), kind: obj.kind ?? kind.kind };
  return {
    namespace: obj.metadata?.namespace ?? '',
    name: obj.metadata?.name ?? '',
    json: JSON.stringify(full),
  };
}

/** Writes, each answered with the API server's object (which later cache reads will see). */
export const client = {
  /** Creates `obj`; an existing one is a `conflict`. */
  create<T extends KubeObject>(kind: Gvk, obj: T): T {
    const b = body(kind, obj);
    return parse<T>(kind, call(() => rawClient.create(kind, b.namespace, b.json)));
  },
  /** Replaces `obj`, guarded by its resourceVersion; the status is left as it is. */
  update<T extends KubeObject>(kind: Gvk, obj: T): T {
    const b = body(kind, obj);
    return parse<T>(kind, call(() => rawClient.update(kind, b.namespace, b.json)));
  },
  /** Replaces `obj`'s status (the status subresource). */
  updateStatus<T extends KubeObject>(kind: Gvk, obj: T): T {
    const b = body(kind, obj);
    return parse<T>(kind, call(() => rawClient.updateStatus(kind, b.namespace, b.json)));
  },
  /** Server-side apply of `obj` as `fieldManager`; `force` takes fields other managers own. */
  apply<T extends KubeObject>(kind: Gvk, obj: T, fieldManager: string, force = false): T {
    const b = body(kind, obj);
    const patch: rawClient.PatchBody = { tag: 'apply', val: { body: b.json, fieldManager, force } };
    return parse<T>(kind, call(() => rawClient.patch(kind, b.namespace, b.name, patch)));
  },
  /** JSON merge patch (RFC 7386). */
  mergePatch<T = KubeObject>(kind: Gvk, namespace: string, name: string, patch: object): T {
    const p: rawClient.PatchBody = { tag: 'merge', val: JSON.stringify(patch) };
    return parse<T>(kind, call(() => rawClient.patch(kind, namespace, name, p)));
  },
  /** JSON patch (RFC 6902). */
  jsonPatch<T = KubeObject>(kind: Gvk, namespace: string, name: string, ops: object[]): T {
    const p: rawClient.PatchBody = { tag: 'json', val: JSON.stringify(ops) };
    return parse<T>(kind, call(() => rawClient.patch(kind, namespace, name, p)));
  },
  /** Deletes an object; a missing one is `not-found`. */
  delete(kind: Gvk, namespace: string, name: string): void {
    call(() => rawClient.delete(kind, namespace, name));
  },
  /** Records an Event about an object. */
  recordEvent(
    kind: Gvk,
    namespace: string,
    name: string,
    type: 'normal' | 'warning',
    reason: string,
    message: string,
  ): void {
    call(() => rawClient.recordEvent(kind, namespace, name, type, reason, message));
  },
};

/** The host's log, with the guest's name and the key being reconciled. */
export const log = {
  debug: (message: string) => rawLog('debug', message),
  info: (message: string) => rawLog('info', message),
  warn: (message: string) => rawLog('warn', message),
  error: (message: string) => rawLog('error', message),
};

/**
 * The settings whoever deployed this module gave it (a `[[guest]]`'s `settings` in the host
 * config, or a `<stem>.settings.json` key beside a ConfigMap module): always an object, `{}`
 * when none were given, so give every field a default. Fixed for the life of a version (new settings reload the guest), and not readable in
 * `describe`.
 *
 * `T` is what the caller expects; nothing checks the object against it: check what matters.
 */
export function settings<T extends object = Record<string, unknown>>(): T {
  return JSON.parse(rawSettings()) as T;
}

/** What a reconciler implements; `map` only if it watches a kind with a guest map. */
export interface Reconciler {
  describe(): Description;
  reconcile(request: Request): Outcome;
  map?(kind: Gvk, object: KubeObject): Request[];
}

/**
 * The three functions a component exports, from a `Reconciler`: re-export them from the entry
 * module (`export const { describe, reconcile, map } = exportReconciler(...)`).
 *
 * Errors thrown by `reconcile` reach the host as its typed error: a `ReconcileError` as its
 * case, anything else as `other` with its message, never as a trap.
 */
export function exportReconciler(r: Reconciler): {
  describe: typeof World.describe;
  reconcile: typeof World.reconcile;
  map: typeof World.map;
} {
  return {
    describe: () => r.describe(),
    reconcile: (request: Request) => {
      try {
        return r.reconcile(request);
      } catch (e) {
        // componentize-js turns a thrown value's `payload` into the `err` of the result.
        throw ReconcileError.from(e);
      }
    },
    map: (kind: Gvk, object: string) => {
      if (!r.map) {
        return [];
      }
      return r.map(kind, parse<KubeObject>(kind, object));
    },
  };
}
