//! What a replica knows of the group, for `/status` and `/metrics`.

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
    /// Stale Leases deleted: replicas gone for several lease durations, shards beyond the count.
    pub collected: u64,
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
    /// Whether this replica holds it, with its gate open.
    ///
    /// Where it may surprise: `owner` is read from the Leases and `here` from the gates, so
    /// for a moment around a hand-over the two may disagree.
    pub here: bool,
}
