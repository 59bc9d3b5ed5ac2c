//! What the scheduler reports of each tenant: its CPU use and its spells of throttling.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// A tenant's CPU use and throttling, for `/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantUsage {
    /// The tenant namespace; [`OPERATOR`](super::OPERATOR) for the operator's guests.
    pub tenant: String,
    /// Its weight.
    pub weight: u32,
    /// CPU its guests' calls used, measured per call.
    pub cpu: Duration,
    /// Time its guests' modules took to compile (or load precompiled), wall time: compiling
    /// runs on other threads than the calls, and on several at once.
    pub compile: Duration,
    /// CPU plus compile time over the last minute: what the budget is compared with.
    pub used_last_minute: Duration,
    /// The budget per minute, if it has one.
    pub budget_per_minute: Option<Duration>,
    /// Since when it is throttled, if it is: from the call that took it over budget until its
    /// budget has refilled completely, so one spell may hold it several times.
    pub throttled_since: Option<SystemTime>,
    /// Time its reconciles were held for the budget (the budget below zero) so far.
    pub throttled: Duration,
    /// Spells of throttling so far.
    pub throttles: u64,
    /// Workers waiting for a slot.
    pub waiting: usize,
    /// Slots it holds.
    pub running: usize,
}

/// One spell of a tenant's throttling, as the Event about it needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spell {
    /// Counts the tenant's spells from 1: a reporter that saw spell 3 knows a spell 4 is new,
    /// even if it began and ended between two looks.
    pub number: u64,
    /// The guest whose call took the tenant over budget: its ConfigMap gets the Event.
    pub guest: String,
    /// The budget per minute.
    pub budget: Duration,
    /// What the tenant used over the last minute when the spell began.
    pub used: Duration,
    /// When it began.
    pub since: SystemTime,
    /// Whether it is over: the budget has refilled completely. A tenant that hovers at its
    /// budget stays in one spell rather than starting one per call.
    pub ended: bool,
}

/// Every tenant's latest spell of throttling, by tenant.
pub type Spells = BTreeMap<String, Spell>;
