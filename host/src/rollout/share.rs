//! Which keys a canary share takes. A key's hash is the 64-bit FNV-1a of its `namespace/name`
//! (the hash function Kubernetes' sharded list and watch, KEP-5866, uses, though over other
//! input and in ranges, so a share is not a server-side shard), folded (high half into low) as
//! a guest's shard is, and its bucket is that modulo [`BUCKETS`]; a share of `p` percent takes
//! the buckets below `p × BUCKETS / 100`.
//!
//! Where it may surprise:
//! - The set only grows as the share grows: every key in the 10% set is in the 50% set, so a
//!   key that moved to the new revision never moves back until a rollback.
//! - The hash is of the name, not the uid: an object deleted and created again under the same
//!   name stays on the side it was on.

use crate::fnv::Fnv;

/// How finely shares are cut: one bucket is 0.01% of the keys.
pub const BUCKETS: u64 = 10_000;

/// The bucket of key `namespace/name` (`name` alone for a cluster-scoped object).
pub fn bucket(namespace: &str, name: &str) -> u64 {
    let mut h = Fnv::default();
    if !namespace.is_empty() {
        h.write(namespace.as_bytes());
        h.write(b"/");
    }
    h.write(name.as_bytes());
    // Folded: FNV-1a mixes the last bytes of a name into the low bits and barely into the high
    // ones, so neither half alone spreads names that differ at the end.
    let folded = h.finish() ^ (h.finish() >> 32);
    folded % BUCKETS
}

/// Whether key `namespace/name` is in a share of `percent` (0 to 100) of the keys.
pub fn in_share(namespace: &str, name: &str, percent: u32) -> bool {
    bucket(namespace, name) < u64::from(percent.min(100)) * BUCKETS / 100
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<(String, String)> {
        (0..5000)
            .map(|i| (format!("ns-{}", i % 7), format!("object-{i}")))
            .collect()
    }

    #[test]
    fn a_share_takes_about_its_percent_of_the_keys() {
        let keys = keys();
        for percent in [1, 10, 50, 90] {
            let taken = keys
                .iter()
                .filter(|(ns, n)| in_share(ns, n, percent))
                .count();
            let want = keys.len() * percent as usize / 100;
            let slack = keys.len() / 50; // 2 points either way, for 5000 keys
            assert!(
                taken.abs_diff(want) <= slack,
                "{percent}%: {taken} of {} keys",
                keys.len()
            );
        }
        assert!(keys.iter().all(|(ns, n)| in_share(ns, n, 100)));
        assert!(!keys.iter().any(|(ns, n)| in_share(ns, n, 0)));
    }

    #[test]
    fn a_larger_share_keeps_every_key_of_a_smaller_one() {
        for (ns, n) in keys() {
            for (small, large) in [(1, 10), (10, 50), (50, 100)] {
                assert!(
                    !in_share(&ns, &n, small) || in_share(&ns, &n, large),
                    "{ns}/{n} left the share going from {small}% to {large}%"
                );
            }
        }
    }

    #[test]
    fn the_bucket_is_the_fnv1a_of_namespace_slash_name() {
        // FNV-1a 64 of "a/b" is 0xe620c3190468cf61, and of "node-1" 0xe696ecc2207879c3, by its
        // definition; pinned so that no change of hasher moves the keys of a rollout under way.
        let fold = |h: u64| (h ^ (h >> 32)) % BUCKETS;
        assert_eq!(bucket("a", "b"), fold(0xe620_c319_0468_cf61));
        assert_eq!(bucket("a", "b"), 7592);
        assert_eq!(bucket("", "node-1"), 8721);
    }
}
