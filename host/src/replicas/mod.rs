//! Replicas: several hosts share the guests between them through `coordination.k8s.io` Leases.
//!
//! Every guest hashes onto one of a fixed number of shards ([`shard::shard_of`]); each shard is
//! one Lease, `<group>-shard-<n>`, in the host's namespace, and each replica announces itself
//! with a Lease of its own, `<group>-replica-<identity>`. Every replica loads every guest (its
//! module compiled, its informers synced), but a guest's reconciles run only where its shard's
//! Lease is held: its [`Gate`] is open there and closed everywhere else. Which replica should
//! hold which shard is computed by each replica from the same Leases ([`assignment`]), balanced
//! by guests; the Leases alone decide who does.
//!
//! Safety, and the margins it rests on:
//! - A replica opens a shard's gate only after a write of its Lease succeeded, and closes it
//!   (cancelling reconciles in flight) when `renew_deadline` has passed since the *sending* of
//!   the last write that succeeded, whether or not the API server answers meanwhile: a
//!   watchdog task does it, on a timer of its own.
//! - Another replica may take the shard only once `lease_duration` has passed since it *saw*
//!   that write, which is later than it was sent. So the holder stops at least
//!   `lease_duration - renew_deadline` (5 s by default) before anyone else may start. That
//!   margin absorbs clock-rate differences between the machines (tiny), a write already sent
//!   when the gate closed (the API server answers within it or the request times out), and a
//!   reconcile's cancellation (at its next await; guests yield every 5 ms).
//! - Every write is guarded by the resourceVersion read: of two replicas racing for a free
//!   shard, one wins.
//!
//! Where it may surprise:
//! - Lease writes per second are `(shards + replicas) / renew interval`, independent of the
//!   number of guests; the renew interval is a third of the lease duration (5 s by default),
//!   not the retry period, which paces only retries after a failed renew.
//! - Two processes given the same identity would each believe they hold that identity's
//!   shards. Identities must be unique: the pod name is (`POD_NAME`).
//! - A shard moves on its own only when the plan has wanted it elsewhere for
//!   `rebalance_after`, so a replica joining takes its share after that long, not at once.

pub mod assignment;
mod decide;
mod elector;
pub mod identity;
pub mod lease;
pub mod shard;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::controller::gate::Gate;
use crate::informer::{self, Informer, InformerKey, Scope};
use crate::selector::LabelSelector;

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

    fn shard_lease(&self, shard: u32) -> String {
        format!("{}-shard-{shard}", self.group)
    }

    fn member_lease(&self) -> String {
        format!("{}-replica-{}", self.group, self.identity)
    }
}

/// Why replicas could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `[replicas]` settings do not hold together.
    #[error("[replicas]: {0}")]
    Config(String),
}

/// One shard as this replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    /// The shard.
    pub shard: u32,
    /// Who holds its Lease now (`None`: nobody, or expired).
    pub holder: Option<String>,
    /// Who the plan wants to hold it.
    pub planned: Option<String>,
    /// Guests on it.
    pub guests: u32,
}

/// What this replica knows, for `/status` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// This replica's identity.
    pub identity: String,
    /// The Leases' namespace.
    pub namespace: String,
    /// Replicas alive, this one included, sorted.
    pub members: Vec<String>,
    /// Every shard.
    pub shards: Vec<ShardView>,
    /// Shards this replica holds, with its gate open.
    pub held: Vec<u32>,
    /// Shards taken (a Lease acquired).
    pub acquired: u64,
    /// Shards lost: the renew deadline passed, or another replica took the Lease.
    pub lost: u64,
    /// Shards handed over on purpose (rebalance, shutdown).
    pub released: u64,
    /// Renewals that failed (each retried until the deadline).
    pub renew_failures: u64,
    /// Lease writes made (creates, updates, deletes), successful or not.
    pub writes: u64,
    /// The last Lease write the API server forbade, until a write next succeeds.
    pub forbidden: Option<String>,
}

/// Where a guest runs: its shard, and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The guest's shard.
    pub shard: u32,
    /// The replica holding it now, if any.
    pub owner: Option<String>,
}

#[derive(Debug)]
struct Held {
    lease: k8s_openapi::api::coordination::v1::Lease,
    /// When the gate must close unless renewed: the sending of the last successful write plus
    /// the renew deadline.
    deadline: Instant,
    next_renew: Instant,
}

#[derive(Debug, Default)]
struct State {
    held: BTreeMap<u32, Held>,
    snapshot: Snapshot,
}

struct Inner {
    config: Config,
    gates: Vec<Arc<Gate>>,
    state: Mutex<State>,
    guests: watch::Sender<Vec<String>>,
    writer: lease::Writer,
    informer: Arc<Informer>,
}

impl Inner {
    /// Gives up shard `shard` locally: the gate closes (cancelling reconciles in flight) and
    /// the shard leaves `held`. Returns the Lease as last written, if it was held.
    fn drop_shard(&self, shard: u32, why: String, lost: bool) -> Option<Held> {
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

/// This replica's part in a group of replicas. Dropping it stops its tasks without releasing
/// anything; [`Replicas::shutdown`] hands the shards over at once.
pub struct Replicas {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

impl Replicas {
    /// Joins the group: watches its Leases, and starts taking, renewing and handing over shards.
    /// Every gate starts closed. Must be called inside a tokio runtime.
    pub fn start(client: kube::Client, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let selector = LabelSelector::parse(&format!("{}={}", lease::GROUP_LABEL, config.group))
            .map_err(|e| Error::Config(format!("group {:?}: {e}", config.group)))?;
        let key = InformerKey::new(
            "coordination.k8s.io",
            "v1",
            "Lease",
            Scope {
                labels: selector,
                ..Scope::namespace(&config.namespace)
            },
        );
        let informer = Informer::start(client.clone(), key, informer::Options::default());
        let writer = lease::Writer::new(
            client,
            &config.namespace,
            &config.group,
            &config.identity,
            config.lease_duration,
            config.retry_period,
        );
        let gates = (0..config.shards)
            .map(|s| Gate::closed(format!("shard {s} is not held by this replica")))
            .collect();
        let inner = Arc::new(Inner {
            gates,
            state: Mutex::new(State {
                held: BTreeMap::new(),
                snapshot: Snapshot {
                    identity: config.identity.clone(),
                    namespace: config.namespace.clone(),
                    ..Snapshot::default()
                },
            }),
            guests: watch::Sender::new(Vec::new()),
            writer,
            informer,
            config,
        });
        tracing::info!(identity = %inner.config.identity, namespace = %inner.config.namespace, shards = inner.config.shards, lease_duration = ?inner.config.lease_duration, renew_deadline = ?inner.config.renew_deadline, "joining the replicas: guests run where their shard's Lease is held");
        let tasks = vec![
            tokio::spawn(elector::elect(inner.clone())).abort_handle(),
            tokio::spawn(elector::watchdog(inner.clone())).abort_handle(),
        ];
        Ok(Self {
            inner,
            tasks: Mutex::new(tasks),
        })
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The shard of guest `name`.
    pub fn shard_of(&self, name: &str) -> u32 {
        shard::shard_of(name, self.inner.config.shards)
    }

    /// The gate of guest `name`'s shard, shared by every guest on it.
    pub fn gate_for(&self, name: &str) -> Arc<Gate> {
        self.inner.gates[self.shard_of(name) as usize].clone()
    }

    /// Tells the replicas which guests exist, so that shards are balanced by guests. Every
    /// replica should be told the same names (it is, when each loads every guest).
    pub fn set_guests(&self, mut names: Vec<String>) {
        names.sort();
        names.dedup();
        self.inner.guests.send_if_modified(|g| {
            let changed = *g != names;
            *g = names;
            changed
        });
    }

    /// Where guest `name` runs.
    pub fn placement(&self, name: &str) -> Placement {
        let shard = self.shard_of(name);
        let state = self.inner.state.lock().unwrap();
        let owner = state
            .snapshot
            .shards
            .get(shard as usize)
            .and_then(|s| s.holder.clone());
        Placement { shard, owner }
    }

    /// Why this replica cannot take part, if it cannot: its Lease informer has not synced
    /// (forbidden, with the RBAC rule to add), or the API server forbade its last Lease write.
    /// Passing trouble (a write that timed out) is not a problem: renewals retry it.
    pub fn problem(&self) -> Option<String> {
        let ns = &self.inner.config.namespace;
        let st = self.inner.informer.status();
        if !st.state.is_synced() {
            return Some(format!("replicas: the Leases in namespace {ns}: {st}"));
        }
        let state = self.inner.state.lock().unwrap();
        state.snapshot.forbidden.as_ref().map(|e| {
            format!(
                "replicas: {e}; the host needs get, list, watch, create, update and delete on coordination.k8s.io leases in namespace {ns} (see deploy/reconciled.yaml)"
            )
        })
    }

    /// What this replica knows now.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.inner.state.lock().unwrap();
        let mut s = state.snapshot.clone();
        s.held = state.held.keys().copied().collect();
        s
    }

    /// Hands every shard over at once, for a quick rolling update: stops taking shards, closes
    /// every gate (cancelling reconciles in flight), waits up to a second for them to end, then
    /// releases each Lease it holds and deletes its own, so the others take over within about a
    /// second instead of a lease duration. A shard whose reconciles did not end in time is not
    /// released: it expires instead, which is slower but safe.
    pub async fn shutdown(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
        elector::hand_over(&self.inner).await;
    }
}
