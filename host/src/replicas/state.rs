//! The state a replica's tasks share: its gates, the shards it holds, and its Lease writer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use crate::controller::gate::Gate;
use crate::informer::Informer;

use super::config::Config;
use super::lease;
use super::snapshot::Snapshot;

#[derive(Debug)]
pub(super) struct Held {
    pub(super) lease: k8s_openapi::api::coordination::v1::Lease,
    /// When the gate must close unless renewed: the sending of the last successful write plus
    /// the renew deadline.
    pub(super) deadline: Instant,
    pub(super) next_renew: Instant,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) held: BTreeMap<u32, Held>,
    pub(super) snapshot: Snapshot,
}

pub(super) struct Inner {
    pub(super) config: Config,
    pub(super) gates: Vec<Arc<Gate>>,
    pub(super) state: Mutex<State>,
    pub(super) guests: watch::Sender<Vec<String>>,
    pub(super) writer: lease::Writer,
    pub(super) informer: Arc<Informer>,
}

impl Inner {
    /// Gives up shard `shard` locally: the gate closes (cancelling reconciles in flight) and
    /// the shard leaves `held`. Returns the Lease as last written, if it was held.
    pub(super) fn drop_shard(&self, shard: u32, why: String, lost: bool) -> Option<Held> {
        let held = {
            let mut state = self.state.lock().unwrap();
            let held = state.held.remove(&shard)?;
            if lost {
                state.snapshot.lost += 1;
            }
            held
        };
        self.gates[shard as usize].close(why.clone());
        if lost {
            tracing::warn!(
                shard,
                "shard lost: {why}; its guests' reconciles stopped here"
            );
        }
        Some(held)
    }
}
