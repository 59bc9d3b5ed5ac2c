//! What a running guest looks like from outside: the snapshot `/status`, `/metrics` and tests
//! read.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Controller;
use super::failures::Failing;
use super::reconciles::ReconcileStats;
use crate::guest::Blame;
use crate::informer::{Staleness, Status};

/// A snapshot for status pages and tests.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The guest's name.
    pub name: String,
    /// sha256 of the module serving.
    pub digest: String,
    /// When the serving version was swapped in.
    pub loaded_at: std::time::SystemTime,
    /// Each informer's kind, health and staleness.
    pub informers: Vec<(String, Status, Staleness)>,
    /// Reconciles that returned Ok (all versions).
    pub reconciles_ok: u64,
    /// Reconciles that returned an error (all versions).
    pub reconciles_failed: u64,
    /// Reconciles that trapped (all versions).
    pub traps: u64,
    /// Failed reconciles by blame: guest, host, cluster (all versions).
    pub errors_by_blame: [u64; 3],
    /// Worker panics caught (all versions).
    pub worker_panics: u64,
    /// Why the guest cannot run, if it cannot.
    pub failing: Option<Failing>,
    /// Why reconciles are held back (held by [`Controller::hold`], or an informer not synced),
    /// if they are.
    pub held_back: Option<String>,
    /// Keys waiting.
    pub queued: usize,
    /// Reconcile results, time, panics and busy workers (all versions).
    pub reconciles: ReconcileStats,
    /// The work queue's client-go metrics.
    pub queue: crate::controller::work_queue::Stats,
    /// Workers: the most reconciles run at once.
    pub workers: usize,
    /// The most linear memory one call into the guest held at once, over every version since
    /// it started (see [`Metrics::peak_memory_bytes`](crate::guest::imports::Metrics::peak_memory_bytes)).
    pub peak_memory_bytes: u64,
    /// The serving module's native code image (see [`Module::compiled_bytes`](crate::guest::Module::compiled_bytes)).
    pub compiled_bytes: usize,
    /// Its tenant: the namespace it was delivered in, or
    /// [`OPERATOR`](crate::controller::fair_share::OPERATOR).
    pub tenant: String,
    /// CPU its `reconcile` and `map` calls used (all versions).
    pub cpu: Duration,
    /// Its shadow version, if it has one.
    pub shadow: Option<crate::controller::shadow::ShadowSnapshot>,
}

impl Controller {
    /// A status snapshot.
    pub fn snapshot(&self) -> Snapshot {
        let m = &self.shared.metrics;
        let v = self.shared.current();
        Snapshot {
            name: self.shared.name.clone(),
            digest: v.module.digest().to_string(),
            loaded_at: v.loaded_at,
            informers: v
                .informers
                .iter()
                .map(|i| (i.key().name().to_string(), i.status(), i.staleness()))
                .collect(),
            reconciles_ok: m.reconciles_ok.load(Ordering::Relaxed),
            reconciles_failed: m.reconciles_failed.load(Ordering::Relaxed),
            traps: m.traps.load(Ordering::Relaxed),
            errors_by_blame: Blame::ALL.map(|b| self.shared.counters.errors(b)),
            worker_panics: self.shared.counters.worker_panics.load(Ordering::Relaxed),
            failing: self.failing(),
            held_back: self.held().or_else(|| self.not_ready()),
            queued: self.shared.queue.len(),
            reconciles: self.shared.counters.reconciles.stats(),
            queue: self.shared.queue.stats(),
            workers: self.shared.settings.workers.max(1),
            peak_memory_bytes: m.peak_memory_bytes.load(Ordering::Relaxed),
            compiled_bytes: v.module.compiled_bytes(),
            tenant: self.shared.share.tenant().to_string(),
            cpu: self.shared.counters.cpu(),
            shadow: (self.shared.settings.shadow.as_ref())
                .map(|s| self.shared.shadow_counts.snapshot(s.digest())),
        }
    }
}
