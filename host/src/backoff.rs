//! Exponential backoff with jitter, reset after a healthy stretch (client-go's reflector policy).

use std::time::Duration;

use tokio::time::Instant;

/// Exponential backoff: each failure doubles the delay up to a cap; a stretch of health without
/// failures resets it.
///
/// Defaults are client-go's reflector values: 800 ms initial, ×2, capped at 30 s, jitter up to
/// +100 %, reset after 2 minutes without a failure. Jitter matters: a restarted apiserver would
/// otherwise see every client come back in the same millisecond.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    reset_after: Duration,
    jitter: f64,
    next: Duration,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            1.0,
        )
    }
}

impl Backoff {
    /// A backoff from `initial` doubling to `cap`, with up to `jitter × delay` added at random,
    /// that forgets past failures after `reset_after` without one.
    pub fn new(initial: Duration, cap: Duration, reset_after: Duration, jitter: f64) -> Self {
        Self {
            initial,
            cap,
            reset_after,
            jitter,
            next: initial,
            last_failure: None,
        }
    }

    /// Records a failure and returns how long to wait before retrying.
    ///
    /// The result never exceeds the cap, jitter included.
    pub fn failure(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|t| now.duration_since(t) >= self.reset_after)
        {
            self.next = self.initial;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.cap);
        base.mul_f64(1.0 + self.jitter * fastrand::f64())
            .min(self.cap)
    }

    /// Forgets all failures at once (for example after a successful sync).
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.last_failure = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_the_cap_and_resets_after_a_healthy_stretch() {
        let mut b = Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            0.0,
        );
        let delays: Vec<u64> = (0..8).map(|_| b.failure().as_millis() as u64).collect();
        assert_eq!(
            delays,
            [800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000]
        );
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(
            b.failure(),
            Duration::from_secs(30),
            "119 s is not yet healthy long enough"
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.failure(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_bounds() {
        let mut b = Backoff::default();
        for _ in 0..50 {
            let first = b.failure();
            assert!(
                first >= Duration::from_millis(800) && first <= Duration::from_millis(1600),
                "{first:?}"
            );
            b.reset();
        }
        for _ in 0..20 {
            assert!(b.failure() <= Duration::from_secs(30));
        }
    }
}
