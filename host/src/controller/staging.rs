//! Staging a new revision beside the serving one and moving keys to it: what the driver of a
//! progressive rollout (see [`crate::rollout`]) does to a running guest. The candidate and how a
//! reconcile picks its revision are in `candidate`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use super::Controller;
use super::candidate::{Candidate, CandidateSnapshot, RolledBack, Route, fenced};
use super::error::Error;
use super::plan::{add_indexes, describe};
use super::shared::Shared;
use super::version::{Version, build_version_from, prepare_module};
use super::work_queue::Priority;
use crate::guest::Module;
use crate::guest::bindings::Gvk;
use crate::guest::read_your_writes::Floors;
use crate::guest::settings::GuestSettings;
use crate::rollout::decide::Observed;
use crate::rollout::share::in_share;

impl Controller {
    /// Stages `module` with `guest_settings` as the candidate of a progressive rollout, in place
    /// of any candidate before it (which is rolled back), with no share and no shadow yet: the
    /// driver sets its [`Route`]. The serving version is untouched.
    ///
    /// Refused ([`Error::Invalid`]) when the candidate reads other kinds, or the same in other
    /// scopes, than the serving version, or, when `shadowed` (the rollout has shadow steps),
    /// cannot run as a shadow.
    pub async fn stage(
        &self,
        module: Module,
        guest_settings: &GuestSettings,
        shadowed: bool,
    ) -> Result<(), Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let settings = &self.shared.settings;
        let mut plan = describe(&module, settings).await?;
        plan.shard_for_kind(self.for_shard());
        let live = self.shared.current();
        let invalid = |reason: String| Error::Invalid {
            guest: settings.name.clone(),
            reason: format!(
                "a progressive rollout's new revision must read what the serving one reads, since it shares its informers: {reason}; roll it out with strategy Immediate instead"
            ),
        };
        if plan.for_kind != live.for_kind {
            return Err(invalid(format!(
                "it reconciles {} and the serving revision {}",
                plan.for_kind, live.for_kind
            )));
        }
        if plan.kinds.len() != live.ctx.declared.len() {
            return Err(invalid(format!(
                "it reads {} kinds and the serving revision {}",
                plan.kinds.len(),
                live.ctx.declared.len()
            )));
        }
        let mut informers = Vec::new();
        for k in &plan.kinds {
            let Some(d) = live.ctx.declared.get(&k.kind) else {
                return Err(invalid(format!(
                    "the serving revision does not read {}",
                    k.kind
                )));
            };
            if d.informer.key() != &k.key {
                return Err(invalid(format!("it reads {} in another scope", k.kind)));
            }
            informers.push(d.informer.clone());
        }
        for (k, informer) in plan.kinds.iter().zip(&informers) {
            add_indexes(informer, &settings.name, k)?;
        }
        let floors: HashMap<Gvk, Arc<Floors>> = (live.ctx.declared.iter())
            .map(|(k, d)| (k.clone(), d.floors.clone()))
            .collect();
        let fence = Arc::new(AtomicBool::new(false));
        let client = fenced(self.shared.client.clone(), fence.clone());
        let version = build_version_from(
            settings,
            guest_settings,
            &client,
            module.clone(),
            &plan,
            &informers,
            &floors,
            self.shared.metrics.clone(),
        );
        let shadow = match prepare_module(
            settings,
            guest_settings,
            &live,
            &self.shared.client,
            module,
        )
        .await
        {
            Ok(shadow) => Some(Arc::new(shadow)),
            // A shadow step with nothing to compare would wait for ever.
            Err(e) if shadowed => {
                return Err(Error::Invalid {
                    guest: settings.name.clone(),
                    reason: format!(
                        "the new revision cannot run as a shadow, which the rollout's shadow steps need: {e}; remove the shadow steps or fix the module"
                    ),
                });
            }
            Err(_) => None,
        };
        let candidate = Arc::new(Candidate::new(version, shadow, &live.ctx, fence));
        let digest = candidate.version.module.digest().to_string();
        let before = self.shared.candidate.write().unwrap().replace(candidate);
        if let Some(before) = before {
            drop_candidate(&self.shared, &before, "replaced by a newer revision").await;
        }
        tracing::info!(guest = %settings.name, %digest, "new revision staged for a progressive rollout");
        Ok(())
    }

    /// Sets where the candidate runs, with the parts of written objects a shadow step lets
    /// differ (`ignore`, JSON pointers), and starts counting afresh for the new step; keys that
    /// move onto the candidate are queued once (at low priority, and not as traffic). Returns
    /// how many moved, or `None` with no candidate.
    pub fn route(&self, route: Route, ignore: &[String]) -> Option<usize> {
        let candidate = self.shared.candidate()?;
        let before = candidate.set_route(route, ignore);
        let moved = self.shared.enqueue_where(Priority::Low, |ns, name| {
            in_share(ns, name, route.percent) && !in_share(ns, name, before.percent)
        });
        tracing::info!(guest = %self.shared.name, shadow = route.shadow, percent = route.percent, moved, "rollout step");
        Some(moved)
    }

    /// What the candidate's current step has seen, beside the serving revision's most recent
    /// reconciles of live changes, for [`decide`](crate::rollout::decide::decide); `None` with
    /// no candidate. `resumed` is passed through.
    pub fn rollout_observed(&self, resumed: bool) -> Option<Observed> {
        let candidate = self.shared.candidate()?;
        Some(candidate.observed(
            |since| self.shared.traffic.serving_times_since(since),
            resumed,
        ))
    }

    /// Queues every key again, as traffic for the rollout's current step (its
    /// `resyncInterval`); returns how many, or `None` with no candidate.
    pub fn resync_rollout(&self) -> Option<usize> {
        self.shared.candidate()?;
        let queued = self.shared.resync_as_traffic();
        tracing::info!(guest = %self.shared.name, queued, "rollout resync: every key again, as traffic");
        Some(queued)
    }

    /// Notified after each reconcile the candidate's step counts (one permit kept while nobody
    /// waits); `None` with no candidate.
    pub fn rollout_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.shared.candidate()?.changed.clone())
    }

    /// The candidate, if one is staged.
    pub fn candidate(&self) -> Option<CandidateSnapshot> {
        let c = self.shared.candidate()?;
        Some(CandidateSnapshot {
            digest: c.version.module.digest().to_string(),
            settings: c.version.ctx.settings.clone(),
            route: c.route(),
        })
    }

    /// Makes the candidate of `digest` with `settings` the serving version for every key; keys
    /// that were not on it yet are queued once (at low priority). Returns how many, or `None`
    /// when that is not the candidate (none, another staged since, or one fenced).
    pub async fn promote(&self, digest: &str, settings: &GuestSettings) -> Option<usize> {
        let _one_at_a_time = self.reloading.lock().await;
        let candidate = self.take_candidate(digest, settings)?;
        let percent = candidate.route().percent;
        // Carried over whole: the version built for the candidate, its fenced client included
        // (the fence never falls once promoted), and a host config's shadow kept beside it.
        let serving_shadow = self.shared.current().shadow.clone();
        let promoted = Version {
            module: candidate.version.module.clone(),
            ctx: candidate.version.ctx.clone(),
            informers: candidate.version.informers.clone(),
            roles: candidate.version.roles.clone(),
            for_kind: candidate.version.for_kind.clone(),
            loaded_at: SystemTime::now(),
            shadow: serving_shadow,
        };
        *self.shared.current.write().unwrap() = Arc::new(promoted);
        self.shared.traffic.new_serving();
        let moved =
            (self.shared).enqueue_where(Priority::Low, |ns, name| !in_share(ns, name, percent));
        tracing::info!(guest = %self.shared.name, digest = %candidate.version.module.digest(), moved, "new revision promoted");
        Some(moved)
    }

    /// Takes back the candidate of `digest` with `settings`: see the module docs for the fence.
    /// Keys it held are queued again, at high priority, for the serving version. `None` when
    /// that is not the candidate.
    pub async fn roll_back(
        &self,
        digest: &str,
        settings: &GuestSettings,
        why: &str,
    ) -> Option<RolledBack> {
        let _one_at_a_time = self.reloading.lock().await;
        let candidate = self.take_candidate(digest, settings)?;
        Some(drop_candidate(&self.shared, &candidate, why).await)
    }

    /// Takes back whichever candidate is staged, saying `why`; `None` with none.
    pub async fn withdraw(&self, why: &str) -> Option<RolledBack> {
        let _one_at_a_time = self.reloading.lock().await;
        self.supersede_candidate(why).await
    }

    /// The candidate of `digest` with `settings`, out of its slot (no reconcile picks it from
    /// now on), unless another is staged or it was fenced.
    fn take_candidate(&self, digest: &str, settings: &GuestSettings) -> Option<Arc<Candidate>> {
        let mut slot = self.shared.candidate.write().unwrap();
        let ours = slot.as_ref().is_some_and(|c| {
            c.version.module.digest() == digest
                && c.version.ctx.settings == *settings
                && !c.fenced()
        });
        if ours { slot.take() } else { None }
    }
}

impl Controller {
    /// Takes back the candidate, if any, saying `why`: its caller holds `reloading`.
    pub(super) async fn supersede_candidate(&self, why: &str) -> Option<RolledBack> {
        let staged = self.shared.candidate.write().unwrap().take()?;
        Some(drop_candidate(&self.shared, &staged, why).await)
    }
}

/// Fences `candidate` (out of its slot already, so that no reconcile picks it any more),
/// cancels its reconciles in flight and waits for them, then requeues the keys it held.
async fn drop_candidate(shared: &Shared, candidate: &Candidate, why: &str) -> RolledBack {
    let cancelled = candidate.fence(why);
    // Read once the fence is up: no write of the candidate passes it after this instant.
    let at = SystemTime::now();
    candidate.gate.drained().await;
    let percent = candidate.route().percent;
    let requeued = shared.enqueue_where(Priority::High, |ns, name| in_share(ns, name, percent));
    tracing::warn!(guest = %shared.name, digest = %candidate.version.module.digest(), cancelled, requeued, "new revision rolled back: {why}");
    RolledBack {
        at,
        cancelled,
        requeued,
    }
}
