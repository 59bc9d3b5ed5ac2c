"""A test guest in Python, for what must hold whatever the language.

Errors: its reconcile raises, so that tests see what reaches the host. A ConfigMap named
``conflict`` gets a ReconcileError('conflict'), one named ``plain`` a ValueError (which the SDK
turns into ``other``, never a trap).

Isolation: a ConfigMap named ``leak-*`` gets annotation ``probe.reconciled.dev/result`` set to
``v:<data.v> runs:<n> held:<m>``: how many reconciles this instance has run (a module-level
counter) and how many blocks an earlier reconcile left in a module-level list; it then leaves
both marks behind (the counter bumped, a 4 MiB block held) for a next reconcile to find. A fresh
instance per reconcile reports ``runs:1 held:0`` every time.

Anything else is done."""

from reconciled_guest import (
    Kinds,
    Outcome,
    ReconcileError,
    Reconciler,
    cache,
    client,
    describe,
    export,
)

RESULT = "probe.reconciled.dev/result"

_runs = 0
_held = []


def _leave_marks():
    global _runs
    _runs += 1
    marks = f"runs:{_runs} held:{len(_held)}"
    _held.append(bytearray(b"\xcd" * (4 << 20)))
    return marks


class Errors(Reconciler):
    def describe(self):
        return describe(Kinds.CONFIG_MAP).build()

    def reconcile(self, request):
        if request.name == "conflict":
            raise ReconcileError("conflict", "raised by the guest")
        if request.name == "plain":
            raise ValueError("a plain failure")
        if request.name.startswith("leak-"):
            marks = _leave_marks()
            cm = cache.get_opt(Kinds.CONFIG_MAP, request.namespace, request.name)
            if cm is None:
                return Outcome.done()
            v = (cm.get("data") or {}).get("v", "")
            record = f"v:{v} {marks}"
            if (cm["metadata"].get("annotations") or {}).get(RESULT) != record:
                client.merge_patch(
                    Kinds.CONFIG_MAP,
                    request.namespace,
                    request.name,
                    {"metadata": {"annotations": {RESULT: record}}},
                )
        return Outcome.done()


WitWorld = export(Errors())
