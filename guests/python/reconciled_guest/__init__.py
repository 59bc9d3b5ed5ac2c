"""The reconciled guest SDK for Python: a typed layer over the ``reconciled:runtime`` WIT (whose
raw bindings componentize-py generates as ``wit_world``), mirroring the Rust SDK in guests/sdk
in the words of guests/VOCABULARY.md: a describe builder, cache and api reads, client writes,
typed errors, logging, and the helpers controllers keep rewriting (owner references,
finalizers, conditions, create-or-update, status by server-side apply, Events).

Where it may surprise:

- Objects cross the boundary as JSON text; here they are plain ``dict``s.
- Every call is synchronous: the host answers each import before the guest goes on.
- The component is a snapshot of the initialised interpreter: module-level code runs once, at
  build time, where no import works, and nothing can be imported at run time. Call the host only
  from ``describe``, ``reconcile`` and ``map``.
- Each call runs in a fresh instance: nothing a call leaves in a global survives to the next.
- The helpers that change an object (``set_controller_reference``, ``set_condition``,
  ``remove_condition``) change it in place, as their Go and Rust namesakes do; copy first if the
  original must stay as read.
"""

import copy
import json
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from componentize_py_types import Err
import wit_world
from wit_world.imports import api as _api
from wit_world.imports import cache as _cache
from wit_world.imports import client as _client
from wit_world.imports import declaration as _decl
from wit_world.imports import log as _log
from wit_world.imports import settings as _settings
from wit_world.imports import trace as _trace
from wit_world.imports import types as _types

Gvk = _types.Gvk
Request = _types.Request
Description = _decl.Description
KubeObject = Dict[str, Any]

# The error cases, as the WIT spells them, and the binding's class for each.
_CASES = {
    "not-found": _types.Error_NotFound,
    "conflict": _types.Error_Conflict,
    "forbidden": _types.Error_Forbidden,
    "invalid": _types.Error_Invalid,
    "too-large": _types.Error_TooLarge,
    "not-declared": _types.Error_NotDeclared,
    "unindexed-field": _types.Error_UnindexedField,
    "timeout": _types.Error_Timeout,
    "other": _types.Error_Other,
}
_CASE_OF = {cls: case for case, cls in _CASES.items()}


class ReconcileError(Exception):
    """An error from the host, or one a reconciler raises: ``case`` says what kind (match on it,
    not on the text). Raised out of ``reconcile``, it reaches the host as that case."""

    def __init__(self, case: str, message: str):
        if case not in _CASES:
            raise ValueError(f"unknown error case {case!r}; one of {sorted(_CASES)}")
        super().__init__(f"{case}: {message}")
        self.case = case
        self.message = message

    def is_not_found(self) -> bool:
        """Whether the case is ``not-found``."""
        return self.case == "not-found"

    def is_conflict(self) -> bool:
        """Whether the case is ``conflict``."""
        return self.case == "conflict"

    def to_wit(self) -> Any:
        """The WIT ``error`` value of this error."""
        return _CASES[self.case](self.message)

    @staticmethod
    def from_exception(e: BaseException) -> "ReconcileError":
        """Whatever an import or a reconciler raised, as a ``ReconcileError`` (``other`` unless
        it carries a case)."""
        if isinstance(e, ReconcileError):
            return e
        if isinstance(e, Err):
            case = _CASE_OF.get(type(e.value), "other")
            return ReconcileError(case, str(getattr(e.value, "value", e.value)))
        return ReconcileError("other", f"{type(e).__name__}: {e}")


def _call(f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Err as e:
        raise ReconcileError.from_exception(e) from None


def gvk(api_version: str, kind: str) -> Gvk:
    """A kind from an ``apiVersion`` (``v1``, ``apps/v1``) and a kind name."""
    group, _, version = api_version.rpartition("/")
    return Gvk(group=group, version=version, kind=kind)


def api_version(kind: Gvk) -> str:
    """The ``apiVersion`` of a kind."""
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


class Kinds:
    """Kinds every reconciler meets."""

    CONFIG_MAP = gvk("v1", "ConfigMap")
    SECRET = gvk("v1", "Secret")
    POD = gvk("v1", "Pod")
    SERVICE = gvk("v1", "Service")
    DEPLOYMENT = gvk("apps/v1", "Deployment")


class Outcome:
    """What to do after a reconcile."""

    @staticmethod
    def done() -> Any:
        """Converged; wait for the next change."""
        return wit_world.Outcome_Done()

    @staticmethod
    def requeue_after(ms: int) -> Any:
        """Reconcile again after ``ms`` milliseconds."""
        return wit_world.Outcome_RequeueAfter(max(0, int(ms)))


class DescriptionBuilder:
    """What a reconciler declares: its primary kind, what it owns and watches, where, and how
    consistent its reads must be. Defaults: every namespace it is granted, read-your-writes."""

    def __init__(self, kind: Gvk):
        self._for = kind
        self._owns: List[Gvk] = []
        self._watches: List[Any] = []
        self._namespaces: List[str] = []
        self._selector = ""
        self._indexes: List[Any] = []
        self._consistency = _decl.Consistency.READ_YOUR_WRITES

    def owns(self, kind: Gvk) -> "DescriptionBuilder":
        """Objects of ``kind`` this reconciler controls: a change reconciles the owner."""
        self._owns.append(kind)
        return self

    def watches_label(self, kind: Gvk, key: str) -> "DescriptionBuilder":
        """Watches ``kind``; an object's label ``key`` names its primary."""
        self._watches.append(_decl.Watch(kind, _decl.Mapping_Label(key)))
        return self

    def watches_owner(self, kind: Gvk) -> "DescriptionBuilder":
        """Watches ``kind``; an object's controller ownerReference names its primary."""
        self._watches.append(_decl.Watch(kind, _decl.Mapping_Owner()))
        return self

    def watches_guest_map(self, kind: Gvk) -> "DescriptionBuilder":
        """Watches ``kind``; the reconciler's ``map`` says which primaries an object concerns."""
        self._watches.append(_decl.Watch(kind, _decl.Mapping_GuestMap()))
        return self

    def namespaces(self, names: Iterable[str]) -> "DescriptionBuilder":
        """Only these namespaces (within the grant)."""
        self._namespaces.extend(names)
        return self

    def label_selector(self, selector: str) -> "DescriptionBuilder":
        """Only primaries matching this label selector."""
        self._selector = selector
        return self

    def field_index(self, kind: Gvk, path: str) -> "DescriptionBuilder":
        """Indexes ``kind`` by the field at ``path``, so that lists may match on it."""
        self._indexes.append(_decl.FieldIndex(kind, path))
        return self

    def eventual(self) -> "DescriptionBuilder":
        """Reads need not see this reconciler's own writes at once."""
        self._consistency = _decl.Consistency.EVENTUAL
        return self

    def build(self) -> Description:
        """The description the host reads."""
        return _decl.Description(
            for_=self._for,
            owns=list(self._owns),
            watches=list(self._watches),
            namespaces=list(self._namespaces),
            label_selector=self._selector,
            field_indexes=list(self._indexes),
            consistency=self._consistency,
        )


def describe(kind: Gvk) -> DescriptionBuilder:
    """Starts a description of a reconciler for ``kind``."""
    return DescriptionBuilder(kind)


class ListOptions:
    """Which objects a list returns: ``ListOptions().in_namespace(ns).labels(sel)``. Every method
    changes this object and returns it.

    The constructor takes the same values by keyword (``namespace``, ``labels``, ``fields``,
    ``limit``, ``continue_token``), in that order, as it always has; they are kept as the
    attributes ``namespace``, ``label_selector``, ``fields``, ``page_limit`` and
    ``continue_token``, since ``labels`` and ``limit`` name methods."""

    def __init__(
        self,
        namespace: str = "",
        labels: str = "",
        fields: Optional[List[Tuple[str, str]]] = None,
        limit: int = 0,
        continue_token: str = "",
    ):
        self.namespace = namespace
        self.label_selector = labels
        self.fields: List[Tuple[str, str]] = list(fields or [])
        self.page_limit = limit
        self.continue_token = continue_token

    def __repr__(self) -> str:
        return (
            f"ListOptions(namespace={self.namespace!r}, labels={self.label_selector!r}, "
            f"fields={self.fields!r}, limit={self.page_limit!r}, continue_token={self.continue_token!r})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ListOptions) and repr(self) == repr(other)

    def in_namespace(self, ns: str) -> "ListOptions":
        """Only namespace ``ns``; without it, every namespace the guest may read."""
        self.namespace = ns
        return self

    def labels(self, selector: str) -> "ListOptions":
        """Only objects matching this label selector (``app=web,tier!=db``); replaces an earlier
        one."""
        self.label_selector = selector
        return self

    def field(self, path: str, value: str) -> "ListOptions":
        """Only objects whose field ``path`` equals ``value``. The field needs a field index
        declared in ``describe`` (``metadata.name`` and ``metadata.namespace`` need none), else
        the read is an ``unindexed-field`` error. Several calls must all match."""
        self.fields.append((path, value))
        return self

    def limit(self, n: int) -> "ListOptions":
        """Page size; the host caps it. ``cache.list`` still returns every page."""
        self.page_limit = n
        return self

    def continue_from(self, token: str) -> "ListOptions":
        """Starts at the page a previous page's continue token names."""
        self.continue_token = token
        return self

    def with_labels(self, selector: str) -> "ListOptions":
        """Deprecated: the old name of ``labels(selector)``, kept so that older guests still run."""
        warnings.warn("ListOptions.with_labels is deprecated; use labels", DeprecationWarning, stacklevel=2)
        return self.labels(selector)

    def with_field(self, path: str, value: str) -> "ListOptions":
        """Deprecated: the old name of ``field(path, value)``, kept so that older guests still run."""
        warnings.warn("ListOptions.with_field is deprecated; use field", DeprecationWarning, stacklevel=2)
        return self.field(path, value)

    def _raw(self) -> Any:
        return _cache.ListOptions(
            self.namespace,
            self.label_selector,
            list(self.fields),
            max(0, int(self.page_limit)),
            self.continue_token,
        )


def _parse(kind: Gvk, text: str) -> KubeObject:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ReconcileError("other", f"the host sent a {kind.kind} that is not JSON: {e}") from None


class _Reader:
    def __init__(self, raw: Any):
        self._raw = raw

    def get(self, kind: Gvk, namespace: str, name: str) -> KubeObject:
        """Object ``namespace/name`` of ``kind`` (``namespace`` empty for a cluster-scoped kind)."""
        return _parse(kind, _call(lambda: self._raw.get(kind, namespace, name)))

    def get_opt(self, kind: Gvk, namespace: str, name: str) -> Optional[KubeObject]:
        """Like ``get``, but ``None`` when the object does not exist."""
        try:
            return self.get(kind, namespace, name)
        except ReconcileError as e:
            if e.is_not_found():
                return None
            raise

    def list_page(self, kind: Gvk, options: Optional[ListOptions] = None) -> Tuple[List[KubeObject], str]:
        """One page of objects, and the token of the next (empty after the last)."""
        page = _call(lambda: self._raw.list(kind, (options or ListOptions())._raw()))
        return [_parse(kind, i) for i in page.items], page.continue_token

    def list(self, kind: Gvk, options: Optional[ListOptions] = None) -> List[KubeObject]:
        """Every object that matches, page after page."""
        raw = (options or ListOptions())._raw()
        out: List[KubeObject] = []
        while True:
            page = _call(lambda: self._raw.list(kind, raw))
            out.extend(_parse(kind, i) for i in page.items)
            if not page.continue_token:
                return out
            raw.continue_token = page.continue_token


cache = _Reader(_cache)
"""Reads from the host's cache: cheap, and by default they see this reconciler's own writes."""

api = _Reader(_api)
"""Reads from the API server itself, uncached; only when the operator granted it."""


def _body(kind: Gvk, obj: KubeObject) -> Tuple[str, str, str]:
    full = dict(obj)
    full.setdefault("apiVersion", api_version(kind))
    full.setdefault("kind", kind.kind)
    meta = full.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", ""), json.dumps(full)


def _key(namespace: Optional[str], name: Optional[str]) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object, as messages name an object."""
    return f"{namespace}/{name or ''}" if namespace else (name or "")


def _same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal, with ``True`` never equal to ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _holds(have: Any, want: Any) -> bool:
    """Whether ``have`` holds every field of ``want`` with the same value: dicts field by field
    (``have`` may hold more), lists element by element and of the same length (an apply owns the
    whole list it sends, and defaulted fields inside its elements are still allowed), anything
    else equal. A ``None`` in ``want`` asks for the field to be absent, so absent or ``None``
    holds it."""
    if want is None:
        return have is None
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_holds(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(_holds(h, w) for h, w in zip(have, want))
    return _same_json(have, want)


CREATED = "created"
"""``create_or_update`` / ``apply_if_changed``: the object did not exist and was created."""
UPDATED = "updated"
"""``create_or_update`` / ``apply_if_changed``: the object differed and was written."""
UNCHANGED = "unchanged"
"""``create_or_update`` / ``apply_if_changed``: the object already was as wanted; nothing was
written."""


class Written(NamedTuple):
    """What a ``create_or_update`` or ``apply_if_changed`` did (``"created"``, ``"updated"`` or
    ``"unchanged"``), and the object as it now is: the server's answer to the write, or the
    cached object when nothing was written. Unpacks as ``changed, obj = ...``."""

    changed: str
    object: KubeObject


class _Client:
    """Writes, each answered with the API server's object (which later cache reads will see)."""

    def create(self, kind: Gvk, obj: KubeObject) -> KubeObject:
        """Creates ``obj``; an existing one is a ``conflict``."""
        ns, _, body = _body(kind, obj)
        return _parse(kind, _call(lambda: _client.create(kind, ns, body)))

    def update(self, kind: Gvk, obj: KubeObject) -> KubeObject:
        """Replaces ``obj``, guarded by its resourceVersion; the status is left as it is."""
        ns, _, body = _body(kind, obj)
        return _parse(kind, _call(lambda: _client.update(kind, ns, body)))

    def update_status(self, kind: Gvk, obj: KubeObject) -> KubeObject:
        """Replaces ``obj``'s status (the status subresource), guarded by its resourceVersion: a
        ``conflict`` whenever the object changed since it was read, spec edits included. Prefer
        ``apply_status``, which cannot lose that race."""
        ns, _, body = _body(kind, obj)
        return _parse(kind, _call(lambda: _client.update_status(kind, ns, body)))

    def apply(self, kind: Gvk, obj: KubeObject, field_manager: str, force: bool = False) -> KubeObject:
        """Server-side apply of ``obj`` as ``field_manager``: the fields it sends become this
        manager's, and fields it sent before and no longer sends are removed. ``force`` takes
        fields other managers own instead of failing with ``conflict``; a controller passes
        ``True``. Creates the object when it does not exist."""
        ns, name, body = _body(kind, obj)
        patch = _client.PatchBody_Apply(_client.ApplyPatch(body, field_manager, force))
        return _parse(kind, _call(lambda: _client.patch(kind, ns, name, patch)))

    def apply_status(self, kind: Gvk, obj: KubeObject, field_manager: str, force: bool = False) -> KubeObject:
        """Server-side apply of ``obj``'s status (the status subresource) as ``field_manager``.

        Only ``apiVersion``, ``kind``, ``metadata.name``, ``metadata.namespace`` and ``status``
        are sent; the rest of ``obj`` is ignored, so passing the object as read with a new
        ``status`` is fine. It never conflicts on resourceVersion, so unlike ``update_status``
        it cannot lose a race with a spec edit. Fields of the status this manager applied before
        and no longer sends are removed. The object must exist (``not-found`` otherwise; the
        status is never created alone)."""
        meta = obj.get("metadata") or {}
        sent_meta = {"name": meta.get("name")}
        if meta.get("namespace"):
            sent_meta["namespace"] = meta["namespace"]
        sent: KubeObject = {
            "apiVersion": obj.get("apiVersion") or api_version(kind),
            "kind": obj.get("kind") or kind.kind,
            "metadata": sent_meta,
        }
        if "status" in obj:
            sent["status"] = obj["status"]
        ns, name, body = _body(kind, sent)
        patch = _client.PatchBody_Apply(_client.ApplyPatch(body, field_manager, force))
        return _parse(kind, _call(lambda: _client.patch_status(kind, ns, name, patch)))

    def merge_patch(self, kind: Gvk, namespace: str, name: str, patch: Dict[str, Any]) -> KubeObject:
        """JSON merge patch (RFC 7386): a ``None`` removes a field; a list is replaced whole."""
        body = _client.PatchBody_Merge(json.dumps(patch))
        return _parse(kind, _call(lambda: _client.patch(kind, namespace, name, body)))

    def merge_patch_status(self, kind: Gvk, namespace: str, name: str, patch: Dict[str, Any]) -> KubeObject:
        """JSON merge patch of the status subresource, e.g. ``{"status": {"phase": "Ready"}}``:
        the patch is written from the object's root, and whatever it says outside ``status`` is
        ignored."""
        body = _client.PatchBody_Merge(json.dumps(patch))
        return _parse(kind, _call(lambda: _client.patch_status(kind, namespace, name, body)))

    def json_patch(self, kind: Gvk, namespace: str, name: str, ops: List[Dict[str, Any]]) -> KubeObject:
        """JSON patch (RFC 6902); a failed operation (a ``test`` included) is ``invalid``."""
        body = _client.PatchBody_Json(json.dumps(ops))
        return _parse(kind, _call(lambda: _client.patch(kind, namespace, name, body)))

    def delete(self, kind: Gvk, namespace: str, name: str) -> None:
        """Deletes an object; a missing one is ``not-found``."""
        _call(lambda: _client.delete(kind, namespace, name))

    def create_or_update(
        self,
        kind: Gvk,
        namespace: str,
        name: str,
        mutate: Callable[[KubeObject], Optional[KubeObject]],
    ) -> Written:
        """As controller-runtime's ``CreateOrUpdate``: reads ``namespace/name`` from the cache.
        When it is missing, ``mutate`` fills in a new object holding only ``apiVersion``,
        ``kind`` and that name and namespace, which is created (``"created"``). Otherwise
        ``mutate`` changes a copy of the cached object, which is written with ``update`` only if
        it differs from what was read (``"updated"``; else ``"unchanged"``, and nothing is
        written).

        ``mutate`` changes the dict it is given in place, or returns a replacement. Renaming it
        is an ``invalid`` error. The update is guarded by the cached resourceVersion, so a stale
        cache makes it a ``conflict`` (the retry reads again); the kind must be declared in
        ``describe``."""
        current = cache.get_opt(kind, namespace, name)
        if current is None:
            meta: Dict[str, Any] = {"name": name}
            if namespace:
                meta["namespace"] = namespace
            draft: KubeObject = {"apiVersion": api_version(kind), "kind": kind.kind, "metadata": meta}
        else:
            draft = copy.deepcopy(current)
        returned = mutate(draft)
        wanted = draft if returned is None else returned
        wanted_meta = wanted.get("metadata") or {}
        if (wanted_meta.get("name") or "") != name or (wanted_meta.get("namespace") or "") != namespace:
            raise ReconcileError(
                "invalid",
                f"create_or_update of {kind.kind} {_key(namespace, name)}: the function renamed it to "
                f"{_key(wanted_meta.get('namespace'), wanted_meta.get('name'))}; it may change anything but "
                "the name and namespace",
            )
        if current is None:
            return Written(CREATED, self.create(kind, wanted))
        if _same_json(current, wanted):
            return Written(UNCHANGED, current)
        return Written(UPDATED, self.update(kind, wanted))

    def apply_if_changed(self, kind: Gvk, obj: KubeObject, field_manager: str) -> Written:
        """Server-side applies ``obj`` (forced) as ``field_manager``, unless the cached object
        already holds every field of ``obj`` with the same values: then ``"unchanged"``, and
        nothing is written. ``"created"`` when the cache held no such object, ``"updated"``
        otherwise.

        The comparison is against the cache, which read-your-writes makes see this guest's own
        writes: a stale cache costs at most a write the server finds has nothing to change. Lists
        must match in length, so a list other managers add entries to is applied every time.
        The kind must be declared in ``describe``."""
        full = dict(obj)
        full.setdefault("apiVersion", api_version(kind))
        full.setdefault("kind", kind.kind)
        meta = full.get("metadata") or {}
        current = cache.get_opt(kind, meta.get("namespace", ""), meta.get("name", ""))
        if current is not None and _holds(current, full):
            return Written(UNCHANGED, current)
        changed = CREATED if current is None else UPDATED
        return Written(changed, self.apply(kind, full, field_manager, force=True))

    def record_event(
        self, kind: Gvk, namespace: str, name: str, warning: bool, reason: str, message: str
    ) -> None:
        """Records an Event about object ``namespace/name`` of ``kind``, a Warning when
        ``warning``, else Normal. ``reason`` is UpperCamelCase (else ``invalid``); a message
        over 1024 bytes is cut. ``events.normal`` and ``events.warning`` take the object
        instead."""
        t = _client.EventType.WARNING if warning else _client.EventType.NORMAL
        _call(lambda: _client.record_event(kind, namespace, name, t, reason, message))


client = _Client()
"""Writes, each answered with the API server's object (which later cache reads will see)."""


class _Events:
    """Events about an object you hold, named by ``kind`` and its ``metadata.namespace`` and
    ``metadata.name``. An Event is a side note: a reconciler that must not fail for a lost one
    catches the error (the write it reports is already done)."""

    def normal(self, kind: Gvk, obj: KubeObject, reason: str, message: str) -> None:
        """A Normal Event: something happened as it should. ``reason`` is UpperCamelCase."""
        meta = obj.get("metadata") or {}
        client.record_event(kind, meta.get("namespace", ""), meta.get("name", ""), False, reason, message)

    def warning(self, kind: Gvk, obj: KubeObject, reason: str, message: str) -> None:
        """A Warning Event: something is wrong that a person may need to fix."""
        meta = obj.get("metadata") or {}
        client.record_event(kind, meta.get("namespace", ""), meta.get("name", ""), True, reason, message)


events = _Events()
"""Events about an object you hold: ``events.normal(kind, obj, reason, message)``,
``events.warning(...)``."""


class log:
    """The host's log, with the guest's name and the key being reconciled."""

    @staticmethod
    def debug(message: str) -> None:
        _log.log(_log.Level.DEBUG, message)

    @staticmethod
    def info(message: str) -> None:
        _log.log(_log.Level.INFO, message)

    @staticmethod
    def warn(message: str) -> None:
        _log.log(_log.Level.WARN, message)

    @staticmethod
    def error(message: str) -> None:
        _log.log(_log.Level.ERROR, message)


def settings() -> Dict[str, Any]:
    """The settings whoever deployed this module gave it (a ``[[guest]]``'s ``settings`` in the
    host config, or a ``<stem>.settings.json`` key beside a ConfigMap module): always a
    ``dict``, empty when none were given, so read each key with a default. Fixed for the life of a version (new settings reload the guest), and not readable
    in ``describe``."""
    return json.loads(_settings.get())


# ---------------------------------------------------------------------------------------------
# Spans


class Span:
    """A span of the guest's own in the host's traces (WIT 0.1.3): a child of the innermost span
    still open, else of the reconcile's. Use it as a context manager (``with open_span("render")
    as span:``), which ends it, marked failed with the message if the block raised; or end it
    with ``end()`` or ``fail(message)``. Ending one also ends the spans opened inside it, and
    whatever is open when ``reconcile`` returns ends then. Tracing never fails a reconcile: past
    the host's limits (64 spans a call, 32 attributes a span) or with the host's traces off, the
    span does nothing."""

    def __init__(self, name: str) -> None:
        # The host's handle; 0 names no span.
        self._handle = _trace.open(name)

    def attribute(self, key: str, value: Any) -> "Span":
        """Sets attribute ``key`` to ``value`` (as text), shown with the span."""
        if self._handle:
            _trace.set_attribute(self._handle, key, str(value))
        return self

    def end(self) -> None:
        """Ends the span; a second end does nothing."""
        self._close(None)

    def fail(self, message: str) -> None:
        """Ends the span marked failed, with ``message``."""
        self._close(message)

    def _close(self, error: Optional[str]) -> None:
        if self._handle:
            _trace.close(self._handle, error)
            self._handle = 0

    def __enter__(self) -> "Span":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None:
            self.fail(str(exc))
        else:
            self.end()
        return False


def open_span(name: str) -> Span:
    """Opens a span named ``name``: see ``Span``."""
    return Span(name)


def in_span(name: str, f: Callable[[Span], Any]) -> Any:
    """Runs ``f`` in a span named ``name``, ended when ``f`` returns and marked failed (with the
    message) when it raises; what it raised is raised on."""
    with Span(name) as span:
        return f(span)


# ---------------------------------------------------------------------------------------------
# Owner references


def _uid_of(kind: Gvk, obj: KubeObject) -> str:
    """The uid of ``obj``, or an ``invalid`` error naming it: a reference without one means
    nothing."""
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        raise ReconcileError(
            "invalid",
            f"{kind.kind} {_key(meta.get('namespace'), meta.get('name'))} has no metadata.uid: only an "
            "object read from the cluster can own another",
        )
    return uid


def controller_reference(kind: Gvk, owner: KubeObject) -> Dict[str, Any]:
    """The controller owner reference to ``owner`` (of ``kind``): ``controller: True`` and
    ``blockOwnerDeletion: True``, for an object this reconciler creates and controls. An owner
    without ``metadata.uid`` (one not read from the cluster) is an ``invalid`` error. An owner
    must be in the same namespace as what it owns, or cluster-scoped."""
    return {
        "apiVersion": api_version(kind),
        "kind": kind.kind,
        "name": (owner.get("metadata") or {}).get("name", ""),
        "uid": _uid_of(kind, owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: KubeObject) -> Optional[Dict[str, Any]]:
    """The owner reference of ``obj`` with ``controller: True``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return ref
    return None


def set_controller_reference(kind: Gvk, owner: KubeObject, obj: KubeObject) -> None:
    """As controller-runtime's ``SetControllerReference``: makes ``owner`` (of ``kind``) the
    controller of ``obj``, changing ``obj["metadata"]["ownerReferences"]`` in place. A reference
    to the same owner (by uid) is replaced; other non-controller references stay. If another
    owner already controls ``obj``, that is an ``invalid`` error naming both, and ``obj`` is left
    unchanged."""
    ref = controller_reference(kind, owner)
    current = controller_of(obj)
    if current is not None and current.get("uid") != ref["uid"]:
        meta = obj.get("metadata") or {}
        raise ReconcileError(
            "invalid",
            f"{obj.get('kind') or 'object'} {_key(meta.get('namespace'), meta.get('name'))} is already "
            f"controlled by {current.get('kind')} {current.get('name')} (uid {current.get('uid')}); it cannot "
            f"also be controlled by {ref['kind']} {ref['name']} (uid {ref['uid']})",
        )
    meta = obj.setdefault("metadata", {})
    refs = meta.get("ownerReferences") or []
    for i, r in enumerate(refs):
        if r.get("uid") == ref["uid"]:
            refs[i] = ref
            break
    else:
        refs.append(ref)
    meta["ownerReferences"] = refs


def is_controlled_by(obj: KubeObject, owner: KubeObject) -> bool:
    """Whether ``owner`` is the controller of ``obj``, by uid: the test for "is this mine" before
    deleting or changing something found by a list. An owner without a uid controls nothing."""
    uid = (owner.get("metadata") or {}).get("uid")
    ref = controller_of(obj)
    return bool(uid) and ref is not None and ref.get("uid") == uid


# ---------------------------------------------------------------------------------------------
# Finalizers


def has_finalizer(obj: KubeObject, name: str) -> bool:
    """Whether ``obj`` carries the finalizer ``name``."""
    return name in ((obj.get("metadata") or {}).get("finalizers") or [])


def _finalizer_patch(kind: Gvk, obj: KubeObject, ops: List[Dict[str, Any]]) -> KubeObject:
    """Runs a finalizer JSON patch, reporting a failed ``test`` as the ``conflict`` it means."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    try:
        return client.json_patch(kind, namespace, name, ops)
    except ReconcileError as e:
        if e.case == "invalid":
            raise ReconcileError(
                "conflict",
                f"the finalizers of {kind.kind} {_key(namespace, name)} changed since they were read: {e.message}",
            ) from None
        raise


def with_finalizer(
    kind: Gvk,
    obj: KubeObject,
    name: str,
    apply: Callable[[KubeObject], Any],
    cleanup: Callable[[KubeObject], Any],
) -> Any:
    """Runs ``apply``, or ``cleanup`` once ``obj`` (of ``kind``) is being deleted, keeping the
    finalizer ``name`` in step, in kube-runtime's shape:

    - not being deleted, finalizer missing: adds it by a JSON patch that first ``test``\\ s
      ``/metadata/finalizers`` against the list as read (``null`` when there was none), then
      runs ``apply`` with the patched object the server answered;
    - not being deleted, finalizer present: runs ``apply``;
    - being deleted (``deletionTimestamp`` set), finalizer present: runs ``cleanup``, and only
      after it returns removes the finalizer by a JSON patch that ``test``\\ s the entry at its
      index first;
    - being deleted, finalizer absent: runs nothing, ``Outcome.done()``.

    A failed ``test`` (the API server's ``invalid``) is raised as ``conflict``: the list changed
    since it was read, and the retry reads it again. ``cleanup`` may therefore run more than once
    for one deletion, and must be idempotent. Returns what ``apply`` or ``cleanup`` returned; an
    error they raise propagates, and leaves the finalizer in place."""
    meta = obj.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    if not meta.get("deletionTimestamp"):
        if name in finalizers:
            return apply(obj)
        if finalizers:
            ops = [
                {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                {"op": "add", "path": "/metadata/finalizers/-", "value": name},
            ]
        else:
            ops = [
                {"op": "test", "path": "/metadata/finalizers", "value": None},
                {"op": "add", "path": "/metadata/finalizers", "value": [name]},
            ]
        return apply(_finalizer_patch(kind, obj, ops))
    if name not in finalizers:
        return Outcome.done()
    outcome = cleanup(obj)
    path = f"/metadata/finalizers/{finalizers.index(name)}"
    try:
        _finalizer_patch(kind, obj, [{"op": "test", "path": path, "value": name}, {"op": "remove", "path": path}])
    except ReconcileError as e:
        # Not found: someone else let it go first (a reconcile from a cache that had not yet seen
        # it go); it is deleted, which was wanted.
        if e.case != "not-found":
            raise
    return outcome


# ---------------------------------------------------------------------------------------------
# Conditions
#
# A condition is a dict as ``metav1.Condition`` writes it: ``type``, ``status`` (``"True"``,
# ``"False"`` or ``"Unknown"``), ``reason``, ``message``, and optionally ``observedGeneration``
# and ``lastTransitionTime`` (RFC 3339).


def _now() -> str:
    """The guest's clock, RFC 3339 to the second with ``Z``, as ``metav1.Time`` writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time()))


def set_condition(conditions: List[Dict[str, Any]], condition: Dict[str, Any]) -> bool:
    """As apimachinery's ``meta.SetStatusCondition``: sets ``condition`` in ``conditions``, in
    place. A condition of a new type is appended (a copy, its ``lastTransitionTime`` the given
    one, or now). One of an existing type takes the new ``status``, ``reason``, ``message`` and
    ``observedGeneration``; its ``lastTransitionTime`` moves (to the given one, or now) only when
    ``status`` changed. Returns whether anything changed, so that a status write can be skipped
    when nothing did."""
    existing = find_condition(conditions, condition["type"])
    if existing is None:
        added = dict(condition)
        added["lastTransitionTime"] = condition.get("lastTransitionTime") or _now()
        conditions.append(added)
        return True
    changed = False
    if existing.get("status") != condition.get("status"):
        existing["status"] = condition.get("status")
        existing["lastTransitionTime"] = condition.get("lastTransitionTime") or _now()
        changed = True
    for field in ("reason", "message"):
        if existing.get(field) != condition.get(field):
            existing[field] = condition.get(field)
            changed = True
    if existing.get("observedGeneration") != condition.get("observedGeneration"):
        if condition.get("observedGeneration") is None:
            existing.pop("observedGeneration", None)
        else:
            existing["observedGeneration"] = condition["observedGeneration"]
        changed = True
    return changed


def find_condition(conditions: Optional[List[Dict[str, Any]]], type: str) -> Optional[Dict[str, Any]]:
    """The condition of ``type``, if any (the one in the list, so changing it changes the list)."""
    for c in conditions or []:
        if c.get("type") == type:
            return c
    return None


def is_condition_true(conditions: Optional[List[Dict[str, Any]]], type: str) -> bool:
    """Whether the condition of ``type`` is there with status ``"True"``."""
    c = find_condition(conditions, type)
    return c is not None and c.get("status") == "True"


def remove_condition(conditions: List[Dict[str, Any]], type: str) -> bool:
    """Removes the condition of ``type`` in place; returns whether there was one."""
    for i, c in enumerate(conditions):
        if c.get("type") == type:
            del conditions[i]
            return True
    return False


class Reconciler:
    """What a reconciler implements; ``map`` only if it watches a kind with a guest map."""

    def describe(self) -> Description:
        """What this reconciler reconciles and needs; called once, where no import works."""
        raise NotImplementedError

    def reconcile(self, request: Request) -> Any:
        """Brings ``request``'s object to its desired state; returns an ``Outcome``."""
        raise NotImplementedError

    def map(self, kind: Gvk, obj: KubeObject) -> List[Request]:
        """For a kind watched with ``watches_guest_map``: the primaries ``obj`` concerns."""
        return []


def export(reconciler: Reconciler) -> type:
    """The ``WitWorld`` class componentize-py exports, from a ``Reconciler``: bind it in the
    app module as ``WitWorld = export(MyReconciler())``.

    Errors raised by ``reconcile`` reach the host as its typed error: a ``ReconcileError`` as
    its case, anything else as ``other`` with its type and message, never as a trap."""

    class WitWorld(wit_world.WitWorld):
        def describe(self) -> Description:
            return reconciler.describe()

        def reconcile(self, request: Request) -> Any:
            try:
                return reconciler.reconcile(request)
            except Exception as e:  # noqa: BLE001 - every error becomes the host's typed error
                raise Err(ReconcileError.from_exception(e).to_wit()) from None

        def map(self, kind: Gvk, object: str) -> List[Request]:
            return reconciler.map(kind, _parse(kind, object))

    return WitWorld
