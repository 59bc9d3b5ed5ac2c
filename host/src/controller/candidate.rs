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
//!   reconciles in flight are cancelled at their next await, and
//!   [`Controller::roll_back`](super::Controller::roll_back) returns only once none is left. A
//!   write the API server had received before the fence fell may still land; none is sent
//!   after it.
//! - What [`Controller::rollout_observed`](super::Controller::rollout_observed) reports is
//!   counted since the route last changed: each step is judged on its own reconciles, and its
//!   latency on its reconciles of live changes against the serving revision's most recent ones
//!   (see `traffic`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::gate::{Gate, Pass};
use super::shadow::{self, Shadow};
use super::traffic::Recent;
use super::version::Version;
use crate::guest::imports::GuestContext;
use crate::guest::settings::GuestSettings;
use crate::guest::{Blame, Reconciled};
use crate::rollout::decide::Observed;

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

/// How many recent live reconcile times the candidate keeps in a step.
const TIMES_KEPT: usize = 2048;

/// What was seen since the route last changed.
#[derive(Debug)]
struct Tally {
    since: Instant,
    reconciles: u64,
    live: u64,
    guest_errors: u64,
    traps: u64,
    last_error: Option<String>,
    /// The candidate's reconcile times of live changes, oldest first.
    times: Recent,
    /// The shadow's counts when the step began.
    compared_before: u64,
    divergent_before: u64,
}

impl Tally {
    fn new(compared_before: u64, divergent_before: u64) -> Self {
        Self {
            since: Instant::now(),
            reconciles: 0,
            live: 0,
            guest_errors: 0,
            traps: 0,
            last_error: None,
            times: Recent::new(TIMES_KEPT),
            compared_before,
            divergent_before,
        }
    }
}

/// A candidate revision, staged.
pub(super) struct Candidate {
    /// Runs the keys of the share, for real, through a fenced client.
    pub(super) version: Arc<Version>,
    /// The same module with dry-run writes, for shadow steps; `None` when it cannot run so.
    pub(super) shadow: Option<Arc<Shadow>>,
    shadow_counts: shadow::Counts,
    /// The serving version's context with recordings on, for shadow steps (the comparison
    /// needs both sides' recordings).
    pub(super) taped_serving: Arc<GuestContext>,
    route: RwLock<Route>,
    /// Canary reconciles pass through it; closed by a rollback.
    pub(super) gate: Arc<Gate>,
    fence: Arc<AtomicBool>,
    tally: Mutex<Tally>,
    /// Parts of written objects a shadow step lets differ (its `ignorePaths`).
    ignore: RwLock<Arc<[String]>>,
    /// Told after each reconcile it counts: the driver judges the step at once instead of at
    /// its next look.
    pub(super) changed: Arc<tokio::sync::Notify>,
}

impl Candidate {
    /// A candidate running `version` (whose client must be [`fenced`] by `fence`), with
    /// `shadow` for shadow steps beside `serving`; no share and no shadow until routed.
    pub(super) fn new(
        version: Version,
        shadow: Option<Arc<Shadow>>,
        serving: &GuestContext,
        fence: Arc<AtomicBool>,
    ) -> Self {
        Self {
            version: Arc::new(version),
            shadow,
            shadow_counts: shadow::Counts::default(),
            taped_serving: Arc::new(GuestContext {
                taped: true,
                ..serving.clone()
            }),
            route: RwLock::new(Route::default()),
            gate: Gate::open(),
            fence,
            tally: Mutex::new(Tally::new(0, 0)),
            ignore: RwLock::new(Arc::new([])),
            changed: Arc::default(),
        }
    }

    /// Where it runs now.
    pub(super) fn route(&self) -> Route {
        *self.route.read().unwrap()
    }

    /// Routes it anew, with the paths a shadow step lets differ, and starts counting afresh
    /// for the new step; returns the route before.
    pub(super) fn set_route(&self, route: Route, ignore: &[String]) -> Route {
        let before = std::mem::replace(&mut *self.route.write().unwrap(), route);
        *self.ignore.write().unwrap() = ignore.into();
        let counts = self.shadow_counts.snapshot("");
        *self.tally.lock().unwrap() = Tally::new(counts.reconciles, counts.divergent);
        before
    }

    /// The paths a shadow step lets differ.
    pub(super) fn ignored(&self) -> Arc<[String]> {
        self.ignore.read().unwrap().clone()
    }

    /// What the current step has seen, beside the serving revision's live reconcile times
    /// since the step began (`serving_since` gives them from an instant); `resumed` is passed
    /// through.
    pub(super) fn observed(
        &self,
        serving_since: impl FnOnce(Instant) -> Vec<Duration>,
        resumed: bool,
    ) -> Observed {
        let counts = self.shadow_counts.snapshot("");
        let tally = self.tally.lock().unwrap();
        let serving_times = serving_since(tally.since);
        Observed {
            compared: counts.reconciles.saturating_sub(tally.compared_before),
            divergent: counts.divergent.saturating_sub(tally.divergent_before),
            last_divergence: counts.last_divergence,
            first_difference: counts.first_difference,
            reconciles: tally.reconciles,
            live: tally.live,
            guest_errors: tally.guest_errors,
            traps: tally.traps,
            last_error: tally.last_error.clone(),
            times: tally.times.to_vec(),
            serving_times,
            in_step: tally.since.elapsed(),
            resumed,
        }
    }

    /// Whether its writes are fenced: it was rolled back, or is being.
    pub(super) fn fenced(&self) -> bool {
        self.fence.load(Ordering::SeqCst)
    }

    /// Fences its writes (none is sent from now on) and closes its gate (its reconciles in
    /// flight are cancelled); returns how many were running.
    pub(super) fn fence(&self, why: &str) -> usize {
        self.fence.store(true, Ordering::SeqCst);
        let running = self.gate.running();
        self.gate.close(why);
        running
    }
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
    pub(super) candidate_shadow: bool,
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

    /// The counts the shadow's comparisons go to, and the paths they leave out, when it is
    /// the candidate's (a shadow step); `None` for a host config's shadow, whose counts are the
    /// guest's and which ignores nothing.
    pub(super) fn candidate_shadow(&self) -> Option<(&shadow::Counts, Arc<[String]>)> {
        let c = self.candidate.as_ref().filter(|_| self.candidate_shadow)?;
        Some((&c.shadow_counts, c.ignored()))
    }

    /// Records a reconcile that ran on the candidate (`live`: of a live change), for its
    /// step; a reconcile on the serving revision is not the candidate's to count.
    pub(super) fn record(&self, key: &str, live: bool, reconciled: &Reconciled, took: Duration) {
        let (Some(candidate), Some(_)) = (&self.candidate, &self.canary) else {
            return;
        };
        let mut tally = candidate.tally.lock().unwrap();
        tally.reconciles += 1;
        if live {
            tally.live += 1;
            tally.times.push(took);
        }
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
pub(super) fn fenced(client: kube::Client, fence: Arc<AtomicBool>) -> kube::Client {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fenced_client_refuses_writes_once_the_fence_falls_and_still_reads() {
        let (client, seen) = crate::controller::shadow::tests::logging_client();
        let fence = Arc::new(AtomicBool::new(false));
        let client = fenced(client, fence.clone());
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
