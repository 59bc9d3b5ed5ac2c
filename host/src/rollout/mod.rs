//! Progressive rollout of a new revision of a guest: first a shadow that runs dry beside the
//! serving revision, then a growing share of the keys for real, with an analysis that takes the
//! new revision back on its own when it errs, traps, diverges or slows down.
//!
//! Every part here decides and nothing here acts, so that each rule is a unit test:
//! - [`spec`]: what a rollout asks for, checked;
//! - [`share`]: which keys a canary share takes: a stable hash of `namespace/name`, so that the
//!   set only grows as the share grows, and every replica agrees on it;
//! - [`decide`]: the step machine: from what was observed in the current step, stay, advance,
//!   wait for a person, promote or roll back;
//! - [`latency`]: whether the new revision reconciles more slowly than the serving one, judged
//!   like with like and robust to outliers;
//! - [`progress`]: where a rollout stands, as `/status` and a Reconciler's status show it.

pub mod decide;
pub mod latency;
pub mod progress;
pub mod share;
pub mod spec;
