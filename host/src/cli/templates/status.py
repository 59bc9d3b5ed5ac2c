"""The reconciler's logic, pure (no host imports), so ./test.sh runs it with unittest."""


def desired_status(obj: dict) -> dict:
    """The status ``obj`` should have."""
    spec = obj.get("spec") or {}
    return {
        "message": f"reconciled: {spec.get('message', '')}",
        "observedGeneration": obj["metadata"].get("generation", 0),
    }
