//! What one scrape of `/metrics` shows, gathered by the supervisor when Prometheus asks.

use std::time::Duration;

use crate::controller::Snapshot;
use crate::controller::fair_share::TenantUsage;
use crate::informer::{Staleness, Stats};
use crate::ops::status::GuestMemory;

use super::process::Process;

/// Everything one scrape shows, gathered by the supervisor; [`encode`](fn@super::encode) renders it.
#[derive(Debug, Default)]
pub struct Scrape {
    /// Every guest configured or delivered, loaded or not.
    pub guests: Vec<Guest>,
    /// Guests unloaded since the host started.
    pub unloads: u64,
    /// Every informer running.
    pub informers: Vec<Informer>,
    /// The host process, if `/proc` could be read.
    pub process: Option<Process>,
    /// Each tenant's CPU and throttling.
    pub tenants: Vec<TenantUsage>,
    /// This replica among others, for a host that shares its guests.
    pub replicas: Option<crate::replicas::Snapshot>,
}

/// One guest in a [`Scrape`].
#[derive(Debug)]
pub struct Guest {
    /// The guest's name: `controller`, `name` or `guest` in the labels.
    pub name: String,
    /// Where its module comes from (`file …`, `configmap ns/name key k`).
    pub source: String,
    /// Versions swapped in (first load and reloads).
    pub loads: u64,
    /// Modules rejected, by reason label.
    pub rejections: Vec<(&'static str, u64)>,
    /// How long its last successful load took, from bytes to serving.
    pub last_load: Option<Duration>,
    /// Its controller, when a version serves; `None` leaves it out of every family but
    /// `reconciled_guest`, `reconciled_guest_serving` and the module families.
    pub controller: Option<Snapshot>,
    /// What it holds in memory, when a version serves (see `ops/metrics/memory.rs`).
    pub memory: Option<GuestMemory>,
    /// Its latest step-by-step rollout, if it has had one.
    pub rollout: Option<crate::rollout::progress::Progress>,
}

/// One informer in a [`Scrape`].
#[derive(Debug)]
pub struct Informer {
    /// `group/version/Kind` (`v1/ConfigMap` for core kinds).
    pub kind: String,
    /// Its scope: namespaces, selectors.
    pub scope: String,
    /// Requests and events so far.
    pub stats: Stats,
    /// Whether its cache has synced.
    pub synced: bool,
    /// How fresh it is.
    pub staleness: Staleness,
    /// Objects in its cache.
    pub objects: usize,
    /// Bytes its objects hold.
    pub cached_bytes: u64,
}
