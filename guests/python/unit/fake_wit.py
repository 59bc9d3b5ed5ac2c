"""A fake of the raw bindings componentize-py generates (``wit_world``, ``componentize_py_types``),
installed in ``sys.modules`` so that ``reconciled_guest`` imports and runs under plain CPython,
with no wasm and no host.

Behind the imports is an in-memory API server and cache (one store: the cache is never stale
here) that answers as the host does (the same error cases, JSON text in and out) and records
every call, so that a test can say exactly what a helper wrote. Import this module before
``reconciled_guest``; ``install()`` is idempotent. Its names and shapes are those of the real
bindings, which ``test_bindings`` checks against componentize-py's output when it is at hand.
"""

import copy
import json
import re
import sys
import types as _pytypes
from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Generic, List, Optional, Tuple, TypeVar, Union

# --- componentize_py_types ------------------------------------------------------------------

S = TypeVar("S")
T = TypeVar("T")
E = TypeVar("E")


@dataclass
class Some(Generic[S]):
    value: S


@dataclass
class Ok(Generic[T]):
    value: T


@dataclass(frozen=True)
class Err(Generic[E], Exception):
    value: E


# --- wit_world.imports.types ------------------------------------------------------------------


@dataclass
class Gvk:
    group: str
    version: str
    kind: str


@dataclass
class Request:
    namespace: str
    name: str


def _error_case(name: str) -> type:
    return dataclass(type(name, (), {"__annotations__": {"value": str}}))


ERROR_CLASSES = {
    case: _error_case("Error_" + "".join(p.capitalize() for p in case.split("-")))
    for case in (
        "not-found",
        "conflict",
        "forbidden",
        "invalid",
        "too-large",
        "not-declared",
        "unindexed-field",
        "timeout",
        "other",
    )
}

# --- wit_world.imports.declaration -------------------------------------------------------------


@dataclass
class Mapping_Owner:
    pass


@dataclass
class Mapping_Label:
    value: str


@dataclass
class Mapping_GuestMap:
    pass


@dataclass
class Watch:
    kind: Gvk
    mapping: Any


@dataclass
class FieldIndex:
    kind: Gvk
    path: str


class Consistency(Enum):
    READ_YOUR_WRITES = 0
    EVENTUAL = 1


@dataclass
class Description:
    for_: Gvk
    owns: List[Gvk]
    watches: List[Watch]
    namespaces: List[str]
    label_selector: str
    field_indexes: List[FieldIndex]
    consistency: Consistency


# --- wit_world.imports.cache ------------------------------------------------------------------


@dataclass
class ListOptions:
    namespace: str
    label_selector: str
    fields: List[Tuple[str, str]]
    limit: int
    continue_token: str


@dataclass
class ListPage:
    items: List[str]
    continue_token: str


# --- wit_world.imports.client -----------------------------------------------------------------


@dataclass
class ApplyPatch:
    body: str
    field_manager: str
    force: bool


@dataclass
class PatchBody_Merge:
    value: str


@dataclass
class PatchBody_Json:
    value: str


@dataclass
class PatchBody_Apply:
    value: ApplyPatch


class EventType(Enum):
    NORMAL = 0
    WARNING = 1


# --- wit_world.imports.log, wit_world ---------------------------------------------------------


class Level(Enum):
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3


@dataclass
class Outcome_Done:
    pass


@dataclass
class Outcome_RequeueAfter:
    value: int


class WitWorld:
    pass


# --- the server -------------------------------------------------------------------------------

WRITES = ("create", "update", "patch", "patch_status", "update_status", "delete")


def host_error(case: str, message: str) -> Err:
    """The host's error, raised as componentize-py raises an import's ``err``."""
    return Err(ERROR_CLASSES[case](message))


def api_version_of(kind: Gvk) -> str:
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


def kind_name(kind: Gvk) -> str:
    return f"{api_version_of(kind)}/{kind.kind}"


class Server:
    """The store, the call log and the injected faults."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.objects: Dict[Tuple[str, str, str], Dict[str, Any]] = {}
        self.calls: List[Dict[str, Any]] = []
        self.faults: List[Dict[str, Any]] = []
        self.settings = "{}"
        # The spans the guest opened: name, attributes, whether still open, the error it ended with.
        self.spans: List[Dict[str, Any]] = []
        self.next_uid = 1
        self.next_version = 1
        # The deletionTimestamp a delete of an object with finalizers sets.
        self.clock = "2026-01-01T00:00:00Z"

    # For the tests.

    def seed(self, kind: Gvk, obj: Dict[str, Any]) -> Dict[str, Any]:
        """Puts ``obj`` in the store as the server would hold it: a uid, a resourceVersion and a
        generation unless it has them. Returns a copy of the stored object."""
        stored = copy.deepcopy(obj)
        stored.setdefault("apiVersion", api_version_of(kind))
        stored.setdefault("kind", kind.kind)
        meta = stored.setdefault("metadata", {})
        if "uid" not in meta:
            meta["uid"] = f"uid-{self.next_uid}"
            self.next_uid += 1
        if "resourceVersion" not in meta:
            meta["resourceVersion"] = str(self.next_version)
            self.next_version += 1
        meta.setdefault("generation", 1)
        self.objects[self._key(kind, meta.get("namespace", ""), meta.get("name", ""))] = stored
        return copy.deepcopy(stored)

    def stored(self, kind: Gvk, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        o = self.objects.get(self._key(kind, namespace, name))
        return copy.deepcopy(o) if o is not None else None

    def fail(self, fn: str, case: str, times: int = 1, message: str = "injected by the test") -> None:
        """The next ``times`` calls of ``fn`` fail with the error ``case``."""
        self.faults.append({"fn": fn, "case": case, "times": times, "message": message})

    def writes(self) -> List[Dict[str, Any]]:
        return [c for c in self.calls if c["fn"] in WRITES]

    def events(self) -> List[Dict[str, Any]]:
        return [c for c in self.calls if c["fn"] == "record_event"]

    # Behind the imports.

    @staticmethod
    def _key(kind: Gvk, namespace: str, name: str) -> Tuple[str, str, str]:
        return (kind_name(kind), namespace, name)

    def enter(self, call: Dict[str, Any]) -> None:
        self.calls.append(call)
        for f in self.faults:
            if f["fn"] == call["fn"] and f["times"] > 0:
                f["times"] -= 1
                raise host_error(f["case"], f["message"])

    def must_get(self, kind: Gvk, namespace: str, name: str) -> Dict[str, Any]:
        o = self.objects.get(self._key(kind, namespace, name))
        if o is None:
            raise host_error("not-found", f"{kind.kind} {namespace}/{name} not found")
        return o

    def store(self, kind: Gvk, obj: Dict[str, Any], bump_generation: bool) -> str:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.next_version)
        self.next_version += 1
        if bump_generation:
            meta["generation"] = meta.get("generation", 0) + 1
        self.objects[self._key(kind, meta.get("namespace", ""), meta["name"])] = obj
        return json.dumps(obj)

    def new_uid(self) -> str:
        uid = f"uid-{self.next_uid}"
        self.next_uid += 1
        return uid

    def get(self, fn: str, kind: Gvk, namespace: str, name: str) -> str:
        self.enter({"fn": fn, "kind": kind_name(kind), "namespace": namespace, "name": name})
        return json.dumps(self.must_get(kind, namespace, name))

    def list(self, fn: str, kind: Gvk, options: ListOptions) -> ListPage:
        self.enter({"fn": fn, "kind": kind_name(kind), "namespace": options.namespace, "options": options})
        matching = [
            o
            for (k, ns, _), o in sorted(self.objects.items())
            if k == kind_name(kind)
            and (not options.namespace or ns == options.namespace)
            and _labels_match(o["metadata"].get("labels") or {}, options.label_selector)
            and all(str(_at(o, path) if _at(o, path) is not None else "") == v for path, v in options.fields)
        ]
        start = int(options.continue_token) if options.continue_token else 0
        end = start + options.limit if options.limit > 0 else len(matching)
        return ListPage(
            [json.dumps(o) for o in matching[start:end]], str(end) if end < len(matching) else ""
        )


def _labels_match(labels: Dict[str, str], selector: str) -> bool:
    """Equality selectors only (``a=b,c!=d``): what the tests use."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        else:
            k, v = term.split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
    return True


def _at(obj: Any, dotted: str) -> Any:
    for k in dotted.split("."):
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def _parse(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise host_error("invalid", f"the {what} is not JSON: {e}") from None


def _spec_changed(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    strip = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status")}  # noqa: E731
    return strip(a) != strip(b)


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = target if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _deep_merge(into: Any, src: Any) -> Any:
    """As the offline server models apply: maps merged recursively, anything else replaced."""
    if isinstance(into, dict) and isinstance(src, dict):
        for k, v in src.items():
            into[k] = _deep_merge(into.get(k), v)
        return into
    return copy.deepcopy(src)


def _json_patch(doc: Dict[str, Any], ops: List[Dict[str, Any]]) -> Dict[str, Any]:
    """RFC 6902, with the API server's leniency: ``test`` of ``null`` holds for a missing path."""
    for op in ops:
        path = op["path"]
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")] if path else []
        last = tokens.pop()
        parent: Any = doc
        for t in tokens:
            parent = parent.get(t) if isinstance(parent, dict) else (
                parent[int(t)] if isinstance(parent, list) and t.isdigit() and int(t) < len(parent) else None
            )

        def failed(why: str) -> Err:
            return host_error("invalid", f"the JSON patch does not apply: {op['op']} {path}: {why}")

        if not isinstance(parent, (dict, list)):
            if op["op"] == "test" and op.get("value") is None:
                continue
            raise failed("no such parent")
        if op["op"] == "test":
            if isinstance(parent, list):
                have = parent[int(last)] if last.isdigit() and int(last) < len(parent) else None
            else:
                have = parent.get(last)
            if have != op.get("value"):
                raise failed(f"holds {json.dumps(have)}")
        elif op["op"] == "add":
            if isinstance(parent, list):
                i = len(parent) if last == "-" else int(last)
                if not 0 <= i <= len(parent):
                    raise failed("index out of range")
                parent.insert(i, copy.deepcopy(op["value"]))
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif op["op"] in ("remove", "replace"):
            if isinstance(parent, list):
                i = int(last) if last.isdigit() else -1
                if not 0 <= i < len(parent):
                    raise failed("index out of range")
            elif last not in parent:
                raise failed("no such field")
            else:
                i = last
            if op["op"] == "remove":
                del parent[i]
            else:
                parent[i] = copy.deepcopy(op["value"])
        else:
            raise failed("operation not modelled by the fake")
    return doc


def _describe_patch(p: Any) -> Dict[str, Any]:
    if isinstance(p, PatchBody_Merge):
        return {"type": "merge", "body": _parse(p.value, "merge patch")}
    if isinstance(p, PatchBody_Json):
        return {"type": "json", "body": _parse(p.value, "JSON patch")}
    return {
        "type": "apply",
        "body": _parse(p.value.body, "applied object"),
        "field_manager": p.value.field_manager,
        "force": p.value.force,
    }


def _patched(current: Dict[str, Any], p: Dict[str, Any]) -> Dict[str, Any]:
    doc = copy.deepcopy(current)
    if p["type"] == "merge":
        return _merge_patch(doc, p["body"])
    if p["type"] == "json":
        return _json_patch(doc, p["body"])
    return _deep_merge(doc, p["body"])


SERVER = Server()


def _client_module() -> Dict[str, Any]:
    s = SERVER

    def create(kind: Gvk, namespace: str, object: str) -> str:
        obj = _parse(object, "object")
        name = (obj.get("metadata") or {}).get("name")
        s.enter({"fn": "create", "kind": kind_name(kind), "namespace": namespace, "name": name, "body": obj})
        if s._key(kind, namespace, name) in s.objects:
            raise host_error("conflict", f"{kind.kind} {namespace}/{name} already exists")
        created = copy.deepcopy(obj)
        created["metadata"]["uid"] = s.new_uid()
        created["metadata"]["generation"] = 1
        return s.store(kind, created, False)

    def update(kind: Gvk, namespace: str, object: str) -> str:
        obj = _parse(object, "object")
        name = obj["metadata"].get("name")
        s.enter({"fn": "update", "kind": kind_name(kind), "namespace": namespace, "name": name, "body": obj})
        current = s.must_get(kind, namespace, name)
        rv = obj["metadata"].get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise host_error("conflict", f"{kind.kind} {namespace}/{name} changed since it was read")
        nxt = copy.deepcopy(obj)
        if "status" in current:
            nxt["status"] = copy.deepcopy(current["status"])
        else:
            nxt.pop("status", None)
        nxt["metadata"]["uid"] = current["metadata"]["uid"]
        nxt["metadata"]["generation"] = current["metadata"]["generation"]
        return s.store(kind, nxt, _spec_changed(current, nxt))

    def update_status(kind: Gvk, namespace: str, object: str) -> str:
        obj = _parse(object, "object")
        name = obj["metadata"].get("name")
        s.enter({"fn": "update_status", "kind": kind_name(kind), "namespace": namespace, "name": name, "body": obj})
        current = s.must_get(kind, namespace, name)
        rv = obj["metadata"].get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise host_error("conflict", f"{kind.kind} {namespace}/{name} changed since it was read")
        nxt = copy.deepcopy(current)
        nxt["status"] = copy.deepcopy(obj.get("status"))
        return s.store(kind, nxt, False)

    def patch(kind: Gvk, namespace: str, name: str, patch: Any) -> str:
        p = _describe_patch(patch)
        s.enter({"fn": "patch", "kind": kind_name(kind), "namespace": namespace, "name": name, "patch": p})
        current = s.objects.get(s._key(kind, namespace, name))
        if current is None:
            if p["type"] != "apply":
                raise host_error("not-found", f"{kind.kind} {namespace}/{name} not found")
            created = copy.deepcopy(p["body"])
            created["metadata"]["uid"] = s.new_uid()
            created["metadata"]["generation"] = 1
            created.pop("status", None)
            return s.store(kind, created, False)
        nxt = _patched(current, p)
        if "status" in current:
            nxt["status"] = copy.deepcopy(current["status"])
        else:
            nxt.pop("status", None)
        return s.store(kind, nxt, _spec_changed(current, nxt))

    def patch_status(kind: Gvk, namespace: str, name: str, patch: Any) -> str:
        p = _describe_patch(patch)
        s.enter({"fn": "patch_status", "kind": kind_name(kind), "namespace": namespace, "name": name, "patch": p})
        current = s.must_get(kind, namespace, name)
        nxt = copy.deepcopy(current)
        status = _patched(current, p).get("status")
        if status is None:
            nxt.pop("status", None)
        else:
            nxt["status"] = status
        return s.store(kind, nxt, False)

    def delete(kind: Gvk, namespace: str, name: str) -> None:
        s.enter({"fn": "delete", "kind": kind_name(kind), "namespace": namespace, "name": name})
        current = s.must_get(kind, namespace, name)
        if current["metadata"].get("finalizers"):
            current["metadata"].setdefault("deletionTimestamp", s.clock)
            s.store(kind, current, False)
        else:
            del s.objects[s._key(kind, namespace, name)]

    def record_event(regarding: Gvk, namespace: str, name: str, event_type: EventType, reason: str, message: str) -> None:
        s.enter(
            {
                "fn": "record_event",
                "kind": kind_name(regarding),
                "namespace": namespace,
                "name": name,
                "event": {"type": event_type.name.lower(), "reason": reason, "message": message},
            }
        )
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]{0,127}", reason):
            raise host_error("invalid", f"event reason {reason!r} is not UpperCamelCase")

    return {
        "create": create,
        "update": update,
        "patch": patch,
        "delete": delete,
        "update_status": update_status,
        "patch_status": patch_status,
        "record_event": record_event,
        "ApplyPatch": ApplyPatch,
        "PatchBody_Merge": PatchBody_Merge,
        "PatchBody_Json": PatchBody_Json,
        "PatchBody_Apply": PatchBody_Apply,
        "PatchBody": Union[PatchBody_Merge, PatchBody_Json, PatchBody_Apply],
        "EventType": EventType,
    }


def _reader(name: str) -> Dict[str, Any]:
    def get(kind: Gvk, namespace: str, name_: str) -> str:
        return SERVER.get(f"{name}.get", kind, namespace, name_)

    def list_(kind: Gvk, options: ListOptions) -> ListPage:
        return SERVER.list(f"{name}.list", kind, options)

    members: Dict[str, Any] = {"get": get, "list": list_}
    if name == "cache":
        members.update(ListOptions=ListOptions, ListPage=ListPage)
    return members


def _log(level: Level, message: str) -> None:
    SERVER.calls.append({"fn": "log", "level": level.name.lower(), "message": message})


def _settings_get() -> str:
    SERVER.enter({"fn": "settings"})
    return SERVER.settings


def _trace_open(name: str) -> int:
    SERVER.spans.append({"name": name, "attributes": {}, "open": True, "error": None})
    return len(SERVER.spans)


def _trace_set_attribute(span: int, key: str, value: str) -> None:
    if 0 < span <= len(SERVER.spans) and SERVER.spans[span - 1]["open"]:
        SERVER.spans[span - 1]["attributes"][key] = value


def _trace_close(span: int, error: Optional[str]) -> None:
    if 0 < span <= len(SERVER.spans) and SERVER.spans[span - 1]["open"]:
        SERVER.spans[span - 1].update(open=False, error=error)


# The fake modules, by the names the real bindings have.
MODULES: Dict[str, Dict[str, Any]] = {
    "componentize_py_types": {"Some": Some, "Ok": Ok, "Err": Err, "Result": Union[Ok, Err]},
    "wit_world": {
        "Outcome_Done": Outcome_Done,
        "Outcome_RequeueAfter": Outcome_RequeueAfter,
        "Outcome": Union[Outcome_Done, Outcome_RequeueAfter],
        "WitWorld": WitWorld,
    },
    "wit_world.imports": {},
    "wit_world.imports.types": {
        "Gvk": Gvk,
        "Request": Request,
        **{cls.__name__: cls for cls in ERROR_CLASSES.values()},
        "Error": Union[tuple(ERROR_CLASSES.values())],
    },
    "wit_world.imports.declaration": {
        "Mapping_Owner": Mapping_Owner,
        "Mapping_Label": Mapping_Label,
        "Mapping_GuestMap": Mapping_GuestMap,
        "Mapping": Union[Mapping_Owner, Mapping_Label, Mapping_GuestMap],
        "Watch": Watch,
        "FieldIndex": FieldIndex,
        "Consistency": Consistency,
        "Description": Description,
    },
    "wit_world.imports.cache": _reader("cache"),
    "wit_world.imports.api": _reader("api"),
    "wit_world.imports.client": _client_module(),
    "wit_world.imports.log": {"Level": Level, "log": _log},
    "wit_world.imports.settings": {"get": _settings_get},
    "wit_world.imports.trace": {
        "open": _trace_open,
        "set_attribute": _trace_set_attribute,
        "close": _trace_close,
    },
}


def install() -> Server:
    """Puts the fake modules in ``sys.modules`` (once) and returns the server behind them."""
    if getattr(sys.modules.get("wit_world"), "__fake__", False):
        return SERVER
    for name, members in MODULES.items():
        module = _pytypes.ModuleType(name)
        module.__dict__.update(members)
        module.__fake__ = True
        if name.startswith("wit_world"):
            module.__path__ = []  # a package, so that submodules import
        sys.modules[name] = module
    for name in MODULES:
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
    return SERVER


install()
