//! Counters per guest, for status and metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters per guest, for status and metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Reconciles that returned `Ok`.
    pub reconciles_ok: AtomicU64,
    /// Reconciles that returned a WIT error, or that a deadline the cluster or the host caused
    /// cut off (a call that hung on the API server).
    pub reconciles_failed: AtomicU64,
    /// Reconciles that trapped by the guest's own fault (a panic, its deadline, memory or
    /// host-call limit).
    pub traps: AtomicU64,
    /// Uncached API reads (the `api` interface).
    pub uncached_reads: AtomicU64,
    /// Writes sent to the API server.
    pub writes: AtomicU64,
    /// The most linear memory one call (a reconcile or a `map`) reached, over all its memories:
    /// see [`Limiter::peak`](super::Limiter::peak).
    pub peak_memory_bytes: AtomicU64,
}

impl Metrics {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
