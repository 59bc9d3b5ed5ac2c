//! The `[replicas]` settings, and what is wrong with them.

use std::time::Duration;

/// How replicas share the guests.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// This replica's name among the others: unique, a DNS label (the pod name).
    pub identity: String,
    /// Where the Leases live (the host's own namespace).
    pub namespace: String,
    /// The prefix of the Leases' names and the value of their `reconciled.dev/replicas` label:
    /// hosts with the same group share guests \[`reconciled`\].
    pub group: String,
    /// How many shards guests are hashed onto \[16\]; 1 is plain leader election.
    pub shards: u32,
    /// How long a holder's claim lasts after its last renewal [15 s].
    pub lease_duration: Duration,
    /// How long after its last successful renewal a holder stops the shard's workers [10 s];
    /// shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// How soon a failed renewal or acquisition is tried again [2 s].
    pub retry_period: Duration,
    /// How long the plan must want a held shard elsewhere before it is handed over [15 s].
    pub rebalance_after: Duration,
    /// A ConfigMap of `namespace` named as the owner of every Lease the group writes, so that
    /// deleting it (uninstalling the release that made it) has the garbage collector delete
    /// the Leases, even when the replicas can no longer \[none\].
    pub lease_owner: Option<String>,
    /// Whether guests of shards held elsewhere stay loaded here \[warm\].
    pub standby: Standby,
}

/// What a replica keeps of the guests whose shard another replica holds.
///
/// Where it may surprise: under `Cold`, guests whose keys are split over every replica
/// (`shard_keys`) and guests rolled out step by step stay loaded anyway: the first run on
/// every replica, and the second must keep its staged revision to resume the rollout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Standby {
    /// Every guest is loaded, compiled and synced on every replica: a takeover needs neither
    /// a compile nor a relist, and every replica holds every guest's cache.
    #[default]
    Warm,
    /// A guest is loaded only where its shard is held: a replica keeps the module's bytes of
    /// the others and no cache for them, and a takeover loads the guest (its compiled artifact
    /// from the disk cache) and syncs its informers before its first reconcile.
    Cold,
}

impl Config {
    /// Defaults (client-go's leader election timings) for `identity` in `namespace`.
    pub fn new(identity: &str, namespace: &str) -> Self {
        Self {
            identity: identity.to_string(),
            namespace: namespace.to_string(),
            group: "reconciled".into(),
            shards: 16,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            rebalance_after: Duration::from_secs(15),
            lease_owner: None,
            standby: Standby::Warm,
        }
    }

    /// How often a held Lease is renewed: a third of its duration, so that a renewal may fail
    /// twice before the renew deadline, and never more often than needed.
    pub fn renew_every(&self) -> Duration {
        (self.lease_duration / 3)
            .min(self.renew_deadline / 2)
            .max(self.retry_period.min(self.renew_deadline / 2))
    }

    /// Checks the timings and names.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| Err(Error::Config(why));
        if crate::names::namespace(&self.identity).is_err() {
            return bad(format!(
                "identity {:?} is not a DNS label (lowercase letters, digits and '-', at most 63); pass --replica-id or set POD_NAME",
                self.identity
            ));
        }
        if crate::names::namespace(&self.group).is_err() {
            return bad(format!("group {:?} is not a DNS label", self.group));
        }
        if self.shards == 0 || self.shards > 1024 {
            return bad(format!("shards = {} (must be 1 to 1024)", self.shards));
        }
        if self.renew_deadline >= self.lease_duration {
            return bad(format!(
                "renew_deadline_ms ({}) must be shorter than lease_duration_ms ({}): a holder must stop before anyone else may start",
                self.renew_deadline.as_millis(),
                self.lease_duration.as_millis()
            ));
        }
        if self.retry_period * 2 > self.renew_deadline {
            return bad(format!(
                "retry_period_ms ({}) must be at most half of renew_deadline_ms ({}), so a failed renewal is retried before the deadline",
                self.retry_period.as_millis(),
                self.renew_deadline.as_millis()
            ));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return bad(
                "lease_duration_ms must be at least 1000 (Leases count whole seconds)".into(),
            );
        }
        Ok(())
    }

    pub(super) fn shard_lease(&self, shard: u32) -> String {
        format!("{}-shard-{shard}", self.group)
    }

    pub(super) fn member_lease(&self) -> String {
        format!("{}-replica-{}", self.group, self.identity)
    }
}

/// Why replicas could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `[replicas]` settings do not hold together.
    #[error("[replicas]: {0}")]
    Config(String),
    /// Another running process holds this replica's identity: it renewed the identity's Lease
    /// while this one watched.
    #[error(
        "replica id {identity:?} is in use by another running process ({other}): it renewed the Lease {namespace}/{lease} while this process watched; give every replica an identity of its own (--replica-id, or POD_NAME as a Deployment sets it), or stop the other process"
    )]
    Duplicate {
        /// The identity both claim.
        identity: String,
        /// The other process, as its instance token names it (`host/pid/random`).
        other: String,
        /// The Leases' namespace.
        namespace: String,
        /// The identity's Lease.
        lease: String,
    },
}
