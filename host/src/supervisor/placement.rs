//! Where the supervisor's guests reconcile when the host shares them with other replicas: each
//! guest's gate is its shard's, and the replicas learn which guests exist so that they balance
//! shards by guests (see [`crate::replicas`]).

use super::*;
use crate::controller::gate::Gate;

impl Supervisor {
    /// The gate `name`'s reconciles pass through: its shard's among replicas, else one of its
    /// own that stays open.
    pub(super) fn gate_for(&self, name: &str) -> Arc<Gate> {
        match &self.options.replicas {
            Some(r) => r.gate_for(name),
            None => Gate::open(),
        }
    }

    /// Tells the replicas which guests exist, for balancing shards by guests.
    pub(super) fn publish_guests(&self) {
        if let Some(r) = &self.options.replicas {
            r.set_guests(self.names());
        }
    }

    /// The replicas this host shares its guests with, if any.
    pub fn replicas(&self) -> Option<&Arc<Replicas>> {
        self.options.replicas.as_ref()
    }
}
