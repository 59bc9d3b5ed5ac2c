//! One version of a guest's module and everything built from its declaration, and how a new one
//! is swapped in between reconciles (`Controller::reload`): make before break, then release.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use super::handlers::Role;
use super::plan::{Plan, add_indexes, describe, subscribe, wait_synced};
use super::work_queue::Priority;
use super::{Controller, Error, Settings, shadow};
use crate::guest::Module;
use crate::guest::bindings::Gvk;
use crate::guest::imports::{Declared, GuestContext, Metrics};
use crate::guest::read_your_writes::Floors;
use crate::informer::factory::InformerFactory;
use crate::informer::{Informer, InformerKey};

/// One version of the guest: its module and everything built from its declaration. Swapped
/// whole, so a reconcile always sees a module with the context it declared.
pub(super) struct Version {
    pub(super) module: Module,
    pub(super) ctx: Arc<GuestContext>,
    pub(super) informers: Vec<Arc<Informer>>,
    /// Roles per kind, read by the handler tasks on every event.
    pub(super) roles: HashMap<Gvk, Vec<Role>>,
    pub(super) for_kind: Gvk,
    pub(super) loaded_at: std::time::SystemTime,
    pub(super) shadow: Option<Arc<shadow::Shadow>>,
}

/// A subscription of the guest's, drained by its handler task.
pub(super) struct Link {
    pub(super) informer: Arc<Informer>,
    pub(super) task: AbortHandle,
}

/// What a reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reload {
    /// Informers the new version reads that the old one did not (started or joined), each
    /// shown as [`Gvk`] shows a kind (`v1/ConfigMap`, `apps/v1/Deployment`).
    pub added: Vec<String>,
    /// Informers the old version read that the new one does not (released, and stopped if
    /// nobody else holds them), spelled like `added`. A kind whose scope changed (another
    /// label selector) is in both.
    pub released: Vec<String>,
    /// Primary keys queued (low priority) for the new version to reconcile.
    pub requeued: usize,
}

impl Controller {
    /// Swaps in `module` between reconciles, keeping the queue, the workers and every informer
    /// both versions read. Reconciles already running finish on the old version.
    ///
    /// The new version is described and checked against the grant first, and informers only it
    /// reads are started and must sync within `sync_timeout` before the swap; if anything fails
    /// the old version keeps serving untouched and the error says why. After the swap, informers
    /// only the old version read are released and every primary key is queued once, at low
    /// priority, for the new version.
    ///
    /// `admit` sees the informers the new version would read, synced, just before the swap; an
    /// `Err` from it is [`Error::Refused`] with it as the source, and the old version keeps
    /// serving.
    pub async fn reload<E: std::error::Error + Send + Sync + 'static>(
        self: &Arc<Self>,
        factory: &InformerFactory,
        module: Module,
        sync_timeout: Duration,
        admit: impl FnOnce(&[Arc<Informer>]) -> Result<(), E>,
    ) -> Result<Reload, Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let plan = describe(&module, &self.settings).await?;
        // Make before break: subscribe to what is new and wait for it while the old version
        // still serves.
        let existing: HashMap<InformerKey, Arc<Informer>> = self
            .links
            .lock()
            .unwrap()
            .iter()
            .map(|(k, l)| (k.clone(), l.informer.clone()))
            .collect();
        let mut fresh = Vec::new();
        for k in &plan.kinds {
            if !existing.contains_key(&k.key) {
                fresh.push((k, subscribe(factory, &self.name, k)?));
            }
        }
        for (k, sub) in &fresh {
            wait_synced(&self.name, k, sub.informer(), sync_timeout).await?;
        }
        let reads: Vec<Arc<Informer>> = (plan.kinds.iter())
            .filter_map(|k| existing.get(&k.key).cloned())
            .chain(fresh.iter().map(|(_, sub)| sub.informer().clone()))
            .collect();
        admit(&reads).map_err(|e| Error::Refused {
            guest: self.name.clone(),
            source: Box::new(e),
        })?;
        // Only now, with the new version validated, touch informers other guests share.
        for k in &plan.kinds {
            if let Some(informer) = existing.get(&k.key) {
                add_indexes(informer, &self.name, k)?;
            }
        }

        let floors: HashMap<Gvk, Arc<Floors>> = self
            .context()
            .declared
            .iter()
            .map(|(k, d)| (k.clone(), d.floors.clone()))
            .collect();
        let mut informers: HashMap<InformerKey, Arc<Informer>> = existing
            .into_iter()
            .filter(|(k, _)| plan.kinds.iter().any(|p| p.key == *k))
            .collect();
        for (k, sub) in &fresh {
            informers.insert(k.key.clone(), sub.informer().clone());
        }
        let by_kind: Vec<Arc<Informer>> = plan
            .kinds
            .iter()
            .map(|k| informers[&k.key].clone())
            .collect();
        let version = build_version_from(
            &self.settings,
            &self.client,
            module,
            &plan,
            &by_kind,
            &floors,
            self.metrics.clone(),
        );
        let mut version = version;
        version.shadow =
            attach_shadow(&self.settings, &version, &self.client, &self.shadow_counts).await;
        let digest = version.module.digest().to_string();
        if let Some(account) = &self.settings.identity {
            // Before the swap: no reconcile may run the new version until what it reads is
            // reviewed (the worker reads the version, then the hold).
            self.hold(Some(format!(
                "what ServiceAccount {account} may read with the new version is not reviewed yet"
            )));
        }
        *self.current.write().unwrap() = Arc::new(version);

        let mut report = Reload {
            added: fresh.iter().map(|(k, _)| k.kind.to_string()).collect(),
            ..Reload::default()
        };
        {
            let mut links = self.links.lock().unwrap();
            links.retain(|key, link| {
                let keep = plan.kinds.iter().any(|p| p.key == *key);
                if !keep {
                    link.task.abort();
                    report.released.push(key.name().to_string());
                }
                keep
            });
        }
        self.link(fresh.into_iter());
        report.requeued = self.enqueue_all(Priority::Low);
        tracing::info!(guest = %self.name, %digest, added = ?report.added, released = ?report.released, requeued = report.requeued, "guest reloaded");
        Ok(report)
    }
}

pub(super) fn build_version(
    settings: &Settings,
    client: &kube::Client,
    module: Module,
    plan: &Plan,
    subscriptions: &[crate::informer::Subscription],
    floors: &HashMap<Gvk, Arc<Floors>>,
    metrics: Arc<Metrics>,
) -> Version {
    let informers: Vec<Arc<Informer>> =
        subscriptions.iter().map(|s| s.informer().clone()).collect();
    build_version_from(settings, client, module, plan, &informers, floors, metrics)
}

/// The version for `plan`, with `informers[i]` serving `plan.kinds[i]`. Read-your-writes
/// floors of kinds both versions read carry over: a write the old version made must still be
/// visible to the new one's reads.
fn build_version_from(
    settings: &Settings,
    client: &kube::Client,
    module: Module,
    plan: &Plan,
    informers: &[Arc<Informer>],
    floors: &HashMap<Gvk, Arc<Floors>>,
    metrics: Arc<Metrics>,
) -> Version {
    let mut declared = HashMap::new();
    let mut roles = HashMap::new();
    for (k, informer) in plan.kinds.iter().zip(informers) {
        declared.insert(
            k.kind.clone(),
            Declared {
                informer: informer.clone(),
                floors: floors.get(&k.kind).cloned().unwrap_or_default(),
                indexes: k.indexes.clone(),
            },
        );
        roles.insert(k.kind.clone(), k.roles.clone());
    }
    let ctx = Arc::new(GuestContext {
        name: settings.name.clone(),
        client: client.clone(),
        identity: settings.identity.clone(),
        grant: settings.grant.clone(),
        declared,
        read_your_writes: plan.read_your_writes,
        limits: settings.limits,
        metrics,
        world: crate::guest::world::World::real(&settings.environment),
        recorder: settings.recorder.as_ref().map(|r| r.0.clone()),
        taped: settings.shadow.is_some(),
    });
    Version {
        module,
        ctx,
        informers: informers.to_vec(),
        roles,
        for_kind: plan.for_kind.clone(),
        loaded_at: std::time::SystemTime::now(),
        shadow: None,
    }
}

/// The shadow of `settings` ready beside `live`, if there is one that can run.
pub(super) async fn attach_shadow(
    settings: &Settings,
    live: &Version,
    client: &kube::Client,
    counts: &shadow::Counts,
) -> Option<Arc<shadow::Shadow>> {
    let prepared = shadow::prepare(settings, live, client).await?;
    counts.set_problem(
        &settings.name,
        prepared.as_ref().err().map(ToString::to_string),
    );
    prepared.ok().map(Arc::new)
}
