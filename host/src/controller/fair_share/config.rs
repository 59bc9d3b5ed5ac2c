//! How the host shares execution between tenants: the `[fair_share]` settings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// The tenant of the operator's own guests: never throttled, weight from [`Config::weights`]
/// under the key `""` like any other.
pub const OPERATOR: &str = "";

/// How much of its budget a tenant holds at most, in seconds of the budget's rate: with
/// `cpu_budget_ms_per_minute = 6000` (100 ms a second), 1 s of CPU. A tenant starts full, so
/// its first calls spend this much before any hold.
pub const BANKED_SECONDS: f64 = 10.0;

/// What a fresh guest's first calls are assumed to cost, until its own calls are measured.
pub(super) const FIRST_ESTIMATE: Duration = Duration::from_millis(1);

/// How the host shares execution between tenants.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Guest calls that may run at once, host-wide [the number of cores, at least 2]. One
    /// tenant holds at most all but one of them (all of them if there is only one); each
    /// guest's own `workers` bounds its share too.
    ///
    /// Where it may surprise: so a lone busy tenant uses all cores but one. Raise it for
    /// guests that mostly wait on the API server, which hold a slot without using a core.
    pub slots: usize,
    /// Each tenant namespace's weight \[1\]; a tenant of weight 2 gets twice the CPU of a tenant
    /// of weight 1 when both have work. The operator's guests are the tenant `""`.
    pub weights: BTreeMap<String, u32>,
    /// CPU a tenant's guests may use per minute, compile time included, in milliseconds
    /// \[unlimited\]. Over it, the tenant's reconciles wait until the budget refills (it refills
    /// continuously, and holds at most [`BANKED_SECONDS`]' worth), and are never failed for it. Not
    /// applied to the operator's guests.
    pub cpu_budget_ms_per_minute: Option<u64>,
    /// Longest a low-priority key (initial list, resync) waits behind high-priority ones before
    /// it is handed out anyway, in milliseconds [30 000].
    pub low_priority_max_wait_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            slots: std::thread::available_parallelism().map_or(2, |n| n.get().max(2)),
            weights: BTreeMap::new(),
            cpu_budget_ms_per_minute: None,
            low_priority_max_wait_ms: 30_000,
        }
    }
}
