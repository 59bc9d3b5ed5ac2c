"""Example reconciler, in Python: a ConfigMapGenerator owns ``spec.copies`` ConfigMaps named
``<name>-<i>``, each holding ``spec.data``. The same reconciler as examples/configmap-generator
(Rust), passing the same end-to-end test.

Reconcile, for one generator:

1. server-side apply ConfigMaps ``<name>-0`` .. ``<name>-(copies-1)``, labelled
   ``GENERATOR_LABEL=<name>`` and controlled by the generator (so that deleting the generator
   deletes them, and a change to one of them reconciles the generator);
2. delete the ones it controls with an index of ``copies`` or more;
3. if the status is out of date, server-side apply it and record a ``Generated`` event.
"""

from typing import Optional

from reconciled_guest import (
    Kinds,
    ListOptions,
    Outcome,
    ReconcileError,
    Reconciler,
    cache,
    client,
    controller_reference,
    describe,
    events,
    export,
    gvk,
    is_controlled_by,
    log,
    open_span,
)

# The custom resource (crd.yaml, shared with the Rust example).
CONFIG_MAP_GENERATOR = gvk("example.reconciled.dev/v1alpha1", "ConfigMapGenerator")

# Label on each generated ConfigMap; its value is the generator's name.
GENERATOR_LABEL = "example.reconciled.dev/generator"

# Server-side apply field manager, of the ConfigMaps and of the status.
FIELD_MANAGER = "configmap-generator"


def copy_index(generator: str, configmap: str) -> Optional[int]:
    """``i`` for a ConfigMap named ``<generator>-<i>``."""
    prefix = f"{generator}-"
    rest = configmap[len(prefix):] if configmap.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


class Generator(Reconciler):
    def describe(self):
        return describe(CONFIG_MAP_GENERATOR).owns(Kinds.CONFIG_MAP).build()

    def reconcile(self, request):
        namespace, name = request.namespace, request.name
        generator = cache.get_opt(CONFIG_MAP_GENERATOR, namespace, name)
        # Gone (the garbage collector deletes what it controlled), or going.
        if generator is None or generator["metadata"].get("deletionTimestamp"):
            return Outcome.done()
        spec = generator.get("spec") or {}
        copies = max(int(spec.get("copies", 1)), 0)
        data = spec.get("data") or {}
        # An ``invalid`` error when the generator has no uid: nothing could be controlled by it.
        owner = controller_reference(CONFIG_MAP_GENERATOR, generator)
        # A span of its own in the host's traces, beside the host's spans for each write.
        with open_span("apply copies") as span:
            span.attribute("copies", copies)
            for i in range(copies):
                client.apply(
                    Kinds.CONFIG_MAP,
                    {
                        "metadata": {
                            "name": f"{name}-{i}",
                            "namespace": namespace,
                            "labels": {GENERATOR_LABEL: name},
                            "ownerReferences": [owner],
                        },
                        "data": data,
                    },
                    FIELD_MANAGER,
                    force=True,
                )

        generated = ListOptions().in_namespace(namespace).labels(f"{GENERATOR_LABEL}={name}")
        for cm in cache.list(Kinds.CONFIG_MAP, generated):
            cm_name = cm["metadata"].get("name", "")
            index = copy_index(name, cm_name)
            if index is not None and index >= copies and is_controlled_by(cm, generator):
                try:
                    client.delete(Kinds.CONFIG_MAP, namespace, cm_name)
                    log.info(f"deleted {namespace}/{cm_name}")
                except ReconcileError as e:
                    if not e.is_not_found():
                        raise

        status = {"generated": copies, "observedGeneration": generator["metadata"].get("generation", 0)}
        if generator.get("status") != status:
            # Apply, not update: a spec edit since the cache read cannot make this write conflict.
            client.apply_status(CONFIG_MAP_GENERATOR, {**generator, "status": status}, FIELD_MANAGER, force=True)
            try:
                events.normal(CONFIG_MAP_GENERATOR, generator, "Generated", f"generated {copies} ConfigMaps")
            except ReconcileError as e:
                # The status is written; a lost event is not worth a retry that would not resend it.
                log.warn(f"cannot record event on {namespace}/{name}: {e}")
        return Outcome.done()


WitWorld = export(Generator())
