"""Reconciles {{group}}/{{version}} {{Kind}}: writes status.message from spec.message."""

from reconciled_guest import Outcome, Reconciler, cache, client, describe, export, gvk, log

from status import desired_status

KIND = gvk("{{group}}/{{version}}", "{{Kind}}")


class Reconcile(Reconciler):
    def describe(self):
        return describe(KIND).build()

    def reconcile(self, request):
        obj = cache.get_opt(KIND, request.namespace, request.name)
        if obj is None:
            return Outcome.done()
        status = desired_status(obj)
        if obj.get("status") != status:
            client.update_status(KIND, {**obj, "status": status})
            log.info(f"reconciled {request.namespace}/{request.name}")
        return Outcome.done()


WitWorld = export(Reconcile())
