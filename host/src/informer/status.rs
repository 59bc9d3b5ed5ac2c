//! An informer's health and figures: its state and why, its totals, how current its cache is.

use std::time::Duration;

/// Why an informer is not (yet) usable.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SyncError {
    /// RBAC denies list or watch; the message names the rule to add.
    #[error("cache not synced: {0}")]
    Forbidden(String),
    /// The kind is not served (missing CRD?).
    #[error("cache not synced: {0}")]
    KindNotFound(String),
    /// Still syncing when the wait ended.
    #[error("cache not synced after {after:?}: {last}")]
    Timeout {
        /// How long we waited.
        after: Duration,
        /// The last status seen.
        last: String,
    },
}

/// An informer's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Discovery, preflight or the initial list is under way.
    Syncing,
    /// The cache holds the initial list and is watching.
    Synced,
    /// RBAC denies list or watch, or the scope names namespaces and the kind is
    /// cluster-scoped (such an informer never watches anything).
    Forbidden,
    /// The kind is not served.
    KindNotFound,
    /// Synced, but a watch is failing: reads are served and may be stale (see
    /// [`Informer::staleness`](super::Informer::staleness)). It turns back into `Synced` by
    /// itself once the watch is open again, which for an unreachable server is within about a
    /// second of it answering.
    Degraded,
}

impl State {
    /// Whether the cache holds the initial list (Degraded included: reads may be stale, but
    /// they are served).
    pub fn is_synced(&self) -> bool {
        matches!(self, State::Synced | State::Degraded)
    }
}

/// State plus the reason, for readiness, metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The state.
    pub state: State,
    /// Why, when the state is not `Synced` (the latest error of a failing watch, or the rule to
    /// add); `None` when it is: a past error is in the log, not here.
    pub message: Option<String>,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => write!(f, "{:?}: {m}", self.state),
            None => write!(f, "{:?}", self.state),
        }
    }
}

/// Totals over an informer's reflectors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// LIST requests (pages).
    pub lists: u64,
    /// Relists after the initial sync.
    pub relists: u64,
    /// Watches opened.
    pub watches: u64,
    /// Initial syncs done through WatchList.
    pub watch_list_syncs: u64,
    /// Watch events received.
    pub events: u64,
    /// Objects dropped as unparseable.
    pub bad_objects: u64,
    /// LIST pages and watch events read as protobuf.
    pub protobuf_reads: u64,
    /// Reflectors that switched to JSON after a protobuf answer they could not read.
    pub protobuf_fallbacks: u64,
    /// The highest resourceVersion at which a reflector finished its first sync.
    pub initial_sync_rv: u64,
}

/// How current an informer's cache is, from [`Informer::staleness`](super::Informer::staleness).
///
/// Where it may surprise: neither figure alone says "stale". A quiet kind on a healthy watch is
/// silent between bookmarks (about a minute apart) and its resourceVersion stays at its last
/// change while the cache is perfectly current; a cut-off informer's silence grows from the
/// moment it was cut off. Read `silent_for` against the bookmark cadence and the informer's
/// [`State`], and compare `resource_version` with a resourceVersion from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staleness {
    /// How long since the API server last showed a sign of life for this informer: a watch
    /// opened, a watch event or bookmark, or a completed sync. With one watch per namespace, the
    /// most silent watch counts. `None` until every watch has heard from the server once.
    ///
    /// Named for what it measures, the server's silence, rather than the age of the data: an
    /// object that has not changed for an hour is not an hour stale.
    pub silent_for: Option<Duration>,
    /// The highest resourceVersion applied to the store, over all namespaces (0 before the
    /// first): see [`Store::resource_version`](super::store::Store::resource_version).
    pub resource_version: u64,
}
