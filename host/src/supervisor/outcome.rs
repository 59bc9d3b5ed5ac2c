//! What a load came to: loaded, reloaded, staged, unchanged, parked or rejected, and why.

use crate::controller;

/// Why a module was rejected, as the `reason` label of the rejection metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The bytes could not be read or unpacked (for example a bad `.wasm.gz`).
    Unreadable,
    /// Not wasm, or not a component.
    Invalid,
    /// A component of another world.
    WrongWorld,
    /// `describe()` trapped, timed out or returned something malformed.
    Describe,
    /// The declaration exceeds the grant.
    Grant,
    /// An informer only the new version reads did not sync.
    Informer,
    /// Its namespace has as many tenant guests serving or loading as the host allows.
    Quota,
    /// Its informers would take its namespace's guests over their cache bytes cap.
    CacheBytes,
    /// The ServiceAccount it acts as may not list and watch what it reads from the cache.
    Access,
    /// The host could not run it (engine trouble): not the module's fault.
    Host,
}

impl Reason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Unreadable => "unreadable",
            Reason::Invalid => "invalid",
            Reason::WrongWorld => "wrong-world",
            Reason::Describe => "describe",
            Reason::Grant => "grant",
            Reason::Informer => "informer",
            Reason::Quota => "quota",
            Reason::CacheBytes => "cache-bytes",
            Reason::Access => "access",
            Reason::Host => "host",
        }
    }
}

/// What [`Supervisor::apply`](crate::supervisor::Supervisor::apply) did.
#[derive(Debug, Clone)]
pub enum Applied {
    /// The guest was not running; it is now.
    Loaded {
        /// The module's sha256.
        digest: String,
    },
    /// A new version replaced the serving one.
    Reloaded {
        /// The new module's sha256.
        digest: String,
        /// What changed.
        reload: controller::Reload,
    },
    /// A new version was staged beside the serving one, for a progressive rollout: the serving
    /// version keeps every key until the rollout's steps move them.
    Staged {
        /// The new module's sha256.
        digest: String,
    },
    /// These bytes are already serving, or were already rejected: nothing done.
    Unchanged,
    /// Not loaded: under cold standby another replica holds the guest's shard. The bytes are
    /// kept, unchecked, and load if this replica takes the shard; a version that served here
    /// is stopped.
    Parked,
    /// The module was rejected; whatever served before still serves.
    Rejected {
        /// The category.
        reason: Reason,
        /// The full message.
        message: String,
    },
}

impl Applied {
    /// Whether the guest settled from the offer: it serves those bytes (or a rollout stages
    /// them), they already served or were already rejected for good, or they are parked until
    /// a takeover. A rejection that may pass next time did not settle it.
    pub(crate) fn settled(&self) -> bool {
        matches!(
            self,
            Applied::Loaded { .. }
                | Applied::Reloaded { .. }
                | Applied::Staged { .. }
                | Applied::Unchanged
                | Applied::Parked
        )
    }
}
