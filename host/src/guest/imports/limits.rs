//! What one call of a guest may use: its deadline, memory, host calls, bytes and page size.

use std::time::Duration;

/// Limits for one reconcile (or describe, or map) call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline, enforced by epoch interruption [10 s].
    #[serde(with = "millis", rename = "deadline_ms")]
    pub deadline: Duration,
    /// Linear memory cap [64 MiB].
    pub memory_bytes: usize,
    /// Host calls per reconcile [10 000]; one more traps.
    pub host_calls: u32,
    /// Bytes the host may return to the guest per reconcile [64 MiB]; past it, reads answer
    /// `too-large`.
    pub bytes_out: u64,
    /// Largest list page \[500\]; a guest asking for more gets this many.
    pub max_page: u32,
    /// How long a read waits for the cache to reach this guest's own write [5 s].
    #[serde(with = "millis", rename = "read_your_writes_timeout_ms")]
    pub read_your_writes_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            host_calls: 10_000,
            bytes_out: 64 << 20,
            max_page: 500,
            read_your_writes_timeout: Duration::from_secs(5),
        }
    }
}

mod millis {
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        let ms: u64 = serde::Deserialize::deserialize(d)?;
        Ok(Duration::from_millis(ms))
    }
}
