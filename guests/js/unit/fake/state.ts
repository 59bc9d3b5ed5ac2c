// An in-memory API server and cache behind the fake `reconciled:runtime/*` imports that the
// unit tests bundle in place of the host's (see ../bundle.mjs). It answers as the host does
// (the same error cases, JSON text in and out) and records every call, so that a test can say
// exactly what a helper wrote. Cache and server are one store: the cache is never stale here.

import type { Gvk } from 'reconciled:runtime/types@0.1.3';
import type { PatchBody } from 'reconciled:runtime/client@0.1.3';

/** An object as JSON. */
export type Json = Record<string, any>;

/** One call of an import, as a test asserts on it. */
export interface Call {
  /** `create`, `update`, `patch`, `patchStatus`, `updateStatus`, `delete`, `recordEvent`, `cache.get`, `cache.list`, `api.get`, `api.list`, `log`, `settings`. */
  fn: string;
  kind?: string;
  namespace?: string;
  name?: string;
  /** The object a create, update or update-status sent. */
  body?: Json;
  /** A patch: its type, its body parsed, and for an apply its manager and force. */
  patch?: { type: 'merge' | 'json' | 'apply'; body: any; fieldManager?: string; force?: boolean };
  /** An Event. */
  event?: { type: string; reason: string; message: string };
  /** A log line. */
  log?: { level: string; message: string };
}

const WRITES = new Set(['create', 'update', 'patch', 'patchStatus', 'updateStatus', 'delete']);

interface Fault {
  fn: string;
  tag: string;
  message: string;
  times: number;
}

/** The host's error, thrown as componentize-js throws an import's `err`: with a `payload`. */
export class HostError extends Error {
  readonly payload: { tag: string; val: string };
  constructor(tag: string, val: string) {
    super(`${tag}: ${val}`);
    this.payload = { tag, val };
  }
}

/** A span the guest opened. */
export interface Span {
  name: string;
  attributes: Record<string, string>;
  open: boolean;
  error?: string;
}

export const state = {
  objects: new Map<string, Json>(),
  calls: [] as Call[],
  spans: [] as Span[],
  faults: [] as Fault[],
  settings: '{}',
  nextUid: 1,
  nextVersion: 1,
  /** The `deletionTimestamp` a delete of an object with finalizers sets. */
  clock: '2026-01-01T00:00:00Z',
};

/** Empties the store, the call log and the faults. */
export function reset(): void {
  state.objects.clear();
  state.calls = [];
  state.spans = [];
  state.faults = [];
  state.settings = '{}';
  state.nextUid = 1;
  state.nextVersion = 1;
}

export function apiVersionOf(kind: Gvk): string {
  return kind.group ? `${kind.group}/${kind.version}` : kind.version;
}

function kindName(kind: Gvk): string {
  return `${apiVersionOf(kind)}/${kind.kind}`;
}

function keyOf(kind: Gvk, namespace: string, name: string): string {
  return `${kindName(kind)}|${namespace}|${name}`;
}

/**
 * Puts `obj` in the store as the server would hold it: a uid, a resourceVersion and a
 * generation unless it has them. Returns the stored copy.
 */
export function seed(kind: Gvk, obj: Json): Json {
  const stored = clone(obj);
  stored.apiVersion ??= apiVersionOf(kind);
  stored.kind ??= kind.kind;
  stored.metadata ??= {};
  stored.metadata.uid ??= `uid-${state.nextUid++}`;
  stored.metadata.resourceVersion ??= String(state.nextVersion++);
  stored.metadata.generation ??= 1;
  state.objects.set(keyOf(kind, stored.metadata.namespace ?? '', stored.metadata.name ?? ''), stored);
  return clone(stored);
}

/** The stored object, or undefined. */
export function stored(kind: Gvk, namespace: string, name: string): Json | undefined {
  const o = state.objects.get(keyOf(kind, namespace, name));
  return o && clone(o);
}

/** The next `times` calls of `fn` fail with the error case `tag`. */
export function fail(fn: string, tag: string, times = 1, message = 'injected by the test'): void {
  state.faults.push({ fn, tag, message, times });
}

/** The calls that write (create, update, patches, delete). */
export function writes(): Call[] {
  return state.calls.filter((c) => WRITES.has(c.fn));
}

/** The Events recorded. */
export function recorded(): Call[] {
  return state.calls.filter((c) => c.fn === 'recordEvent');
}

/** Records a call and throws an injected fault for it, if any. */
export function enter(call: Call): void {
  state.calls.push(call);
  const fault = state.faults.find((f) => f.fn === call.fn && f.times > 0);
  if (fault) {
    fault.times--;
    throw new HostError(fault.tag, fault.message);
  }
}

export function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

function equal(a: unknown, b: unknown): boolean {
  return JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
}

function sorted(v: unknown): unknown {
  if (Array.isArray(v)) {
    return v.map(sorted);
  }
  if (v && typeof v === 'object') {
    return Object.fromEntries(
      Object.keys(v as object)
        .sort()
        .map((k) => [k, sorted((v as Json)[k])]),
    );
  }
  return v;
}

function parseJson(text: string, what: string): any {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HostError('invalid', `the ${what} is not JSON: ${String(e)}`);
  }
}

function mustGet(kind: Gvk, namespace: string, name: string): Json {
  const o = state.objects.get(keyOf(kind, namespace, name));
  if (!o) {
    throw new HostError('not-found', `${kind.kind} ${namespace}/${name} not found`);
  }
  return o;
}

function store(kind: Gvk, obj: Json, bumpGeneration: boolean): string {
  obj.metadata.resourceVersion = String(state.nextVersion++);
  if (bumpGeneration) {
    obj.metadata.generation = (obj.metadata.generation ?? 0) + 1;
  }
  state.objects.set(keyOf(kind, obj.metadata.namespace ?? '', obj.metadata.name), obj);
  return JSON.stringify(obj);
}

/** Whether anything but metadata and status differs: what moves `metadata.generation`. */
function specChanged(a: Json, b: Json): boolean {
  const strip = ({ metadata: _m, status: _s, ...rest }: Json) => rest;
  return !equal(strip(a), strip(b));
}

// --- reads -----------------------------------------------------------------------------------

export function get(fn: string, kind: Gvk, namespace: string, name: string): string {
  enter({ fn, kind: kindName(kind), namespace, name });
  return JSON.stringify(mustGet(kind, namespace, name));
}

export function list(
  fn: string,
  kind: Gvk,
  options: { namespace: string; labelSelector: string; fields: Array<[string, string]>; limit: number; continueToken: string },
): { items: string[]; continueToken: string } {
  enter({ fn, kind: kindName(kind), namespace: options.namespace });
  const prefix = `${kindName(kind)}|`;
  const matching = [...state.objects.entries()]
    .filter(([k]) => k.startsWith(prefix))
    .map(([, o]) => o)
    .filter((o) => !options.namespace || o.metadata.namespace === options.namespace)
    .filter((o) => labelsMatch(o.metadata.labels ?? {}, options.labelSelector))
    .filter((o) => options.fields.every(([path, value]) => String(at(o, path) ?? '') === value))
    .sort((a, b) => `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`));
  const start = options.continueToken ? Number(options.continueToken) : 0;
  const end = options.limit > 0 ? start + options.limit : matching.length;
  return {
    items: matching.slice(start, end).map((o) => JSON.stringify(o)),
    continueToken: end < matching.length ? String(end) : '',
  };
}

/** Equality selectors only (`a=b,c!=d`): what the tests use. */
function labelsMatch(labels: Record<string, string>, selector: string): boolean {
  return selector
    .split(',')
    .filter((s) => s.trim())
    .every((term) => {
      const ne = term.split('!=');
      if (ne.length === 2) {
        return labels[ne[0].trim()] !== ne[1].trim();
      }
      const [k, v] = term.split('=').map((s) => s.trim());
      return labels[k] === v;
    });
}

function at(obj: Json, dotted: string): unknown {
  return dotted.split('.').reduce<any>((o, k) => (o == null ? undefined : o[k]), obj);
}

// --- writes ----------------------------------------------------------------------------------

export function create(kind: Gvk, namespace: string, text: string): string {
  const obj = parseJson(text, 'object');
  enter({ fn: 'create', kind: kindName(kind), namespace, name: obj.metadata?.name, body: obj });
  if (state.objects.has(keyOf(kind, namespace, obj.metadata?.name))) {
    throw new HostError('conflict', `${kind.kind} ${namespace}/${obj.metadata.name} already exists`);
  }
  const created = clone(obj);
  created.metadata.uid = `uid-${state.nextUid++}`;
  created.metadata.generation = 1;
  return store(kind, created, false);
}

export function update(kind: Gvk, namespace: string, text: string): string {
  const obj = parseJson(text, 'object');
  enter({ fn: 'update', kind: kindName(kind), namespace, name: obj.metadata?.name, body: obj });
  const current = mustGet(kind, namespace, obj.metadata?.name);
  if (obj.metadata.resourceVersion && obj.metadata.resourceVersion !== current.metadata.resourceVersion) {
    throw new HostError('conflict', `${kind.kind} ${namespace}/${obj.metadata.name} changed since it was read`);
  }
  const next = clone(obj);
  next.status = current.status;
  next.metadata.uid = current.metadata.uid;
  next.metadata.generation = current.metadata.generation;
  return store(kind, next, specChanged(current, next));
}

export function updateStatus(kind: Gvk, namespace: string, text: string): string {
  const obj = parseJson(text, 'object');
  enter({ fn: 'updateStatus', kind: kindName(kind), namespace, name: obj.metadata?.name, body: obj });
  const current = mustGet(kind, namespace, obj.metadata?.name);
  if (obj.metadata.resourceVersion && obj.metadata.resourceVersion !== current.metadata.resourceVersion) {
    throw new HostError('conflict', `${kind.kind} ${namespace}/${obj.metadata.name} changed since it was read`);
  }
  const next = clone(current);
  next.status = clone(obj.status);
  return store(kind, next, false);
}

function describePatch(p: PatchBody): NonNullable<Call['patch']> {
  switch (p.tag) {
    case 'merge':
      return { type: 'merge', body: parseJson(p.val, 'merge patch') };
    case 'json':
      return { type: 'json', body: parseJson(p.val, 'JSON patch') };
    case 'apply':
      return { type: 'apply', body: parseJson(p.val.body, 'applied object'), fieldManager: p.val.fieldManager, force: p.val.force };
  }
}

function patched(current: Json, p: NonNullable<Call['patch']>): Json {
  switch (p.type) {
    case 'merge':
      return mergePatch(clone(current), p.body);
    case 'json':
      return jsonPatch(clone(current), p.body);
    case 'apply':
      // As the offline server models apply: maps merged recursively, anything else replaced.
      return deepMerge(clone(current), p.body);
  }
}

export function patch(kind: Gvk, namespace: string, name: string, body: PatchBody): string {
  const p = describePatch(body);
  enter({ fn: 'patch', kind: kindName(kind), namespace, name, patch: p });
  const current = state.objects.get(keyOf(kind, namespace, name));
  if (!current) {
    if (p.type !== 'apply') {
      throw new HostError('not-found', `${kind.kind} ${namespace}/${name} not found`);
    }
    const created = clone(p.body);
    created.metadata.uid = `uid-${state.nextUid++}`;
    created.metadata.generation = 1;
    delete created.status;
    return store(kind, created, false);
  }
  const next = patched(current, p);
  next.status = current.status;
  if (next.status === undefined) {
    delete next.status;
  }
  return store(kind, next, specChanged(current, next));
}

export function patchStatus(kind: Gvk, namespace: string, name: string, body: PatchBody): string {
  const p = describePatch(body);
  enter({ fn: 'patchStatus', kind: kindName(kind), namespace, name, patch: p });
  const current = mustGet(kind, namespace, name);
  const next = clone(current);
  next.status = patched(current, p).status;
  return store(kind, next, false);
}

export function del(kind: Gvk, namespace: string, name: string): void {
  enter({ fn: 'delete', kind: kindName(kind), namespace, name });
  const current = mustGet(kind, namespace, name);
  if ((current.metadata.finalizers ?? []).length > 0) {
    current.metadata.deletionTimestamp ??= state.clock;
    store(kind, current, false);
  } else {
    state.objects.delete(keyOf(kind, namespace, name));
  }
}

export function recordEvent(kind: Gvk, namespace: string, name: string, type: string, reason: string, message: string): void {
  enter({ fn: 'recordEvent', kind: kindName(kind), namespace, name, event: { type, reason, message } });
  if (!/^[A-Z][A-Za-z0-9]{0,127}$/.test(reason)) {
    throw new HostError('invalid', `event reason ${JSON.stringify(reason)} is not UpperCamelCase`);
  }
}

// --- JSON merge patch, JSON patch, apply ------------------------------------------------------

function mergePatch(target: any, patch: any): any {
  if (!patch || typeof patch !== 'object' || Array.isArray(patch)) {
    return clone(patch);
  }
  const out = target && typeof target === 'object' && !Array.isArray(target) ? target : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) {
      delete out[k];
    } else {
      out[k] = mergePatch(out[k], v);
    }
  }
  return out;
}

function deepMerge(into: any, from: any): any {
  if (into && typeof into === 'object' && !Array.isArray(into) && from && typeof from === 'object' && !Array.isArray(from)) {
    for (const [k, v] of Object.entries(from)) {
      into[k] = deepMerge(into[k], v);
    }
    return into;
  }
  return clone(from);
}

function pointer(path: string): string[] {
  if (path === '') {
    return [];
  }
  if (!path.startsWith('/')) {
    throw new HostError('invalid', `JSON pointer ${path} does not start with /`);
  }
  return path
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** RFC 6902, with the API server's leniency: `test` of `null` holds for a missing path. */
function jsonPatch(doc: Json, ops: any[]): Json {
  for (const op of ops) {
    const tokens = pointer(op.path);
    const last = tokens.pop()!;
    let parent: any = doc;
    for (const t of tokens) {
      parent = parent?.[t];
    }
    const failed = (why: string) => new HostError('invalid', `the JSON patch does not apply: ${op.op} ${op.path}: ${why}`);
    if (parent === null || typeof parent !== 'object') {
      if (op.op === 'test' && op.value === null) {
        continue;
      }
      throw failed('no such parent');
    }
    switch (op.op) {
      case 'test': {
        const have = parent[last];
        if (!(have === undefined && op.value === null) && !equal(have, op.value)) {
          throw failed(`holds ${JSON.stringify(have)}`);
        }
        break;
      }
      case 'add':
        if (Array.isArray(parent)) {
          const i = last === '-' ? parent.length : Number(last);
          if (!(i >= 0 && i <= parent.length)) {
            throw failed('index out of range');
          }
          parent.splice(i, 0, clone(op.value));
        } else {
          parent[last] = clone(op.value);
        }
        break;
      case 'remove':
      case 'replace':
        if (Array.isArray(parent)) {
          const i = Number(last);
          if (!(i >= 0 && i < parent.length)) {
            throw failed('index out of range');
          }
          if (op.op === 'remove') {
            parent.splice(i, 1);
          } else {
            parent[i] = clone(op.value);
          }
        } else {
          if (!(last in parent)) {
            throw failed('no such field');
          }
          if (op.op === 'remove') {
            delete parent[last];
          } else {
            parent[last] = clone(op.value);
          }
        }
        break;
      default:
        throw failed('operation not modelled by the fake');
    }
  }
  return doc;
}
