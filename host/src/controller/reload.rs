//! How a new version of a guest's module is swapped in between reconciles: make before break,
//! then release.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Controller;
use super::error::Error;
use super::plan::{add_indexes, describe, subscribe, wait_synced};
use super::version::{attach_shadow, build_version_from};
use super::work_queue::Priority;
use crate::guest::Module;
use crate::guest::bindings::Gvk;
use crate::guest::read_your_writes::Floors;
use crate::guest::settings::GuestSettings;
use crate::informer::factory::InformerFactory;
use crate::informer::shard::ShardSet;
use crate::informer::{Informer, InformerKey};

/// How one swap differs from a plain reload.
pub(super) struct Swap {
    /// The shards the reconciled kind's informer watches.
    pub(super) shard: Option<ShardSet>,
    /// Whether reconciles are held until the guest's identity is reviewed again: a new
    /// version may read more than the old; a re-scope reads a part of the same.
    pub(super) review: bool,
    /// Why a staged candidate is superseded.
    pub(super) why: &'static str,
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
    /// Swaps in `module` with `guest_settings` between reconciles, keeping the queue, the
    /// workers and every informer both versions read. Reconciles already running finish on the
    /// old version. The module may be the one serving, for new settings alone.
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
        guest_settings: &GuestSettings,
        sync_timeout: Duration,
        admit: impl FnOnce(&[Arc<Informer>]) -> Result<(), E>,
    ) -> Result<Reload, Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let swap = Swap {
            shard: self.for_shard(),
            review: true,
            why: "superseded by a revision swapped in at once",
        };
        self.swap(factory, module, guest_settings, sync_timeout, admit, swap)
            .await
    }

    /// The shards the reconciled kind's informer watches now, if it is sharded.
    pub(super) fn for_shard(&self) -> Option<ShardSet> {
        let current = self.shared.current();
        let d = current.ctx.declared.get(&current.for_kind)?;
        d.informer.key().scope.shard.clone()
    }

    /// [`Controller::reload`]'s work, under the reload lock.
    pub(super) async fn swap<E: std::error::Error + Send + Sync + 'static>(
        self: &Arc<Self>,
        factory: &InformerFactory,
        module: Module,
        guest_settings: &GuestSettings,
        sync_timeout: Duration,
        admit: impl FnOnce(&[Arc<Informer>]) -> Result<(), E>,
        swap: Swap,
    ) -> Result<Reload, Error> {
        let mut plan = describe(&module, &self.shared.settings).await?;
        plan.shard_for_kind(swap.shard);
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
                fresh.push((k, subscribe(factory, &self.shared.name, k)?));
            }
        }
        for (k, sub) in &fresh {
            wait_synced(&self.shared.name, k, sub.informer(), sync_timeout).await?;
        }
        let reads: Vec<Arc<Informer>> = (plan.kinds.iter())
            .filter_map(|k| existing.get(&k.key).cloned())
            .chain(fresh.iter().map(|(_, sub)| sub.informer().clone()))
            .collect();
        admit(&reads).map_err(|e| Error::Refused {
            guest: self.shared.name.clone(),
            source: Box::new(e),
        })?;
        // Only now, with the new version validated, touch informers other guests share.
        for k in &plan.kinds {
            if let Some(informer) = existing.get(&k.key) {
                add_indexes(informer, &self.shared.name, k)?;
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
            &self.shared.settings,
            guest_settings,
            &self.shared.client,
            module,
            &plan,
            &by_kind,
            &floors,
            self.shared.metrics.clone(),
        );
        let mut version = version;
        version.shadow = attach_shadow(
            &self.shared.settings,
            &version,
            &self.shared.client,
            &self.shared.shadow_counts,
        )
        .await;
        let digest = version.module.digest().to_string();
        if let Some(account) = self
            .shared
            .settings
            .identity
            .as_ref()
            .filter(|_| swap.review)
        {
            // Before the swap: no reconcile may run the new version until what it reads is
            // reviewed (the worker reads the version, then the hold).
            self.hold(Some(format!(
                "what ServiceAccount {account} may read with the new version is not reviewed yet"
            )));
        }
        *self.shared.current.write().unwrap() = Arc::new(version);
        self.supersede_candidate(swap.why).await;

        let mut report = self.relink(&plan, fresh);
        report.requeued = self.shared.enqueue_all(Priority::Low);
        tracing::info!(guest = %self.shared.name, %digest, added = ?report.added, released = ?report.released, requeued = report.requeued, "guest reloaded");
        Ok(report)
    }

    /// Releases the links of informers `plan` no longer reads and links the `fresh` ones.
    fn relink(
        self: &Arc<Self>,
        plan: &super::plan::Plan,
        fresh: Vec<(&super::plan::PlannedKind, crate::informer::Subscription)>,
    ) -> Reload {
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
        report
    }
}
