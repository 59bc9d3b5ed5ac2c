// The reconciled guest SDK for TypeScript: a typed layer over the `reconciled:runtime` WIT
// (whose raw types `jco guest-types` generates into ./generated), mirroring the Rust SDK in
// guests/sdk, in the words of guests/VOCABULARY.md: a describe builder, cache and api reads,
// client writes, typed errors, logging, and the helpers controllers keep rewriting (owner
// references, finalizers, conditions, create-or-update, status by server-side apply, Events).
//
// Where it may surprise:
// - Objects cross the boundary as JSON text; here they are plain objects (`KubeObject`), not
//   generated Kubernetes models.
// - Every call is synchronous: the host answers each import before the guest goes on.
// - A guest's module-level code runs once, at build time (the component is a snapshot of the
//   initialised JavaScript engine), where no import works. Call the host only from `describe`,
//   `reconcile` and `map`.
// - Each call runs in a fresh instance: nothing a call leaves in a global survives to the next.
// - The helpers that change an object (`setControllerReference`, `setCondition`,
//   `removeCondition`) change it in place, as their Go and Rust namesakes do; copy first if the
//   original must stay as read.

import * as rawApi from 'reconciled:runtime/api@0.1.3';
import * as rawCache from 'reconciled:runtime/cache@0.1.3';
import * as rawClient from 'reconciled:runtime/client@0.1.3';
import type {
  Consistency,
  Description,
  FieldIndex,
  Mapping,
  Watch,
} from 'reconciled:runtime/declaration@0.1.3';
import { log as rawLog } from 'reconciled:runtime/log@0.1.3';
import { get as rawSettings } from 'reconciled:runtime/settings@0.1.3';
import * as rawTrace from 'reconciled:runtime/trace@0.1.3';
import type * as World from 'reconciled:runtime/reconciler@0.1.3';
import type { Error as WitError, Gvk, Request } from 'reconciled:runtime/types@0.1.3';

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
  finalizers?: string[];
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

  /**
   * Watches `kind`; an object's controller ownerReference names its primary (which must be of
   * the `for` kind). Like `owns`, but for a kind this reconciler does not itself create.
   */
  watchesOwner(kind: Gvk): this {
    return this.watches(kind, { tag: 'owner' });
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

/**
 * Which objects a list returns: `new ListOptions().inNamespace(ns).labels(sel)`. Every method
 * changes this object and returns it.
 */
export class ListOptions {
  /** Only this namespace; empty: every namespace the guest may read. */
  namespace = '';
  /** A Kubernetes label selector; empty matches everything. */
  labelSelector = '';
  /** Exact matches of indexed fields, `[path, value]`. */
  fields: Array<[string, string]> = [];
  /** Page size; 0 is the host's default. (Set it with `limit(n)`.) */
  pageLimit = 0;
  /** Where the page starts; empty for the first. */
  continueToken = '';

  /** Only namespace `ns`. */
  inNamespace(ns: string): this {
    this.namespace = ns;
    return this;
  }

  /** Only objects matching this label selector (`app=web,tier!=db`); replaces an earlier one. */
  labels(selector: string): this {
    this.labelSelector = selector;
    return this;
  }

  /**
   * Only objects whose field `path` equals `value`. The field needs a field index declared in
   * `describe` (`metadata.name` and `metadata.namespace` need none), else the read is an
   * `unindexed-field` error. Several calls must all match.
   */
  field(path: string, value: string): this {
    this.fields.push([path, value]);
    return this;
  }

  /** Page size; the host caps it. `cache.list` still returns every page. */
  limit(n: number): this {
    this.pageLimit = n;
    return this;
  }

  /** @deprecated The old name of `limit(n)`; kept so that older guests still build. */
  pageSize(n: number): this {
    return this.limit(n);
  }

  /** Starts at the page a previous page's `continueToken` names. */
  continueFrom(token: string): this {
    this.continueToken = token;
    return this;
  }

  private raw(): rawCache.ListOptions {
    return {
      namespace: this.namespace,
      labelSelector: this.labelSelector,
      fields: this.fields.map(([p, v]) => [p, v]),
      limit: Math.max(0, Math.floor(this.pageLimit)),
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

/** `namespace/name`, or `name` for a cluster-scoped object, as messages name an object. */
function key(namespace: string | undefined, name: string | undefined): string {
  return namespace ? `${namespace}/${name ?? ''}` : (name ?? '');
}

/** A deep copy of a JSON value. */
function copyJson<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}

/** Whether two JSON values are equal (object keys in any order). */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) {
    return true;
  }
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]))
    );
  }
  if (isPlainObject(a) && isPlainObject(b)) {
    const ak = Object.keys(a).filter((k) => a[k] !== undefined);
    const bk = Object.keys(b).filter((k) => b[k] !== undefined);
    return ak.length === bk.length && ak.every((k) => jsonEqual(a[k], b[k]));
  }
  return false;
}

/**
 * Whether `have` holds every field of `want` with the same value: objects field by field
 * (`have` may hold more), lists element by element and of the same length (an apply owns the
 * whole list it sends, and defaulted fields inside its elements are still allowed), anything
 * else equal. A `null` in `want` asks for the field to be absent, so absent or `null` holds it.
 */
function holds(have: unknown, want: unknown): boolean {
  if (want === null || want === undefined) {
    return have === null || have === undefined;
  }
  if (Array.isArray(want)) {
    return Array.isArray(have) && have.length === want.length && want.every((w, i) => holds(have[i], w));
  }
  if (isPlainObject(want)) {
    return isPlainObject(have) && Object.keys(want).every((k) => holds(have[k], want[k]));
  }
  return have === want;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What a `createOrUpdate` or `applyIfChanged` did. */
export type Changed = 'created' | 'updated' | 'unchanged';

/** What a `createOrUpdate` or `applyIfChanged` did, and the object as it now is. */
export interface Written<T> {
  changed: Changed;
  /** The server's answer to the write; the cached object when nothing was written. */
  object: T;
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
  /**
   * Replaces `obj`'s status (the status subresource), guarded by its resourceVersion: a
   * `conflict` whenever the object changed since it was read, spec edits included. Prefer
   * `applyStatus`, which cannot lose that race.
   */
  updateStatus<T extends KubeObject>(kind: Gvk, obj: T): T {
    const b = body(kind, obj);
    return parse<T>(kind, call(() => rawClient.updateStatus(kind, b.namespace, b.json)));
  },
  /**
   * Server-side apply of `obj` as `fieldManager`: the fields it sends become this manager's,
   * and fields it sent before and no longer sends are removed. `force` takes fields other
   * managers own instead of failing with `conflict`; a controller passes `true`. Creates the
   * object when it does not exist.
   */
  apply<T extends KubeObject>(kind: Gvk, obj: T, fieldManager: string, force = false): T {
    const b = body(kind, obj);
    const patch: rawClient.PatchBody = { tag: 'apply', val: { body: b.json, fieldManager, force } };
    return parse<T>(kind, call(() => rawClient.patch(kind, b.namespace, b.name, patch)));
  },
  /**
   * Server-side apply of `obj`'s status (the status subresource) as `fieldManager`. Only
   * `apiVersion`, `kind`, `metadata.name`, `metadata.namespace` and `status` are sent; the rest
   * of `obj` is ignored, so passing the object as read with a new `status` is fine. It never
   * conflicts on resourceVersion, so unlike `updateStatus` it cannot lose a race with a spec
   * edit. Fields of the status this manager applied before and no longer sends are removed.
   * The object must exist (`not-found` otherwise; the status is never created alone).
   */
  applyStatus<T extends KubeObject>(kind: Gvk, obj: T, fieldManager: string, force = false): T {
    const metadata: ObjectMeta = { name: obj.metadata?.name };
    if (obj.metadata?.namespace) {
      metadata.namespace = obj.metadata.namespace;
    }
    const sent: KubeObject = { apiVersion: obj.apiVersion ?? apiVersion(kind), kind: obj.kind ?? kind.kind, metadata };
    if (obj.status !== undefined) {
      sent.status = obj.status;
    }
    const b = body(kind, sent);
    const patch: rawClient.PatchBody = { tag: 'apply', val: { body: b.json, fieldManager, force } };
    return parse<T>(kind, call(() => rawClient.patchStatus(kind, b.namespace, b.name, patch)));
  },
  /** JSON merge patch (RFC 7386): a `null` removes a field; a list is replaced whole. */
  mergePatch<T = KubeObject>(kind: Gvk, namespace: string, name: string, patch: object): T {
    const p: rawClient.PatchBody = { tag: 'merge', val: JSON.stringify(patch) };
    return parse<T>(kind, call(() => rawClient.patch(kind, namespace, name, p)));
  },
  /**
   * JSON merge patch of the status subresource, e.g. `{status: {phase: 'Ready'}}`: the patch
   * is written from the object's root, and whatever it says outside `status` is ignored.
   */
  mergePatchStatus<T = KubeObject>(kind: Gvk, namespace: string, name: string, patch: object): T {
    const p: rawClient.PatchBody = { tag: 'merge', val: JSON.stringify(patch) };
    return parse<T>(kind, call(() => rawClient.patchStatus(kind, namespace, name, p)));
  },
  /** JSON patch (RFC 6902); a failed operation (a `test` included) is `invalid`. */
  jsonPatch<T = KubeObject>(kind: Gvk, namespace: string, name: string, ops: object[]): T {
    const p: rawClient.PatchBody = { tag: 'json', val: JSON.stringify(ops) };
    return parse<T>(kind, call(() => rawClient.patch(kind, namespace, name, p)));
  },
  /** Deletes an object; a missing one is `not-found`. */
  delete(kind: Gvk, namespace: string, name: string): void {
    call(() => rawClient.delete(kind, namespace, name));
  },
  /**
   * As controller-runtime's `CreateOrUpdate`: reads `namespace/name` from the cache. When it
   * is missing, `mutate` fills in a new object holding only `apiVersion`, `kind` and that name
   * and namespace, which is created (`created`). Otherwise `mutate` changes a copy of the
   * cached object, which is written with `update` only if it differs from what was read
   * (`updated`; else `unchanged`, and nothing is written).
   *
   * `mutate` changes the object it is given in place, or returns a replacement. Renaming it is
   * an `invalid` error. The update is guarded by the cached resourceVersion, so a stale cache
   * makes it a `conflict` (the retry reads again); the kind must be declared in `describe`.
   */
  createOrUpdate<T extends KubeObject>(
    kind: Gvk,
    namespace: string,
    name: string,
    mutate: (obj: T) => T | void,
  ): Written<T> {
    const current = cache.getOpt<T>(kind, namespace, name);
    const metadata: ObjectMeta = { name };
    if (namespace) {
      metadata.namespace = namespace;
    }
    const draft = current ? copyJson(current) : ({ apiVersion: apiVersion(kind), kind: kind.kind, metadata } as T);
    const wanted = (mutate(draft) ?? draft) as T;
    if ((wanted.metadata?.name ?? '') !== name || (wanted.metadata?.namespace ?? '') !== namespace) {
      throw new ReconcileError(
        'invalid',
        `createOrUpdate of ${kind.kind} ${key(namespace, name)}: the function renamed it to ` +
          `${key(wanted.metadata?.namespace, wanted.metadata?.name)}; it may change anything but the name and namespace`,
      );
    }
    if (!current) {
      return { changed: 'created', object: client.create(kind, wanted) };
    }
    if (jsonEqual(current, wanted)) {
      return { changed: 'unchanged', object: current };
    }
    return { changed: 'updated', object: client.update(kind, wanted) };
  },
  /**
   * Server-side applies `obj` (forced) as `fieldManager`, unless the cached object already
   * holds every field of `obj` with the same values: then `unchanged`, and nothing is written.
   * `created` when the cache held no such object, `updated` otherwise.
   *
   * The comparison is against the cache, which read-your-writes makes see this guest's own
   * writes: a stale cache costs at most a write the server finds has nothing to change. Lists
   * must match in length, so a list other managers add entries to is applied every time. The
   * kind must be declared in `describe`.
   */
  applyIfChanged<T extends KubeObject>(kind: Gvk, obj: T, fieldManager: string): Written<T> {
    const full = { ...obj, apiVersion: obj.apiVersion ?? apiVersion(kind), kind: obj.kind ?? kind.kind };
    const current = cache.getOpt<T>(kind, obj.metadata?.namespace ?? '', obj.metadata?.name ?? '');
    if (current && holds(current, full)) {
      return { changed: 'unchanged', object: current };
    }
    return { changed: current ? 'updated' : 'created', object: client.apply(kind, full, fieldManager, true) };
  },
  /**
   * Records an Event about object `namespace/name` of `kind`. `reason` is UpperCamelCase
   * (else `invalid`); a message over 1024 bytes is cut. `events.normal` and `events.warning`
   * take the object instead.
   */
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

/**
 * Events about an object you hold, named by `kind` and its `metadata.namespace` and
 * `metadata.name`. An Event is a side note: a reconciler that must not fail for a lost one
 * catches the error (the write it reports is already done).
 */
export const events = {
  /** A Normal Event: something happened as it should. `reason` is UpperCamelCase. */
  normal(kind: Gvk, obj: KubeObject, reason: string, message: string): void {
    client.recordEvent(kind, obj.metadata?.namespace ?? '', obj.metadata?.name ?? '', 'normal', reason, message);
  },
  /** A Warning Event: something is wrong that a person may need to fix. */
  warning(kind: Gvk, obj: KubeObject, reason: string, message: string): void {
    client.recordEvent(kind, obj.metadata?.namespace ?? '', obj.metadata?.name ?? '', 'warning', reason, message);
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

// ---------------------------------------------------------------------------------------------
// Spans

/**
 * A span of the guest's own in the host's traces (WIT 0.1.3): a child of the innermost span
 * still open, else of the reconcile's. End it with `end()` or `fail(message)`; ending one also
 * ends the spans opened inside it, and whatever is open when `reconcile` returns ends then.
 * Tracing never fails a reconcile: past the host's limits (64 spans a call, 32 attributes a
 * span) or with the host's traces off, the span does nothing.
 */
export class Span {
  /** The host's handle; 0 names no span. */
  private handle: number;

  constructor(name: string) {
    this.handle = rawTrace.open(name);
  }

  /** Sets attribute `key` to `value`, shown with the span. */
  attribute(key: string, value: string | number | boolean): this {
    if (this.handle !== 0) {
      rawTrace.setAttribute(this.handle, key, String(value));
    }
    return this;
  }

  /** Ends the span; a second end does nothing. */
  end(): void {
    this.close(undefined);
  }

  /** Ends the span marked failed, with `message`. */
  fail(message: string): void {
    this.close(message);
  }

  private close(error: string | undefined): void {
    if (this.handle !== 0) {
      rawTrace.close(this.handle, error);
      this.handle = 0;
    }
  }
}

/** Opens a span named `name`: see `Span`. */
export function openSpan(name: string): Span {
  return new Span(name);
}

/**
 * Runs `f` in a span named `name`, ended when `f` returns, and marked failed (with the
 * message) when `f` throws; what `f` threw is thrown on.
 */
export function inSpan<T>(name: string, f: (span: Span) => T): T {
  const span = new Span(name);
  try {
    const result = f(span);
    span.end();
    return result;
  } catch (e) {
    span.fail(e instanceof Error ? e.message : String(e));
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// Owner references

/** The uid of `obj`, or an `invalid` error naming it: a reference without one means nothing. */
function uidOf(kind: Gvk, obj: KubeObject): string {
  const uid = obj.metadata?.uid;
  if (!uid) {
    throw new ReconcileError(
      'invalid',
      `${kind.kind} ${key(obj.metadata?.namespace, obj.metadata?.name)} has no metadata.uid: only an object read from the cluster can own another`,
    );
  }
  return uid;
}

/**
 * The controller owner reference to `owner` (of `kind`): `controller: true` and
 * `blockOwnerDeletion: true`, for an object this reconciler creates and controls. An owner
 * without `metadata.uid` (one not read from the cluster) is an `invalid` error. An owner must
 * be in the same namespace as what it owns, or cluster-scoped.
 */
export function controllerReference(kind: Gvk, owner: KubeObject): OwnerReference {
  return {
    apiVersion: apiVersion(kind),
    kind: kind.kind,
    name: owner.metadata?.name ?? '',
    uid: uidOf(kind, owner),
    controller: true,
    blockOwnerDeletion: true,
  };
}

/**
 * As controller-runtime's `SetControllerReference`: makes `owner` (of `kind`) the controller
 * of `obj`, changing `obj.metadata.ownerReferences` in place. A reference to the same owner
 * (by uid) is replaced; other non-controller references stay. If another owner already
 * controls `obj`, that is an `invalid` error naming both, and `obj` is left unchanged.
 */
export function setControllerReference(kind: Gvk, owner: KubeObject, obj: KubeObject): void {
  const ref = controllerReference(kind, owner);
  const current = controllerOf(obj);
  if (current && current.uid !== ref.uid) {
    throw new ReconcileError(
      'invalid',
      `${obj.kind ?? 'object'} ${key(obj.metadata?.namespace, obj.metadata?.name)} is already controlled by ` +
        `${current.kind} ${current.name} (uid ${current.uid}); it cannot also be controlled by ${ref.kind} ${ref.name} (uid ${ref.uid})`,
    );
  }
  obj.metadata ??= {};
  const refs = obj.metadata.ownerReferences ?? [];
  const at = refs.findIndex((r) => r.uid === ref.uid);
  if (at >= 0) {
    refs[at] = ref;
  } else {
    refs.push(ref);
  }
  obj.metadata.ownerReferences = refs;
}

/** The owner reference of `obj` with `controller: true`, if any. */
export function controllerOf(obj: KubeObject): OwnerReference | undefined {
  return (obj.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
}

/**
 * Whether `owner` is the controller of `obj`, by uid: the test for "is this mine" before
 * deleting or changing something found by a list. An owner without a uid controls nothing.
 */
export function isControlledBy(obj: KubeObject, owner: KubeObject): boolean {
  const uid = owner.metadata?.uid;
  return !!uid && controllerOf(obj)?.uid === uid;
}

// ---------------------------------------------------------------------------------------------
// Finalizers

/** Whether `obj` carries the finalizer `name`. */
export function hasFinalizer(obj: KubeObject, name: string): boolean {
  return obj.metadata?.finalizers?.includes(name) ?? false;
}

/** What `withFinalizer` runs. */
export interface FinalizerHandlers<T extends KubeObject> {
  /** Brings a live object to its desired state. */
  apply(obj: T): Outcome;
  /** Releases what the object holds outside the cluster's garbage collection. */
  cleanup(obj: T): Outcome;
}

/** Runs a finalizer JSON patch, reporting a failed `test` as the `conflict` it means. */
function finalizerPatch<T extends KubeObject>(kind: Gvk, obj: T, ops: object[]): T {
  try {
    return client.jsonPatch<T>(kind, obj.metadata.namespace ?? '', obj.metadata.name ?? '', ops);
  } catch (e) {
    const err = ReconcileError.from(e);
    if (err.case === 'invalid') {
      throw new ReconcileError(
        'conflict',
        `the finalizers of ${kind.kind} ${key(obj.metadata.namespace, obj.metadata.name)} changed since they were read: ${err.detail}`,
      );
    }
    throw err;
  }
}

/**
 * Runs `apply`, or `cleanup` once `obj` (of `kind`) is being deleted, keeping the finalizer
 * `name` in step, in kube-runtime's shape:
 *
 * - not being deleted, finalizer missing: adds it by a JSON patch that first `test`s
 *   `/metadata/finalizers` against the list as read (`null` when there was none), then runs
 *   `apply` with the patched object the server answered;
 * - not being deleted, finalizer present: runs `apply`;
 * - being deleted (`deletionTimestamp` set), finalizer present: runs `cleanup`, and only after
 *   it returns removes the finalizer by a JSON patch that `test`s the entry at its index first;
 * - being deleted, finalizer absent: runs nothing, `Outcome.done()`.
 *
 * A failed `test` (the API server's `invalid`) is thrown as `conflict`: the list changed since
 * it was read, and the retry reads it again. `cleanup` may therefore run more than once for one
 * deletion, and must be idempotent. Returns what `apply` or `cleanup` returned; an error they
 * throw propagates, and leaves the finalizer in place.
 */
export function withFinalizer<T extends KubeObject>(
  kind: Gvk,
  obj: T,
  name: string,
  handlers: FinalizerHandlers<T>,
): Outcome {
  const finalizers = obj.metadata?.finalizers ?? [];
  const at = finalizers.indexOf(name);
  if (!obj.metadata?.deletionTimestamp) {
    if (at >= 0) {
      return handlers.apply(obj);
    }
    const ops =
      finalizers.length === 0
        ? [
            { op: 'test', path: '/metadata/finalizers', value: null },
            { op: 'add', path: '/metadata/finalizers', value: [name] },
          ]
        : [
            { op: 'test', path: '/metadata/finalizers', value: finalizers },
            { op: 'add', path: '/metadata/finalizers/-', value: name },
          ];
    return handlers.apply(finalizerPatch(kind, obj, ops));
  }
  if (at < 0) {
    return Outcome.done();
  }
  const outcome = handlers.cleanup(obj);
  const path = `/metadata/finalizers/${at}`;
  try {
    finalizerPatch(kind, obj, [
      { op: 'test', path, value: name },
      { op: 'remove', path },
    ]);
  } catch (e) {
    // Not found: someone else let it go first (a reconcile from a cache that had not yet seen
    // it go); it is deleted, which was wanted.
    if (ReconcileError.from(e).case !== 'not-found') {
      throw e;
    }
  }
  return outcome;
}

// ---------------------------------------------------------------------------------------------
// Conditions

/** A status condition, as `metav1.Condition`. */
export interface Condition {
  /** UpperCamelCase, e.g. `Ready`; one condition per type. */
  type: string;
  status: 'True' | 'False' | 'Unknown';
  /** UpperCamelCase, why the status is what it is. */
  reason: string;
  /** For a person. */
  message: string;
  /** The `metadata.generation` the condition was set from. */
  observedGeneration?: number;
  /** RFC 3339, when `status` last changed. */
  lastTransitionTime?: string;
}

/** The guest's clock, RFC 3339 to the second with `Z`, as `metav1.Time` writes it. */
function now(): string {
  // Through Date.now so that a test may replace the clock; toISOString adds milliseconds.
  return new Date(Date.now()).toISOString().replace(/\.\d+Z$/, 'Z');
}

/**
 * As apimachinery's `meta.SetStatusCondition`: sets `condition` in `conditions`, in place. A
 * condition of a new type is appended (its `lastTransitionTime` the given one, or `now()`).
 * One of an existing type takes the new `status`, `reason`, `message` and
 * `observedGeneration`; its `lastTransitionTime` moves (to the given one, or `now()`) only when
 * `status` changed. Returns whether anything changed, so that a status write can be skipped
 * when nothing did.
 */
export function setCondition(conditions: Condition[], condition: Condition): boolean {
  const existing = findCondition(conditions, condition.type);
  if (!existing) {
    conditions.push({ ...condition, lastTransitionTime: condition.lastTransitionTime || now() });
    return true;
  }
  let changed = false;
  if (existing.status !== condition.status) {
    existing.status = condition.status;
    existing.lastTransitionTime = condition.lastTransitionTime || now();
    changed = true;
  }
  if (existing.reason !== condition.reason) {
    existing.reason = condition.reason;
    changed = true;
  }
  if (existing.message !== condition.message) {
    existing.message = condition.message;
    changed = true;
  }
  if (existing.observedGeneration !== condition.observedGeneration) {
    if (condition.observedGeneration === undefined) {
      delete existing.observedGeneration;
    } else {
      existing.observedGeneration = condition.observedGeneration;
    }
    changed = true;
  }
  return changed;
}

/** The condition of `type`, if any (the one in the list, so changing it changes the list). */
export function findCondition(conditions: readonly Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

/** Whether the condition of `type` is there with status `True`. */
export function isConditionTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return findCondition(conditions, type)?.status === 'True';
}

/** Removes the condition of `type` in place; returns whether there was one. */
export function removeCondition(conditions: Condition[], type: string): boolean {
  const at = conditions.findIndex((c) => c.type === type);
  if (at < 0) {
    return false;
  }
  conditions.splice(at, 1);
  return true;
}

/** What a reconciler implements; `map` only if it watches a kind with a guest map. */
export interface Reconciler {
  describe(): Description;
  reconcile(request: Request): Outcome;
  map?(kind: Gvk, object: KubeObject): Request[];
}

/**
 * The three functions a component exports, from a `Reconciler`: re-export them from the entry
 * module (`export const { describe, reconcile, map } = exportReconciler(...)`), having
 * imported this module's `describe` under another name (`describe as describeKind`): the
 * entry's own `describe` would otherwise be the one it calls, for ever.
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
