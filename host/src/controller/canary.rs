//! A candidate: a new revision of the guest staged beside the serving version for a progressive
//! rollout (see [`crate::rollout`]). It reads the serving version's informers and takes its keys
//! from the guest's own queue, so a key runs on one revision at a time; which one is chosen per
//! reconcile, from the [`Route`] the rollout's driver sets:
//! - in a shadow step every key runs on the serving version, and the candidate runs beside it
//!   with dry-run writes, compared (as a shadow from the host config does);
//! - in a canary step the keys in the share run on the candidate for real (see
//!   [`share`](crate::rollout::share)), the others on the serving version.
//!
//! Where it may surprise:
//! - The candidate must read exactly the kinds the serving version reads, in the same scopes:
//!   it shares their informers, and their review.
//! - Events are mapped to keys by the serving version's roles, the candidate's own aside.
//! - A rollback is a fence: from that instant the candidate's client sends no write, its
//!   reconciles in flight are cancelled at their next await, and [`Controller::roll_back`]
//!   returns only once none is left. A write the API server had received before the fence fell
//!   may still land; none is sent after it.
//! - What [`Controller::rollout_observed`] reports is counted since the route last changed: each
//!   step is judged on its own reconciles.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::Controller;
use super::error::Error;
use super::gate::{Gate, Pass};
use super::plan::{add_indexes, describe};
use super::shadow::{self, Shadow};
use super::shared::Shared;
use super::version::{Version, build_version_from, prepare_module};
use super::work_queue::Priority;
use crate::guest::bindings::Gvk;
use crate::guest::imports::GuestContext;
use crate::guest::read_your_writes::Floors;
use crate::guest::settings::GuestSettings;
use crate::guest::{Blame, Module, Reconciled};
use crate::rollout::decide::Observed;
use crate::rollout::share::in_share;

/// Where the candidate runs: beside the serving version as a shadow, and on a share of keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Route {
    /// Every key also runs on the candidate, dry, compared.
    pub shadow: bool,
    /// Percent of keys (0 to 100) that run on the candidate for real.
    pub percent: u32,
}

/// What a rollback did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// When the fence fell: no write of the candidate was sent after it.
    pub at: SystemTime,
    /// Reconciles of the candidate that were in flight then, cancelled.
    pub cancelled: usize,
    /// Keys queued again for the serving version.
    pub requeued: usize,
}

/// A candidate as `/status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateSnapshot {
    /// sha256 of its module.
    pub digest: String,
    /// Its settings.
    pub settings: GuestSettings,
    /// Where it runs.
    pub route: Route,
}

/// How many recent reconcile times each side keeps for its p99.
const TIMES_KEPT: usize = 2048;

/// What was seen since the route last changed.
#[derive(Debug)]
struct Tally {
    since: Instant,
    reconciles: u64,
    guest_errors: u64,
    traps: u64,
    last_error: Option<String>,
    candidate_times: Vec<Duration>,
    serving_times: Vec<Duration>,
    /// The shadow's counts when the step began.
    compared_before: u64,
    divergent_before: u64,
}

impl Tally {
    fn new(compared_before: u64, divergent_before: u64) -> Self {
        Self {
            since: Instant::now(),
            reconciles: 0,
            guest_errors: 0,
            traps: 0,
            last_error: None,
            candidate_times: Vec::new(),
            serving_times: Vec::new(),
            compared_before,
            divergent_before,
        }
    }
}

/// Keeps the latest [`TIMES_KEPT`] of `times`, overwriting the oldest.
fn keep(times: &mut Vec<Duration>, n: u64, took: Duration) {
    if times.len() < TIMES_KEPT {
        times.push(took);
    } else {
        times[(n as usize) % TIMES_KEPT] = took;
    }
}

/// The 99th percentile of `times` (nearest rank), if there is any.
pub(crate) fn p99(times: &[Duration]) -> Option<Duration> {
    if times.is_empty() {
        return None;
    }
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 99).div_ceil(100).max(1);
    Some(sorted[rank - 1])
}

/// A candidate revision, staged.
pub(super) struct Candidate {
    /// Runs the keys of the share, for real, through a fenced client.
    version: Arc<Version>,
    /// The same module with dry-run writes, for shadow steps; `None` when it cannot run so.
    shadow: Option<Arc<Shadow>>,
    shadow_counts: shadow::Counts,
    /// The serving version's context with recordings on, for shadow steps (the comparison
    /// needs both sides' recordings).
    taped_serving: Arc<GuestContext>,
    route: RwLock<Route>,
    /// Canary reconciles pass through it; closed by a rollback.
    gate: Arc<Gate>,
    fence: Arc<AtomicBool>,
    tally: Mutex<Tally>,
    serving_runs: std::sync::atomic::AtomicU64,
}

/// Which revision runs one reconcile, and with what beside it.
pub(super) struct Pick {
    /// The version whose module runs for real.
    pub(super) version: Arc<Version>,
    /// The context it runs with.
    pub(super) ctx: Arc<GuestContext>,
    /// A version that runs beside it, dry, first.
    pub(super) shadow: Option<Arc<Shadow>>,
    /// That shadow is the candidate's (a shadow step), not the host config's.
    candidate_shadow: bool,
    /// The candidate, while there is one: the reconcile is counted for its step.
    pub(super) candidate: Option<Arc<Candidate>>,
    /// The reconcile runs on the candidate: it holds this pass through the canary gate.
    pub(super) canary: Option<Pass>,
}

impl Pick {
    /// The gate whose closing cancels this reconcile besides the guest's own: the candidate's,
    /// when the reconcile runs on it.
    pub(super) fn canary_gate(&self) -> Option<Arc<Gate>> {
        self.canary.as_ref()?;
        self.candidate.as_ref().map(|c| c.gate.clone())
    }

    /// The shadow's counts: the candidate's in a shadow step, else the host config's shadow's.
    pub(super) fn shadow_counts<'a>(&'a self, shared: &'a Shared) -> &'a shadow::Counts {
        match &self.candidate {
            Some(c) if self.candidate_shadow => &c.shadow_counts,
            _ => &shared.shadow_counts,
        }
    }

    /// Records a reconcile that ran as picked, for the candidate's step.
    pub(super) fn record(&self, key: &str, reconciled: &Reconciled, took: Duration) {
        let Some(candidate) = &self.candidate else {
            return;
        };
        let mut tally = candidate.tally.lock().unwrap();
        if self.canary.is_none() {
            let n = candidate.serving_runs.fetch_add(1, Ordering::Relaxed);
            keep(&mut tally.serving_times, n, took);
            return;
        }
        let n = tally.reconciles;
        tally.reconciles += 1;
        keep(&mut tally.candidate_times, n, took);
        match (&reconciled.result, reconciled.blame()) {
            (Ok(Err(e)), Some(Blame::Guest)) => {
                tally.guest_errors += 1;
                tally.last_error = Some(format!("{key}: {e:?}"));
            }
            (Err(e), Some(Blame::Guest)) => {
                tally.traps += 1;
                tally.last_error = Some(format!("{key}: {e}"));
            }
            _ => {}
        }
    }
}

/// A client that sends no write once `fence` is set: the request fails before it leaves.
fn fenced(client: kube::Client, fence: Arc<AtomicBool>) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let client = client.clone();
        let fence = fence.clone();
        async move {
            if req.method() != http::Method::GET && fence.load(Ordering::SeqCst) {
                return Err(kube::Error::Service(
                    "this revision was rolled back: its writes are refused".into(),
                ));
            }
            client.send(req).await
        }
    });
    kube::Client::new(service, namespace)
}

impl Shared {
    /// The candidate, if one is staged.
    pub(super) fn candidate(&self) -> Option<Arc<Candidate>> {
        self.candidate.read().unwrap().clone()
    }

    /// Which revision reconciles `key` now.
    pub(super) fn pick(&self, key: &str) -> Pick {
        let serving = self.current();
        let Some(candidate) = self.candidate() else {
            return Pick {
                ctx: serving.ctx.clone(),
                shadow: serving.shadow.clone(),
                version: serving,
                candidate_shadow: false,
                candidate: None,
                canary: None,
            };
        };
        let route = *candidate.route.read().unwrap();
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        if in_share(namespace, name, route.percent)
            && let Some(pass) = candidate.gate.enter()
        {
            return Pick {
                ctx: candidate.version.ctx.clone(),
                version: candidate.version.clone(),
                shadow: None,
                candidate_shadow: false,
                candidate: Some(candidate),
                canary: Some(pass),
            };
        }
        let shadow = candidate.shadow.clone().filter(|_| route.shadow);
        Pick {
            ctx: if shadow.is_some() {
                candidate.taped_serving.clone()
            } else {
                serving.ctx.clone()
            },
            candidate_shadow: shadow.is_some(),
            shadow: shadow.or_else(|| serving.shadow.clone()),
            version: serving,
            candidate: Some(candidate),
            canary: None,
        }
    }

    /// Queues, at `priority`, every primary key for which `moved` holds; returns how many.
    fn enqueue_where(&self, priority: Priority, moved: impl Fn(&str, &str) -> bool) -> usize {
        let v = self.current();
        let Some(d) = v.ctx.declared.get(&v.for_kind) else {
            return 0;
        };
        let mut n = 0;
        for o in d.informer.store().all() {
            let key = o.key().to_string();
            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
            if moved(namespace, name) {
                self.queue.add(key.clone(), priority);
                n += 1;
            }
        }
        n
    }
}

impl Controller {
    /// Stages `module` with `guest_settings` as the candidate of a progressive rollout, in place
    /// of any candidate before it (which is rolled back), with no share and no shadow yet: the
    /// driver sets its [`Route`]. The serving version is untouched.
    ///
    /// Refused ([`Error::Invalid`]) when the candidate reads other kinds, or the same in other
    /// scopes, than the serving version.
    pub async fn stage(&self, module: Module, guest_settings: &GuestSettings) -> Result<(), Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let settings = &self.shared.settings;
        let plan = describe(&module, settings).await?;
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
        let floors: std::collections::HashMap<Gvk, Arc<Floors>> = (live.ctx.declared.iter())
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
        let shadow = prepare_module(settings, guest_settings, &live, &self.shared.client, module)
            .await
            .inspect_err(|e| tracing::warn!(guest = %settings.name, "the new revision cannot run as a shadow, so shadow steps compare nothing: {e}"))
            .ok()
            .map(Arc::new);
        let taped_serving = Arc::new(GuestContext {
            taped: true,
            ..(*live.ctx).clone()
        });
        let candidate = Arc::new(Candidate {
            version: Arc::new(version),
            shadow,
            shadow_counts: shadow::Counts::default(),
            taped_serving,
            route: RwLock::new(Route::default()),
            gate: Gate::open(),
            fence,
            tally: Mutex::new(Tally::new(0, 0)),
            serving_runs: Default::default(),
        });
        let digest = candidate.version.module.digest().to_string();
        let before = self.shared.candidate.write().unwrap().replace(candidate);
        if let Some(before) = before {
            drop_candidate(&self.shared, &before, "replaced by a newer revision").await;
        }
        tracing::info!(guest = %settings.name, %digest, "new revision staged for a progressive rollout");
        Ok(())
    }

    /// Sets where the candidate runs, and starts counting afresh for the new step; keys that
    /// move onto the candidate are queued once (at low priority). Returns how many moved, or
    /// `None` with no candidate.
    pub fn route(&self, route: Route) -> Option<usize> {
        let candidate = self.shared.candidate()?;
        let before = std::mem::replace(&mut *candidate.route.write().unwrap(), route);
        let counts = candidate.shadow_counts.snapshot("");
        *candidate.tally.lock().unwrap() = Tally::new(counts.reconciles, counts.divergent);
        let moved = self.shared.enqueue_where(Priority::Low, |ns, name| {
            in_share(ns, name, route.percent) && !in_share(ns, name, before.percent)
        });
        tracing::info!(guest = %self.shared.name, shadow = route.shadow, percent = route.percent, moved, "rollout step");
        Some(moved)
    }

    /// What the candidate's current step has seen, for [`decide`](crate::rollout::decide::decide);
    /// `None` with no candidate. `resumed` is passed through.
    pub fn rollout_observed(&self, resumed: bool) -> Option<Observed> {
        let candidate = self.shared.candidate()?;
        let counts = candidate.shadow_counts.snapshot("");
        let tally = candidate.tally.lock().unwrap();
        Some(Observed {
            compared: counts.reconciles.saturating_sub(tally.compared_before),
            divergent: counts.divergent.saturating_sub(tally.divergent_before),
            last_divergence: counts.last_divergence,
            reconciles: tally.reconciles,
            guest_errors: tally.guest_errors,
            traps: tally.traps,
            last_error: tally.last_error.clone(),
            p99: p99(&tally.candidate_times),
            serving_p99: p99(&tally.serving_times),
            in_step: tally.since.elapsed(),
            resumed,
        })
    }

    /// The candidate, if one is staged.
    pub fn candidate(&self) -> Option<CandidateSnapshot> {
        let c = self.shared.candidate()?;
        Some(CandidateSnapshot {
            digest: c.version.module.digest().to_string(),
            settings: c.version.ctx.settings.clone(),
            route: *c.route.read().unwrap(),
        })
    }

    /// Makes the candidate the serving version for every key; keys that were not on it yet are
    /// queued once (at low priority). Returns how many, or `None` with no candidate.
    pub async fn promote(&self) -> Option<usize> {
        let _one_at_a_time = self.reloading.lock().await;
        let candidate = self.shared.candidate.write().unwrap().take()?;
        let percent = candidate.route.read().unwrap().percent;
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
        let moved =
            (self.shared).enqueue_where(Priority::Low, |ns, name| !in_share(ns, name, percent));
        tracing::info!(guest = %self.shared.name, digest = %candidate.version.module.digest(), moved, "new revision promoted");
        Some(moved)
    }

    /// Takes the candidate back: see the module docs for the fence. Keys it held are queued
    /// again, at high priority, for the serving version. `None` with no candidate.
    pub async fn roll_back(&self, why: &str) -> Option<RolledBack> {
        let candidate = self.shared.candidate()?;
        let rolled = drop_candidate(&self.shared, &candidate, why).await;
        let mut slot = self.shared.candidate.write().unwrap();
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &candidate)) {
            *slot = None;
        }
        Some(rolled)
    }
}

/// Fences `candidate`, cancels its reconciles in flight and waits for them, then requeues the
/// keys it held.
pub(super) async fn drop_candidate(
    shared: &Shared,
    candidate: &Candidate,
    why: &str,
) -> RolledBack {
    candidate.fence.store(true, Ordering::SeqCst);
    let at = SystemTime::now();
    let cancelled = candidate.gate.running();
    candidate.gate.close(why);
    candidate.gate.drained().await;
    let percent = candidate.route.read().unwrap().percent;
    let requeued = shared.enqueue_where(Priority::High, |ns, name| in_share(ns, name, percent));
    tracing::warn!(guest = %shared.name, digest = %candidate.version.module.digest(), cancelled, requeued, "new revision rolled back: {why}");
    RolledBack {
        at,
        cancelled,
        requeued,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn p99_is_the_nearest_rank() {
        assert_eq!(p99(&[]), None);
        assert_eq!(p99(&[ms(5)]), Some(ms(5)));
        let hundred: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(p99(&hundred), Some(ms(99)));
        let mut two_hundred: Vec<Duration> = (1..=200).map(ms).collect();
        two_hundred.reverse();
        assert_eq!(p99(&two_hundred), Some(ms(198)));
    }

    #[test]
    fn kept_times_are_the_latest_ones() {
        let mut times = Vec::new();
        for n in 0..(TIMES_KEPT as u64 + 10) {
            keep(&mut times, n, ms(n));
        }
        assert_eq!(times.len(), TIMES_KEPT);
        assert!(times.contains(&ms(TIMES_KEPT as u64 + 9)));
        assert!(!times.contains(&ms(5)), "the oldest were overwritten");
    }

    #[tokio::test]
    async fn a_fenced_client_refuses_writes_once_the_fence_falls_and_still_reads() {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        let inner = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            log.lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri()));
            async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(b"{}"),
                )))
            }
        });
        let fence = Arc::new(AtomicBool::new(false));
        let client = fenced(kube::Client::new(inner, "default"), fence.clone());
        let request = |method: http::Method| {
            http::Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/a/configmaps/x")
                .body(Vec::new())
                .unwrap()
        };
        client
            .request_text(request(http::Method::PATCH))
            .await
            .unwrap();
        fence.store(true, Ordering::SeqCst);
        let refused = client.request_text(request(http::Method::PATCH)).await;
        assert!(
            refused.unwrap_err().to_string().contains("rolled back"),
            "a write after the fence is refused"
        );
        client
            .request_text(request(http::Method::GET))
            .await
            .unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "PATCH /api/v1/namespaces/a/configmaps/x",
                "GET /api/v1/namespaces/a/configmaps/x",
            ],
            "the refused write never left"
        );
    }
}
