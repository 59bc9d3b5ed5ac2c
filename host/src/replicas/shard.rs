//! Shards: a guest's shard is a hash of its name, so that every replica, whatever its version,
//! puts a guest on the same shard without asking anyone.

pub use crate::fnv::Fnv;

/// The shard of guest `name` among `shards` (at least 1).
pub fn shard_of(name: &str, shards: u32) -> u32 {
    let mut h = Fnv::default();
    h.write(name.as_bytes());
    // Folded so that the high bits count too: FNV's low bits alone spread short names poorly.
    let folded = h.finish() ^ (h.finish() >> 32);
    (folded % u64::from(shards.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_of_a_name_never_changes() {
        // Pinned: a change here would move every guest to another shard during a rolling update.
        assert_eq!(
            shard_of("team-a/stamp/stamp", 16),
            shard_of("team-a/stamp/stamp", 16)
        );
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c, "FNV-1a of \"a\"");
    }

    #[test]
    fn one_shard_takes_every_guest_and_zero_shards_is_taken_as_one() {
        assert_eq!(shard_of("x", 1), 0);
        assert_eq!(shard_of("x", 0), 0);
    }

    #[test]
    fn a_hundred_guests_use_every_one_of_sixteen_shards() {
        let mut used = [0u32; 16];
        for g in 0..100 {
            used[shard_of(&format!("guest-{g}"), 16) as usize] += 1;
        }
        assert!(used.iter().all(|n| *n > 0), "{used:?}");
    }
}
