//! Workers: each takes keys from the guest's queue and reconciles them one at a time, under a
//! supervisor that catches a panic (from any cause), reports it and carries on, so a guest never
//! silently loses a worker.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use futures::FutureExt;
use tracing::Instrument;

use super::candidate::Pick;
use super::failures::Failures;
use super::fair_share::Slot;
use super::gate::Gate;
use super::reconciles::ReconcileResult;
use super::shared::Shared;
use super::traffic::Change;
use super::work_queue::{Priority, WorkQueue};
use crate::guest::Blame;
use crate::guest::bindings::{Outcome, Request};
use crate::guest::imports::Metrics;

impl Shared {
    /// Marks `key` failing (an empty key: a worker, outside any reconcile).
    fn set_failing(&self, key: &str, reason: String, blame: Blame) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.fail(key, reason, blame, SystemTime::now());
        self.publish_failing(&failures);
    }

    /// `key` completed: it no longer fails, and neither does a worker (it ran this).
    fn clear_failing(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.clear(key) {
            self.publish_failing(&failures);
        }
    }

    fn publish_failing(&self, failures: &Failures) {
        let next = failures.summary();
        self.failing.send_if_modified(|f| {
            let changed = *f != next;
            *f = next;
            changed
        });
    }

    /// Records a worker that panicked while reconciling `key`: logged and counted, the key
    /// retried with backoff, and the guest shown failing until a reconcile next completes.
    fn worker_panicked(&self, key: &str, message: &str) {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.counters.worker_panics.fetch_add(1, Ordering::Relaxed);
        self.counters.count_error(Blame::Host);
        let reason = format!(
            "a worker panicked reconciling {key}: {message}; the worker was restarted and the key will be retried"
        );
        let retry = self.queue.add_rate_limited(key.to_string());
        tracing::error!(guest = %self.name, %key, panic = %message, ?retry, blame = %Blame::Host, "worker panicked; restarted, key requeued");
        self.last_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), reason.clone());
        self.set_failing(key, reason, Blame::Host);
    }

    /// Records a reconcile of `key` cancelled because the gate closed under it (the shard was
    /// lost or handed over): the key is queued again for whenever the gate opens (with the
    /// `changes` it was queued for, which still count), and nothing counts as a failure, since
    /// the guest did nothing wrong.
    fn reconcile_cancelled(&self, key: &str, why: &str, changes: Vec<Change>) {
        self.traffic.restore(key, changes);
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        self.queue.add(key.to_string(), Priority::High);
        tracing::info!(guest = %self.name, %key, reason = %why, "reconcile cancelled: the gate closed");
    }

    /// Reconciles `key` as `pick` says in `slot`, charging it the CPU the call used: the whole
    /// call runs on the version picked when the worker took the key, even if a reload swaps
    /// another in meanwhile. `live`: the key was queued by a live change (see `traffic`).
    async fn reconcile_one(
        &self,
        pick: &Pick,
        key: &str,
        live: bool,
        slot: &mut Slot,
    ) -> ReconcileResult {
        let (namespace, name) = key.split_once('/').map_or(("", key), |(n, m)| (n, m));
        let request = Request {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        if !self.in_flight.lock().unwrap().insert(key.to_string()) {
            self.counters
                .concurrent_same_key
                .fetch_add(1, Ordering::Relaxed);
        }
        self.counters.started.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "fault-injection")]
        if fault::take_worker_panic(&self.name, key) {
            panic!("injected worker panic (fault-injection feature)");
        }
        let started = Instant::now();
        let shadowed = match &pick.shadow {
            Some(shadow) => Some(shadow.reconcile(request.clone()).await),
            None => None,
        };
        let live_started = Instant::now();
        let reconciled = pick
            .version
            .module
            .reconcile(pick.ctx.clone(), request)
            .await;
        let took_live = live_started.elapsed();
        pick.record(key, live, &reconciled, took_live);
        if live && pick.canary.is_none() {
            self.traffic.served(took_live);
        }
        if let (Some(shadow), Some(shadowed)) = (&pick.shadow, &shadowed) {
            let (counts, ignore) = match pick.candidate_shadow() {
                Some((counts, ignore)) => (counts, ignore),
                None => (&self.shadow_counts, Arc::from([])),
            };
            shadow.compare(&self.name, key, (shadowed, &reconciled), &ignore, counts);
            slot.charge(shadowed.usage.cpu);
            self.counters.add_cpu(shadowed.usage.cpu);
        }
        if let Some(candidate) = &pick.candidate {
            candidate.changed.notify_one();
        }
        slot.charge(reconciled.usage.cpu);
        self.counters.add_cpu(reconciled.usage.cpu);
        self.in_flight.lock().unwrap().remove(key);
        let blame = reconciled.blame();
        let ended = match &reconciled.result {
            Ok(Ok(_)) => Ended::Done,
            Ok(Err(_)) => Ended::Error,
            Err(_) => Ended::Trap,
        };
        // The serving version's record: a reconcile that ran on a rollout's new revision is
        // counted for its step (see `candidate`), never as the serving version's.
        let serving = pick.canary.is_none();
        if serving {
            self.account(key, &reconciled, counter(ended, blame));
        }
        let took = started.elapsed();
        let usage = reconciled.usage;
        record_on_span(&usage, blame);
        match reconciled.result {
            Ok(Ok(outcome)) => {
                self.queue.forget(&key.to_string());
                if self.keys.is_some() {
                    self.tombstones.forget(key);
                }
                if let Outcome::RequeueAfter(ms) = outcome {
                    self.queue.add_after(
                        key.to_string(),
                        Duration::from_millis(ms),
                        Priority::High,
                    );
                }
                tracing::debug!(guest = %self.name, %key, ?took, ?outcome, "reconciled");
                match outcome {
                    Outcome::RequeueAfter(0) => ReconcileResult::Requeue,
                    Outcome::RequeueAfter(_) => ReconcileResult::RequeueAfter,
                    Outcome::Done => ReconcileResult::Success,
                }
            }
            Ok(Err(e)) => {
                let retry = self.queue.add_rate_limited(key.to_string());
                let blame = blame.unwrap_or(Blame::Guest);
                tracing::warn!(guest = %self.name, %key, error = ?e, ?retry, %blame, canary = !serving, api_wait = ?usage.api_wait, "reconcile failed");
                ReconcileResult::Error
            }
            Err(e) => {
                let retry = self.queue.add_rate_limited(key.to_string());
                let blame = e.blame();
                tracing::warn!(guest = %self.name, %key, error = %e, ?retry, %blame, canary = !serving, guest_time = ?usage.guest_time(), api_wait = ?usage.api_wait, host_wait = ?usage.host_wait, "reconcile trapped");
                if serving {
                    self.set_failing(key, format!("reconciling {key}: {e}"), blame);
                }
                ReconcileResult::Error
            }
        }
    }

    /// Counts a reconcile of the serving version of `key` in `counter`, with its error (if
    /// any) as the key's last, and whether the key fails: a reconcile that returned, even with
    /// an error, means the guest runs.
    fn account(&self, key: &str, reconciled: &crate::guest::Reconciled, counter: Counter) {
        let m = &self.metrics;
        let blame = reconciled.blame();
        if let Some(blame) = blame {
            self.counters.count_error(blame);
        }
        let error = match &reconciled.result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("{e:?} (blame: {})", blame.unwrap_or(Blame::Guest))),
            Err(e) => Some(e.to_string()),
        };
        match error {
            Some(e) => self.last_errors.lock().unwrap().insert(key.to_string(), e),
            None => self.last_errors.lock().unwrap().remove(key),
        };
        match counter {
            Counter::Ok => Metrics::bump(&m.reconciles_ok),
            Counter::Failed => Metrics::bump(&m.reconciles_failed),
            Counter::Trap => Metrics::bump(&m.traps),
        }
        if reconciled.result.is_ok() {
            self.clear_failing(key);
        }
    }
}

/// How a reconcile ended, for [`counter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It returned an outcome.
    Done,
    /// It returned an error.
    Error,
    /// The call did not return: a trap, a deadline, a limit.
    Trap,
}

/// The counter of `/status` (`ok`, `failed`, `traps`) a reconcile goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counter {
    Ok,
    Failed,
    Trap,
}

/// Where a reconcile that `ended` so, blamed on `blame`, is counted: a call that did not
/// return is a trap only when the guest caused it. A deadline the cluster caused (a call that
/// hung on an API server cut off by a partition) or the host caused is a failure, blamed on
/// them, as the log says.
fn counter(ended: Ended, blame: Option<Blame>) -> Counter {
    match (ended, blame) {
        (Ended::Done, _) => Counter::Ok,
        (Ended::Error, _) => Counter::Failed,
        (Ended::Trap, Some(Blame::Guest) | None) => Counter::Trap,
        (Ended::Trap, Some(Blame::Cluster | Blame::Host)) => Counter::Failed,
    }
}

/// One worker, restarted whenever it panics, until the controller stops.
///
/// A panic while reconciling a key is caught around that key (in [`work`]), so the key is
/// known, retried and reported; this loop catches whatever else might panic in a worker, so
/// that a guest never silently loses a worker.
pub(super) async fn supervise(controller: std::sync::Weak<Shared>) {
    loop {
        match AssertUnwindSafe(work(controller.clone()))
            .catch_unwind()
            .await
        {
            Ok(()) => return,
            Err(panic) => {
                let Some(c) = controller.upgrade() else {
                    return;
                };
                let message = panic_message(&*panic);
                c.counters.worker_panics.fetch_add(1, Ordering::Relaxed);
                c.counters.count_error(Blame::Host);
                tracing::error!(guest = %c.name, panic = %message, "worker panicked outside a reconcile; restarted");
                c.set_failing(
                    "",
                    format!("a worker panicked: {message}; it was restarted"),
                    Blame::Host,
                );
                drop(c);
                // A panic that repeats at once must not become a busy loop.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// One worker: waits for sync, then reconciles keys until the controller stops.
///
/// Holds the controller only for one step at a time, so that dropping it (unloading the guest)
/// is never blocked by a worker waiting for an informer that will not sync.
async fn work(controller: std::sync::Weak<Shared>) {
    let (queue, mut hold, gate, keyed) = loop {
        let Some(c) = controller.upgrade() else {
            return;
        };
        // Subscribed before looking, so that a sync landing between the look and the wait
        // below still wakes it.
        let statuses: Vec<_> = c.informers().iter().map(|i| i.watch_status()).collect();
        if c.synced(Duration::from_secs(1)).await {
            tracing::info!(guest = %c.name, "informers synced; reconciling");
            break (
                c.queue.clone(),
                c.hold.subscribe(),
                c.gate.clone(),
                c.keys.is_some(),
            );
        }
        // Not synced yet: wait for an informer to change state rather than sleep, so that the
        // first reconcile follows the sync at once. The controller is not held meanwhile; the
        // hold channel closes when it is dropped.
        let mut unloaded = c.hold.subscribe();
        drop(c);
        if statuses.is_empty() {
            continue;
        }
        let changed = futures::future::select_all(
            statuses
                .into_iter()
                .map(|mut rx| Box::pin(async move { rx.changed().await })),
        );
        tokio::select! {
            _ = changed => {}
            // Sent or closed: either way look again (closed ends the loop at the upgrade).
            _ = unloaded.changed() => {}
            // The informers of a swapped version are not among these receivers.
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    loop {
        // Held: wait without holding the controller (an unload drops the sender, which ends
        // the wait).
        if hold.wait_for(Option::is_none).await.is_err() {
            return;
        }
        // Another replica's shard: nothing runs here until this one holds it. With a gate per
        // key, the guest's own gate is only its lead's.
        if !keyed && !gate.is_open() {
            gate.wait_open().await;
            continue;
        }
        let Some(key) = queue.get().await else {
            return;
        };
        // Done whatever happens below, a panic included: a key never done is never handed out
        // again.
        let _done = Done {
            queue: &queue,
            key: &key,
        };
        let Some(share) = controller.upgrade().map(|c| c.share.clone()) else {
            return;
        };
        // Other tenants may hold every slot, or this one be over its CPU budget, for a while:
        // the controller is not held meanwhile, so unloading it is never blocked here.
        let asked = Instant::now();
        let mut slot = share.slot().await;
        let slot_wait = asked.elapsed();
        let Some(c) = controller.upgrade() else {
            return;
        };
        // A key whose shard is unknown here, or held by another replica, is that replica's:
        // dropped, not queued again (see `key_gates`).
        let Some(gate) = c.gate_of_key(&key).filter(|g| !keyed || g.is_open()) else {
            queue.forget(&key);
            c.tombstones.forget(&key);
            continue;
        };
        // Pinned before the hold is read: a swap that must be reviewed holds first (see
        // `Controller::reload`), so a version seen unheld is one that may run. A key in a
        // rollout's canary share runs on the new revision, holding a pass through its gate.
        let pick = c.pick(&key);
        let canary = pick.canary_gate();
        // The pass is taken before anything of the reconcile runs, and the gate is watched for
        // as long as it runs: whoever closes the gate and then sees it drained knows that
        // nothing of this guest still runs here.
        let pass = gate.enter();
        if hold.borrow().is_some() || pass.is_none() {
            // Held, or the shard given up, while this worker waited for a key: the key goes
            // back (queued again once done), unreconciled.
            queue.add(key.clone(), Priority::High);
            continue;
        }
        let _active = c.counters.reconciles.active();
        let started = Instant::now();
        let changes = c.traffic.take(&key);
        let live = c.live(&changes);
        let span = reconcile_span(&c.name, &key, &pick, slot_wait);
        let reconciled = AssertUnwindSafe(
            c.reconcile_one(&pick, &key, live, &mut slot)
                .instrument(span.clone()),
        );
        let result = tokio::select! {
            biased;
            why = cancelled(&gate, canary) => {
                c.reconcile_cancelled(&key, &why, changes);
                drop(pass);
                continue;
            }
            r = reconciled.catch_unwind() => match r {
                Ok(result) => result,
                Err(panic) => {
                    c.worker_panicked(&key, &panic_message(&*panic));
                    c.counters.reconciles.panicked();
                    ReconcileResult::Error
                }
            },
        };
        drop(pass);
        span.record("outcome", result.label());
        c.counters.reconciles.finished(result, started.elapsed());
    }
}

/// The span of one reconcile. Every line the host or the guest logs during the call carries the
/// guest, the key and the version serving it (kube-runtime's "reconciling object" span), so that
/// a log can be read one request at a time; exported as a trace, it is the parent of the host
/// calls' spans, says how long the key waited for a slot before it began, and, once it has
/// ended, how it ended (`outcome`, `blame`) and how long its imports waited on the API server and
/// on the host (read-your-writes).
fn reconcile_span(guest: &str, key: &str, pick: &Pick, slot_wait: Duration) -> tracing::Span {
    let span = tracing::info_span!(
        "reconcile",
        guest = %guest,
        key = %key,
        digest = %pick.version.module.digest(),
        canary = tracing::field::Empty,
        slot_wait_ms = millis(slot_wait),
        outcome = tracing::field::Empty,
        blame = tracing::field::Empty,
        api_wait_ms = tracing::field::Empty,
        host_wait_ms = tracing::field::Empty,
    );
    // Only when it is one: every log line in the span carries its fields.
    if pick.canary.is_some() {
        span.record("canary", true);
    }
    span
}

/// Records on the reconcile's span, the current one inside [`Shared::reconcile_one`], how long
/// the guest's imports waited and whom a failure blames.
fn record_on_span(usage: &crate::guest::Usage, blame: Option<Blame>) {
    let span = tracing::Span::current();
    span.record("api_wait_ms", millis(usage.api_wait));
    span.record("host_wait_ms", millis(usage.host_wait));
    if let Some(blame) = blame {
        span.record("blame", tracing::field::display(blame));
    }
}

/// A duration as fractional milliseconds, the unit a trace viewer shows beside a span's own.
fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Resolves, with why, when a reconcile must stop: its gate closed (the shard was lost or
/// handed over), or the canary gate it runs under did (its revision was rolled back).
async fn cancelled(gate: &Gate, canary: Option<Arc<Gate>>) -> String {
    tokio::select! {
        biased;
        why = gate.wait_closed() => why,
        why = rolled_back(canary) => why,
    }
}

/// Resolves when the canary gate a reconcile runs under closes (its revision was rolled back),
/// with why; never without one.
async fn rolled_back(canary: Option<Arc<Gate>>) -> String {
    match canary {
        Some(gate) => gate.wait_closed().await,
        None => std::future::pending().await,
    }
}

/// Tells the queue a key is done when dropped.
struct Done<'a> {
    queue: &'a WorkQueue<String>,
    key: &'a String,
}

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.queue.done(self.key);
    }
}

/// Fault injection for tests of the worker supervision: nothing a guest can reach.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use std::sync::Mutex;

    static WORKER_PANICS: Mutex<Vec<(String, String, u32)>> = Mutex::new(Vec::new());

    /// Makes the next `times` reconciles of `key` by guest `guest` panic in the host's worker,
    /// before the guest is called.
    pub fn panic_worker(guest: &str, key: &str, times: u32) {
        WORKER_PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((guest.to_string(), key.to_string(), times));
    }

    /// Forgets every injected panic.
    pub fn clear() {
        WORKER_PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub(super) fn take_worker_panic(guest: &str, key: &str) -> bool {
        let mut all = WORKER_PANICS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = all.iter().position(|(g, k, _)| g == guest && k == key) else {
            return false;
        };
        all[i].2 -= 1;
        if all[i].2 == 0 {
            all.remove(i);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_the_cluster_caused_counts_as_a_failure_not_a_trap() {
        assert_eq!(
            counter(Ended::Trap, Some(Blame::Cluster)),
            Counter::Failed,
            "a call that hung through a partition is the cluster's"
        );
        assert_eq!(counter(Ended::Trap, Some(Blame::Host)), Counter::Failed);
        assert_eq!(counter(Ended::Trap, Some(Blame::Guest)), Counter::Trap);
        assert_eq!(counter(Ended::Error, Some(Blame::Cluster)), Counter::Failed);
        assert_eq!(counter(Ended::Done, None), Counter::Ok);
    }

    #[test]
    fn panic_messages_are_read_from_str_and_string_payloads() {
        let p = std::panic::catch_unwind(|| panic!("static")).unwrap_err();
        assert_eq!(panic_message(&*p), "static");
        let p = std::panic::catch_unwind(|| panic!("formatted {}", 1)).unwrap_err();
        assert_eq!(panic_message(&*p), "formatted 1");
    }
}
