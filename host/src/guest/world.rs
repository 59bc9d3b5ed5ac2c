//! Where a guest's clocks and randomness come from (the host's, or fixed ones that make a call
//! repeatable: `reconciled test` and `reconciled replay`), and the environment it sees.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

/// How far every read of a fixed clock moves it on: time passes, as a guest measuring a loop
/// expects, but by the same amount on every run.
const TICK: Duration = Duration::from_micros(1);

/// A guest's view of the world: time and chance, and the environment variables it sees.
///
/// Where it may surprise: [`Clock::Fixed`] fixes what the *guest* sees. The host's own
/// deadlines, backoffs and timestamps stay on the real clock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct World {
    /// Where its time and randomness come from.
    pub clock: Clock,
    /// Environment variables every call sees, such as `RECONCILED_REPLICA` (the replica's
    /// identity, which a guest may log or record); empty by default, as the host grants no
    /// environment of its own.
    pub environment: Arc<[(String, String)]>,
}

/// Where a guest's time and randomness come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clock {
    /// The host's clocks and a cryptographic random source.
    #[default]
    Real,
    /// Every call starts at `start`; each clock read moves time on by a microsecond; random
    /// bytes come from a generator seeded with `seed`. Two calls with the same imports and
    /// answers then see the same times and the same bytes.
    Fixed {
        /// The wall-clock time a call starts at, since the Unix epoch.
        start: Duration,
        /// The seed of both random sources.
        seed: u64,
    },
}

impl World {
    /// A world with fixed clocks starting at `start`, and no environment.
    pub fn fixed(start: SystemTime, seed: u64) -> Self {
        let clock = Clock::Fixed {
            start: start
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
            seed,
        };
        World {
            clock,
            environment: Arc::default(),
        }
    }

    /// The host's clocks, and `environment`.
    pub fn real(environment: &[(String, String)]) -> Self {
        World {
            clock: Clock::Real,
            environment: environment.into(),
        }
    }

    /// Sets up one call's WASI context for this world.
    pub(crate) fn apply(&self, wasi: &mut WasiCtxBuilder) {
        if let Clock::Fixed { start, seed } = self.clock {
            let ticks = Arc::new(AtomicU64::new(0));
            wasi.wall_clock(Wall {
                start,
                ticks: ticks.clone(),
            });
            wasi.monotonic_clock(Monotonic { ticks });
            wasi.secure_random(StdRng::seed_from_u64(seed));
            wasi.insecure_random(StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15));
            wasi.insecure_random_seed(u128::from(seed));
        }
        for (k, v) in self.environment.iter() {
            wasi.env(k, v);
        }
    }

    /// The seed of a recorded call's random bytes: this world's own when fixed; otherwise a
    /// fresh one, whose generator replaces the operating system's source for this call, so
    /// that a replay can give the guest the same bytes.
    pub(crate) fn recording_seed(&self, wasi: &mut WasiCtxBuilder) -> u64 {
        match self.clock {
            Clock::Fixed { seed, .. } => seed,
            Clock::Real => {
                let seed = fastrand::u64(..);
                wasi.secure_random(StdRng::seed_from_u64(seed));
                wasi.insecure_random(StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15));
                // Rust's std seeds its HashMaps from this: a replay must see the same.
                wasi.insecure_random_seed(u128::from(seed));
                seed
            }
        }
    }
}

/// The elapsed time after one more read.
fn tick(ticks: &AtomicU64) -> Duration {
    TICK * (ticks.fetch_add(1, Ordering::Relaxed) as u32).saturating_add(1)
}

struct Wall {
    start: Duration,
    ticks: Arc<AtomicU64>,
}

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        TICK
    }

    fn now(&self) -> Duration {
        self.start + tick(&self.ticks)
    }
}

struct Monotonic {
    ticks: Arc<AtomicU64>,
}

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        TICK.as_nanos() as u64
    }

    fn now(&self) -> u64 {
        tick(&self.ticks).as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_clocks_move_on_by_a_tick_per_read_from_the_same_start() {
        let ticks = Arc::new(AtomicU64::new(0));
        let wall = Wall {
            start: Duration::from_secs(100),
            ticks: ticks.clone(),
        };
        let mono = Monotonic { ticks };
        assert_eq!(wall.now(), Duration::from_secs(100) + TICK);
        assert_eq!(mono.now(), 2 * TICK.as_nanos() as u64);
        assert_eq!(wall.now(), Duration::from_secs(100) + 3 * TICK);
    }
}
