// Example reconciler, in TypeScript: a ConfigMapGenerator owns `spec.copies` ConfigMaps named
// `<name>-<i>`, each holding `spec.data`. The same reconciler as examples/configmap-generator
// (Rust), passing the same end-to-end test.
//
// Reconcile, for one generator:
// 1. server-side apply ConfigMaps `<name>-0` .. `<name>-(copies-1)`, labelled
//    `GENERATOR_LABEL=<name>` and controlled by the generator (so that deleting the generator
//    deletes them, and a change to one of them reconciles the generator);
// 2. delete the ones it controls with an index of `copies` or more;
// 3. if the status is out of date, server-side apply it and record a `Generated` event.

import {
  type KubeObject,
  Kinds,
  ListOptions,
  Outcome,
  ReconcileError,
  type Request,
  cache,
  client,
  controllerReference,
  describe as describeKind,
  events,
  exportReconciler,
  gvk,
  inSpan,
  isControlledBy,
  log,
} from '../../../guests/js/src/index';

/** The custom resource (crd.yaml, shared with the Rust example). */
const ConfigMapGenerator = gvk('example.reconciled.dev/v1alpha1', 'ConfigMapGenerator');

/** Label on each generated ConfigMap; its value is the generator's name. */
const GENERATOR_LABEL = 'example.reconciled.dev/generator';

/** Server-side apply field manager, of the ConfigMaps and of the status. */
const FIELD_MANAGER = 'configmap-generator';

interface Generator extends KubeObject {
  spec?: { data?: Record<string, string>; copies?: number };
  status?: { generated?: number; observedGeneration?: number };
}

function reconcileGenerator(req: Request): Outcome {
  const { namespace, name } = req;
  const generator = cache.getOpt<Generator>(ConfigMapGenerator, namespace, name);
  // Gone (the garbage collector deletes what it controlled), or going.
  if (!generator || generator.metadata.deletionTimestamp) {
    return Outcome.done();
  }
  const copies = Math.max(generator.spec?.copies ?? 1, 0);
  const data = generator.spec?.data ?? {};
  // An `invalid` error when the generator has no uid: nothing could be controlled by it.
  const owner = controllerReference(ConfigMapGenerator, generator);
  // A span of its own in the host's traces, beside the host's spans for each write.
  inSpan('apply copies', (span) => {
    span.attribute('copies', copies);
    for (let i = 0; i < copies; i++) {
      client.apply(
        Kinds.ConfigMap,
        {
          metadata: {
            name: `${name}-${i}`,
            namespace,
            labels: { [GENERATOR_LABEL]: name },
            ownerReferences: [owner],
          },
          data,
        },
        FIELD_MANAGER,
        true,
      );
    }
  });

  const generated = new ListOptions().inNamespace(namespace).labels(`${GENERATOR_LABEL}=${name}`);
  for (const cm of cache.list(Kinds.ConfigMap, generated)) {
    const cmName = cm.metadata.name ?? '';
    const index = copyIndex(name, cmName);
    if (index !== undefined && index >= copies && isControlledBy(cm, generator)) {
      try {
        client.delete(Kinds.ConfigMap, namespace, cmName);
        log.info(`deleted ${namespace}/${cmName}`);
      } catch (e) {
        if (!(e instanceof ReconcileError && e.isNotFound())) {
          throw e;
        }
      }
    }
  }

  const status = { generated: copies, observedGeneration: generator.metadata.generation ?? 0 };
  const current = generator.status;
  if (current?.generated !== status.generated || current?.observedGeneration !== status.observedGeneration) {
    // Apply, not update: a spec edit since the cache read cannot make this write conflict.
    client.applyStatus(ConfigMapGenerator, { ...generator, status }, FIELD_MANAGER, true);
    try {
      events.normal(ConfigMapGenerator, generator, 'Generated', `generated ${copies} ConfigMaps`);
    } catch (e) {
      // The status is written; a lost event is not worth a retry that would not resend it.
      log.warn(`cannot record event on ${namespace}/${name}: ${ReconcileError.from(e).message}`);
    }
  }
  return Outcome.done();
}

/** `i` for a ConfigMap named `<generator>-<i>`. */
function copyIndex(generator: string, configmap: string): number | undefined {
  const prefix = `${generator}-`;
  if (!configmap.startsWith(prefix)) {
    return undefined;
  }
  const rest = configmap.slice(prefix.length);
  return /^[0-9]+$/.test(rest) ? Number(rest) : undefined;
}

const exported = exportReconciler({
  describe: () => describeKind(ConfigMapGenerator).owns(Kinds.ConfigMap).build(),
  reconcile: reconcileGenerator,
});

// The component's exports, by the names the WIT world gives them.
export const describe = exported.describe;
export const reconcile = exported.reconcile;
export const map = exported.map;
