//! What a run did, step by step, and where it ended: what plans are generated from and runs are
//! judged by.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::offline::server::{Interfered, Lifecycle, Write};

/// One reconcile of a run.
#[derive(Debug, Clone)]
pub struct Step {
    /// Its writes, answered or refused, in order.
    pub writes: Vec<Write>,
    /// How it ended (as in `expected.yaml`), `crashed` if the host died during it.
    pub outcome: String,
    /// The guest's error or trap message.
    pub message: Option<String>,
    /// What the perturbation did to it.
    pub interfered: Interfered,
    /// The server's objects as it began.
    pub before: BTreeMap<String, Value>,
}

/// A run: its steps and where it ended.
#[derive(Debug, Clone)]
pub struct Run {
    /// The reconciles, in order.
    pub steps: Vec<Step>,
    /// The server's objects at the end.
    pub end: BTreeMap<String, Value>,
    /// How many times each object was created and deleted, changes included.
    pub lifecycle: BTreeMap<String, Lifecycle>,
    /// `None` if every change settled; otherwise the change (0: the start) after which the guest
    /// was still writing, or failing, when the case's `settle` reconciles ran out.
    pub unsettled: Option<usize>,
}
