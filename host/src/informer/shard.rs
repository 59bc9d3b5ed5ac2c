//! A server-side shard of a kind: only the objects whose key hashes into a range, selected by
//! the API server itself (KEP-5866, sharded list and watch, alpha in Kubernetes 1.36 behind the
//! `ShardedListAndWatch` feature gate).
//!
//! The hash is 64-bit FNV-1a of the object's uid or namespace, as the API server computes it;
//! [`ShardRange::contains`] computes the same, so a client can tell which range an object is in.
//!
//! An informer's scope names a [`ShardSet`]: one range, or several joined by `||` (a replica
//! holding shards 2 and 7 of 16 watches both in one stream).
//!
//! Where it may surprise:
//! - A server without the gate ignores the selector and answers with every object. The
//!   reflector checks that the server applied it (the list's `shardInfo`) before its first
//!   sync, and refuses to cache anything otherwise, naming the gate.
//! - An empty set is a scope like any other: its informer never asks the server and is synced
//!   at once with nothing in it.

use crate::fnv::Fnv;

/// Why a shard range cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The range is empty or runs past 2^64.
    #[error("shard range [{start:#x}, {end:#x}) is empty or ends past 2^64")]
    Empty {
        /// The inclusive start.
        start: u64,
        /// The exclusive end.
        end: u128,
    },
    /// `index` is not below `count`, or `count` is 0.
    #[error("shard {index} of {count} does not exist")]
    NoSuchShard {
        /// The shard asked for.
        index: u64,
        /// How many there are.
        count: u64,
    },
}

/// What an object's hash is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `metadata.uid`: objects spread evenly, one namespace's over every shard.
    Uid,
    /// `metadata.namespace`: a namespace's objects stay together.
    Namespace,
}

impl ShardKey {
    fn path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }
}

/// The objects whose key's hash is in `[start, end)`, where `end` may be 2^64 (the whole space
/// is `[0, 2^64)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardRange {
    key: ShardKey,
    start: u64,
    end: u128,
}

impl ShardRange {
    /// `[start, end)` over `key`'s hash.
    pub fn new(key: ShardKey, start: u64, end: u128) -> Result<Self, Error> {
        if u128::from(start) >= end || end > 1 << 64 {
            return Err(Error::Empty { start, end });
        }
        Ok(Self { key, start, end })
    }

    /// Shard `index` of `count` equal ranges (the last takes the remainder).
    pub fn nth(key: ShardKey, index: u64, count: u64) -> Result<Self, Error> {
        if count == 0 || index >= count {
            return Err(Error::NoSuchShard { index, count });
        }
        let width = (1u128 << 64) / u128::from(count);
        let start = width * u128::from(index);
        let end = if index + 1 == count {
            1 << 64
        } else {
            start + width
        };
        Self::new(key, start as u64, end)
    }

    /// The `shardSelector` the API server takes for this range. Its bounds must be 16 lowercase
    /// hex digits, but for 2^64, which has 17.
    pub fn selector(&self) -> String {
        let end = if self.end == 1 << 64 {
            "10000000000000000".to_string()
        } else {
            format!("{:016x}", self.end)
        };
        format!(
            "shardRange({}, '0x{:016x}', '0x{end}')",
            self.key.path(),
            self.start
        )
    }

    /// Whether an object with this uid (or namespace, per the key) is in the range.
    pub fn contains(&self, key: &str) -> bool {
        let mut h = Fnv::default();
        h.write(key.as_bytes());
        let hash = u128::from(h.finish());
        u128::from(self.start) <= hash && hash < self.end
    }
}

/// The objects whose key's hash is in any of a set of ranges over one key: what one replica
/// watches of a kind whose keys are split across replicas. Adjacent ranges are merged, so the
/// same objects always make the same set (and the same informer).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShardSet {
    key: ShardKey,
    ranges: Vec<ShardRange>,
}

impl ShardSet {
    /// No object at all.
    pub fn empty(key: ShardKey) -> Self {
        Self {
            key,
            ranges: Vec::new(),
        }
    }

    /// Shards `indices` of `count` equal ranges ([`ShardRange::nth`]), merged where adjacent;
    /// an index past `count` is an error.
    pub fn of(
        key: ShardKey,
        indices: impl IntoIterator<Item = u64>,
        count: u64,
    ) -> Result<Self, Error> {
        let mut nth: Vec<ShardRange> = indices
            .into_iter()
            .map(|i| ShardRange::nth(key, i, count))
            .collect::<Result<_, _>>()?;
        nth.sort_by_key(|r| r.start);
        nth.dedup();
        let mut ranges: Vec<ShardRange> = Vec::with_capacity(nth.len());
        for r in nth {
            match ranges.last_mut() {
                Some(last) if last.end == u128::from(r.start) => last.end = r.end,
                _ => ranges.push(r),
            }
        }
        Ok(Self { key, ranges })
    }

    /// What the hash is taken over.
    pub fn key(&self) -> ShardKey {
        self.key
    }

    /// Whether the set holds no object.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The `shardSelector` for the set: its ranges joined by `||`; `None` when it is empty,
    /// which no selector can say.
    pub fn selector(&self) -> Option<String> {
        (!self.is_empty()).then(|| {
            self.ranges
                .iter()
                .map(ShardRange::selector)
                .collect::<Vec<_>>()
                .join(" || ")
        })
    }

    /// Whether an object with this uid (or namespace, per the key) is in the set.
    pub fn contains(&self, key: &str) -> bool {
        self.ranges.iter().any(|r| r.contains(key))
    }
}

impl From<ShardRange> for ShardSet {
    fn from(range: ShardRange) -> Self {
        Self {
            key: range.key,
            ranges: vec![range],
        }
    }
}

impl std::fmt::Display for ShardSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ranges.is_empty() {
            return f.write_str("none");
        }
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The index of the one of `count` equal ranges ([`ShardRange::nth`]) that `key`'s hash falls
/// in: which shard owns an object, by its uid or namespace.
pub fn index_of(key: &str, count: u64) -> u64 {
    let mut h = Fnv::default();
    h.write(key.as_bytes());
    let count = count.max(1);
    let width = (1u128 << 64) / u128::from(count);
    (u128::from(h.finish()) / width).min(u128::from(count - 1)) as u64
}

impl std::fmt::Display for ShardRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match self.key {
            ShardKey::Uid => "uid",
            ShardKey::Namespace => "namespace",
        };
        write!(f, "{key}:[{:#x},{:#x})", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_what_the_api_server_parses() {
        let halves = [
            ShardRange::nth(ShardKey::Uid, 0, 2).unwrap(),
            ShardRange::nth(ShardKey::Uid, 1, 2).unwrap(),
        ];
        assert_eq!(
            halves[0].selector(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            halves[1].selector(),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            ShardRange::nth(ShardKey::Namespace, 0, 1)
                .unwrap()
                .selector(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            ShardRange::nth(ShardKey::Uid, 1, 4).unwrap().selector(),
            "shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')"
        );
    }

    #[test]
    fn n_shards_cover_every_hash_exactly_once() {
        for count in [1, 2, 3, 7] {
            let shards: Vec<_> = (0..count)
                .map(|i| ShardRange::nth(ShardKey::Uid, i, count).unwrap())
                .collect();
            for uid in (0..500).map(|i| format!("uid-{i}")) {
                let holders = shards.iter().filter(|s| s.contains(&uid)).count();
                assert_eq!(holders, 1, "{uid} in {count} shards");
            }
            assert_eq!(shards[0].start, 0);
            assert_eq!(shards[count as usize - 1].end, 1 << 64);
            for w in shards.windows(2) {
                assert_eq!(u128::from(w[1].start), w[0].end);
            }
        }
    }

    #[test]
    fn a_set_merges_adjacent_ranges_and_joins_the_rest_with_or() {
        let set = ShardSet::of(ShardKey::Uid, [3, 0, 1], 4).unwrap();
        assert_eq!(
            set.selector().unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            ShardSet::of(ShardKey::Uid, [0, 1, 2, 3], 4).unwrap(),
            ShardSet::from(ShardRange::nth(ShardKey::Uid, 0, 1).unwrap()),
            "every shard is the whole space"
        );
        let none = ShardSet::of(ShardKey::Uid, [], 4).unwrap();
        assert!(none.is_empty());
        assert_eq!(none.selector(), None);
        assert_eq!(none, ShardSet::empty(ShardKey::Uid));
        assert!(ShardSet::of(ShardKey::Uid, [4], 4).is_err());
    }

    #[test]
    fn index_of_names_the_one_range_that_contains_the_key() {
        for count in [1u64, 3, 16] {
            for uid in (0..300).map(|i| format!("uid-{i}")) {
                let i = index_of(&uid, count);
                assert!(i < count);
                assert!(
                    ShardRange::nth(ShardKey::Uid, i, count)
                        .unwrap()
                        .contains(&uid),
                    "{uid} of {count}"
                );
                let set = ShardSet::of(ShardKey::Uid, [i], count).unwrap();
                assert!(set.contains(&uid));
            }
        }
    }

    #[test]
    fn empty_ranges_and_missing_shards_are_refused() {
        assert!(ShardRange::new(ShardKey::Uid, 5, 5).is_err());
        assert!(ShardRange::new(ShardKey::Uid, 0, (1 << 64) + 1).is_err());
        assert_eq!(
            ShardRange::nth(ShardKey::Uid, 3, 3),
            Err(Error::NoSuchShard { index: 3, count: 3 })
        );
        assert!(ShardRange::nth(ShardKey::Uid, 0, 0).is_err());
    }
}
