"""A test guest: its reconcile raises, so that tests see what reaches the host. A ConfigMap named
``conflict`` gets a ReconcileError('conflict'), one named ``plain`` a ValueError (which the SDK
turns into ``other``, never a trap); anything else is done."""

from reconciled_guest import Kinds, Outcome, ReconcileError, Reconciler, describe, export


class Errors(Reconciler):
    def describe(self):
        return describe(Kinds.CONFIG_MAP).build()

    def reconcile(self, request):
        if request.name == "conflict":
            raise ReconcileError("conflict", "raised by the guest")
        if request.name == "plain":
            raise ValueError("a plain failure")
        return Outcome.done()


WitWorld = export(Errors())
