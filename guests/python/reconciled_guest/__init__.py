"""The reconciled guest SDK for Python: a typed layer over the ``reconciled:runtime`` WIT (whose
raw bindings componentize-py generates as ``wit_world``), mirroring the Rust SDK in guests/sdk:
a describe builder, cache and api reads, client writes, typed errors, logging.

Where it may surprise:

- Objects cross the boundary as JSON text; here they are plain ``dict``s.
- Every call is synchronous: the host answers each import before the guest goes on.
- The component is a snapshot of the initialised interpreter: module-level code runs once, at
  build time, where no import works, and nothing can be imported at run time. Call the host only
  from ``describe``, ``reconcile`` and ``map``.
- Each call runs in a fresh instance: nothing a call leaves in a global survives to the next.
"""

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from componentize_py_types import Err
import wit_world
from wit_world.imports import api as _api
from wit_world.imports import cache as _cache
from wit_world.imports import client as _client
from wit_world.imports import declaration as _decl
from wit_world.imports import log as _log
from wit_world.imports import settings as _settings
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
        return self.case == "not-found"

    def is_conflict(self) -> bool:
        return self.case == "conflict"

    def to_wit(self) -> Any:
        return _CASES[self.case](self.message)

    @staticmethod
    def from_exception(e: BaseException) -> "ReconcileError":
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


@dataclass
class ListOptions:
    """Which objects a list returns."""

    namespace: str = ""
    labels: str = ""
    fields: List[Tuple[str, str]] = field(default_factory=list)
    limit: int = 0
    continue_token: str = ""

    def in_namespace(self, ns: str) -> "ListOptions":
        self.namespace = ns
        return self

    def with_labels(self, selector: str) -> "ListOptions":
        self.labels = selector
        return self

    def with_field(self, path: str, value: str) -> "ListOptions":
        """Only objects whose field ``path`` equals ``value``: an indexed field, or an error
        that names the index to declare."""
        self.fields.append((path, value))
        return self

    def _raw(self) -> Any:
        return _cache.ListOptions(
            self.namespace, self.labels, list(self.fields), self.limit, self.continue_token
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


class _Client:
    """Writes, each answered with the API server's object (which later cache reads will see)."""

    def create(self, kind: Gvk, obj: KubeObject) -> KubeObject:
        ns, _, body = _body(kind, obj)
        return _parse(kind, _call(lambda: _client.create(kind, ns, body)))

    def update(self, kind: Gvk, obj: KubeObject) -> KubeObject:
        ns, _, body = _body(kind, obj)
        return _parse(kind, _call(lambda: _client.update(kind, ns, body)))

    def update_status(self, kind: Gvk, obj: KubeObject) -> KubeObject:
        ns, _, body = _body(kind, obj)
        return _parse(kind, _call(lambda: _client.update_status(kind, ns, body)))

    def apply(self, kind: Gvk, obj: KubeObject, field_manager: str, force: bool = False) -> KubeObject:
        """Server-side apply of ``obj`` as ``field_manager``."""
        ns, name, body = _body(kind, obj)
        patch = _client.PatchBody_Apply(_client.ApplyPatch(body, field_manager, force))
        return _parse(kind, _call(lambda: _client.patch(kind, ns, name, patch)))

    def merge_patch(self, kind: Gvk, namespace: str, name: str, patch: Dict[str, Any]) -> KubeObject:
        body = _client.PatchBody_Merge(json.dumps(patch))
        return _parse(kind, _call(lambda: _client.patch(kind, namespace, name, body)))

    def json_patch(self, kind: Gvk, namespace: str, name: str, ops: List[Dict[str, Any]]) -> KubeObject:
        body = _client.PatchBody_Json(json.dumps(ops))
        return _parse(kind, _call(lambda: _client.patch(kind, namespace, name, body)))

    def delete(self, kind: Gvk, namespace: str, name: str) -> None:
        _call(lambda: _client.delete(kind, namespace, name))

    def record_event(
        self, kind: Gvk, namespace: str, name: str, warning: bool, reason: str, message: str
    ) -> None:
        t = _client.EventType.WARNING if warning else _client.EventType.NORMAL
        _call(lambda: _client.record_event(kind, namespace, name, t, reason, message))


client = _Client()


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


class Reconciler:
    """What a reconciler implements; ``map`` only if it watches a kind with a guest map."""

    def describe(self) -> Description:
        raise NotImplementedError

    def reconcile(self, request: Request) -> Any:
        raise NotImplementedError

    def map(self, kind: Gvk, obj: KubeObject) -> List[Request]:
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
