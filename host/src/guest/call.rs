//! What a call into a guest can come to: its failure, whose doing that was, and where its time
//! went.

use std::time::Duration;

/// Who a failed call is to be blamed on, decided from where its time and its failure were.
///
/// Where it may surprise: a deadline is not always the guest's doing. The wall clock also runs
/// while the guest waits in a host import, so a reconcile that spent its deadline waiting on a
/// slow API server is blamed on the cluster, and one that spent it waiting for the cache to
/// catch up (read-your-writes) on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Blame {
    /// The guest's own code: a trap, a panic, a loop, its memory cap, or an error it returned
    /// that the API server did not cause.
    Guest,
    /// The host: its time went to the host's own waits (read-your-writes), or the host failed
    /// (a worker that panicked, the engine).
    Host,
    /// The API server: the time went to waiting on it, or the failure came from it (no
    /// connection, 5xx, 429, a server-side timeout).
    Cluster,
}

impl Blame {
    /// Every blame, in label order.
    pub const ALL: [Blame; 3] = [Blame::Guest, Blame::Host, Blame::Cluster];

    /// The metric label and the word in logs and `/status`.
    pub fn label(self) -> &'static str {
        match self {
            Blame::Guest => "guest",
            Blame::Host => "host",
            Blame::Cluster => "cluster",
        }
    }
}

impl std::fmt::Display for Blame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Where one call's time went, read from its store when it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Wall time of the whole call, instantiation included.
    pub elapsed: Duration,
    /// Time spent waiting on the API server inside host imports.
    pub api_wait: Duration,
    /// Time spent in the host's own waits inside host imports (read-your-writes).
    pub host_wait: Duration,
    /// Whether the last API request of the call failed because of the cluster.
    pub cluster_failed: bool,
    /// The most linear memory the call held at once (see [`Limiter::peak`](super::imports::Limiter::peak)).
    pub memory_bytes: usize,
    /// CPU time the call used on the host's threads: the guest's code, instantiation, and the
    /// host's own work inside its imports (decoding, copying), but not the time an import
    /// spent waiting. See [`thread_cpu`](super::thread_cpu) for how it is measured.
    pub cpu: Duration,
}

impl Usage {
    /// Time not spent in host imports' waits: the guest's own code (and instantiation).
    pub fn guest_time(&self) -> Duration {
        self.elapsed
            .saturating_sub(self.api_wait)
            .saturating_sub(self.host_wait)
    }

    /// Blame for a deadline: whoever held most of the time.
    pub(super) fn deadline_blame(&self) -> Blame {
        let guest = self.guest_time();
        if guest >= self.api_wait && guest >= self.host_wait {
            Blame::Guest
        } else if self.api_wait >= self.host_wait {
            Blame::Cluster
        } else {
            Blame::Host
        }
    }
}

/// Why one call into a guest failed. The host and other guests are unaffected; [`CallError::blame`]
/// says whose doing it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The wall deadline passed.
    #[error("deadline of {limit:?} exceeded (blame: {blame})")]
    Deadline {
        /// The deadline.
        limit: Duration,
        /// Where the time went: the guest's code, the host's waits or the API server.
        blame: Blame,
    },
    /// The guest tried to grow its memory past the cap.
    #[error("memory limit of {0} bytes exceeded")]
    Memory(usize),
    /// A trap: panic, unreachable, a host-call limit, a host function refusing.
    #[error("trap: {message}{}", if stderr.is_empty() { String::new() } else { format!(" (guest stderr: {})", stderr.trim()) })]
    Trap {
        /// wasmtime's description, with the guest backtrace if any.
        message: String,
        /// What the guest printed to stderr (a Rust panic message lands here).
        stderr: String,
    },
}

impl CallError {
    /// Whose doing the failure was. Only a deadline can be someone else's: memory and traps
    /// happen in the guest's code (a host import that refuses to go on, as at the host-call
    /// limit, does so because of what the guest asked).
    pub fn blame(&self) -> Blame {
        match self {
            CallError::Deadline { blame, .. } => *blame,
            CallError::Memory(_) | CallError::Trap { .. } => Blame::Guest,
        }
    }
}
