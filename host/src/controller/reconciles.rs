//! What a controller records about its reconciles and its queue for `/metrics`: results, time,
//! panics and busy workers, in controller-runtime's and client-go's buckets. `ops::metrics`
//! encodes them; they live here, with the controller that records them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::guest::Blame;

use prometheus_client::metrics::histogram::Histogram;

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`: 5 ms to 60 s.
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// Buckets of `workqueue_queue_duration_seconds` and `workqueue_work_duration_seconds`: 10 ns to
/// 1000 s, ×10 each, as controller-runtime registers them (Kubernetes' own components use the
/// bounds from 1 µs up).
pub const WORK_QUEUE_BUCKETS: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

/// What a reconcile came to, as controller-runtime's `result` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// The guest returned `done`.
    Success,
    /// The guest returned an error, trapped (panic, deadline, memory, host-call limit), or the
    /// host's worker panicked running it: all are retried with backoff, as controller-runtime
    /// retries an error or a recovered panic.
    Error,
    /// The guest returned `requeue-after(0)`: queued again at once. controller-runtime's
    /// `requeue` is rate-limited instead; both mean "again, with no delay of its own".
    Requeue,
    /// The guest returned `requeue-after` with a delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// Every result, in the order [`ReconcileStats::results`] counts them.
    pub const ALL: [ReconcileResult; 4] = [
        ReconcileResult::Success,
        ReconcileResult::Error,
        ReconcileResult::Requeue,
        ReconcileResult::RequeueAfter,
    ];

    /// The `result` label.
    pub fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

/// One controller's reconcile metrics, as controller-runtime keeps them per controller: results,
/// time, panics and busy workers.
#[derive(Debug)]
pub struct Reconciles {
    results: [AtomicU64; 4],
    panics: AtomicU64,
    active: AtomicU64,
    time: Histogram,
}

impl Default for Reconciles {
    fn default() -> Self {
        Self {
            results: Default::default(),
            panics: AtomicU64::new(0),
            active: AtomicU64::new(0),
            time: Histogram::new(RECONCILE_TIME_BUCKETS),
        }
    }
}

/// A worker counted in `controller_runtime_active_workers` until this is dropped.
#[derive(Debug)]
#[must_use = "the worker counts as active only while this is held"]
pub struct Active<'a>(&'a AtomicU64);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Reconciles {
    /// Counts a worker as reconciling until the guard drops, so a worker cancelled mid-reconcile
    /// (the guest stopped) is not left counted.
    pub fn active(&self) -> Active<'_> {
        self.active.fetch_add(1, Ordering::Relaxed);
        Active(&self.active)
    }

    /// Records a finished reconcile: its result and how long it took.
    pub fn finished(&self, result: ReconcileResult, took: Duration) {
        self.results[result as usize].fetch_add(1, Ordering::Relaxed);
        self.time.observe(took.as_secs_f64());
    }

    /// Records a reconcile that panicked in the host's worker. Record it as
    /// [`finished`](Self::finished) with [`ReconcileResult::Error`] too, as controller-runtime
    /// counts a recovered panic as an error.
    pub fn panicked(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now, and the time histogram.
    pub fn stats(&self) -> ReconcileStats {
        ReconcileStats {
            results: ReconcileResult::ALL.map(|r| self.results[r as usize].load(Ordering::Relaxed)),
            panics: self.panics.load(Ordering::Relaxed),
            active_workers: self.active.load(Ordering::Relaxed),
            time: self.time.clone(),
        }
    }
}

/// [`Reconciles`] at one moment.
///
/// Where it may surprise: `time` is the live histogram, not a copy: it goes on counting after
/// the other fields were read, so while workers are busy its count and the sum of `results`
/// may differ by the reconciles that finished in between.
#[derive(Debug, Clone)]
pub struct ReconcileStats {
    /// Reconciles finished, by result, in [`ReconcileResult::ALL`] order.
    pub results: [u64; 4],
    /// Reconciles that panicked in the host's worker (also counted as errors).
    pub panics: u64,
    /// Workers reconciling now.
    pub active_workers: u64,
    /// How long reconciles took, in [`RECONCILE_TIME_BUCKETS`].
    pub time: Histogram,
}

impl ReconcileStats {
    /// Reconciles finished with `result`.
    pub fn count(&self, result: ReconcileResult) -> u64 {
        self.results[result as usize]
    }
}
/// Reconcile counters and the concurrency check.
#[derive(Debug, Default)]
pub struct Counters {
    /// Reconciles started.
    pub started: AtomicU64,
    /// Times a key was found already running when a worker started it. Must stay 0.
    pub concurrent_same_key: AtomicU64,
    /// Failed reconciles (errors, traps and worker panics) by [`Blame`], in `Blame as usize`
    /// order.
    errors: [AtomicU64; 3],
    /// Worker panics caught: the worker carried on and the key was retried.
    pub worker_panics: AtomicU64,
    /// Reconciles cancelled in flight because the guest's gate closed (its shard went to
    /// another replica): queued again, not failures.
    pub cancelled: AtomicU64,
    /// What controller-runtime counts per controller: results, reconcile time, panics during a
    /// reconcile, busy workers.
    pub reconciles: Reconciles,
    /// CPU the guest's calls used (reconcile and map), in nanoseconds.
    cpu_nanos: AtomicU64,
}

impl Counters {
    /// Failed reconciles blamed on `blame`, over every version of the guest.
    pub fn errors(&self, blame: Blame) -> u64 {
        self.errors[blame as usize].load(Ordering::Relaxed)
    }

    /// CPU the guest's `reconcile` and `map` calls used, over every version of the guest.
    pub fn cpu(&self) -> Duration {
        Duration::from_nanos(self.cpu_nanos.load(Ordering::Relaxed))
    }

    pub(super) fn add_cpu(&self, cpu: Duration) {
        let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        self.cpu_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(super) fn count_error(&self, blame: Blame) {
        self.errors[blame as usize].fetch_add(1, Ordering::Relaxed);
    }
}
