//! Memory attributed to guests: the shared cache's bytes, each informer's split between the
//! guests that read it, and the tenant cap on what one namespace's guests hold.
//!
//! **Split, not counted in full.** An informer read by k guests is attributed `bytes / k` to
//! each (the remainder, a byte at a time, to the first by name), so the shares of all guests sum
//! to exactly what their informers hold, and a namespace's sum is its real part of the cache: a
//! cap on it cannot be dodged, nor charged twice, by sharing. What a guest would cost alone, its
//! informers' bytes in full, is in `/status` and `/metrics` per informer.
//!
//! Where it may surprise:
//! - A share moves when another guest starts or stops reading the same informer, though
//!   nothing this guest did changed; and the bytes are the store's objects (see
//!   [`Store::object_bytes`](crate::informer::store::Store::object_bytes)), not its indexes.
//! - The cap is checked once per load (see `cache_cap`), against the guests serving and the
//!   loads already admitted (see [`Claims`]). Nothing is evicted when a namespace's objects grow past it
//!   later; the metrics show it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::source::Source;
use crate::informer::Informer;

/// One guest's claim on the cache: the informers its serving (or candidate) version reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reader {
    /// The guest.
    pub(super) guest: String,
    /// Its tenant namespace; `None` for an operator's guest, which no cap applies to.
    pub(super) namespace: Option<String>,
    /// Each informer it reads, by identity (its address), with the bytes it holds now.
    pub(super) informers: Vec<(usize, u64)>,
}

impl Reader {
    /// The reader of `informers` for guest `guest` of `source`.
    pub(super) fn new(guest: &str, source: &Source, informers: &[Arc<Informer>]) -> Self {
        Self {
            guest: guest.to_string(),
            namespace: source.tenant_namespace().map(str::to_string),
            informers: informers
                .iter()
                .map(|i| (Arc::as_ptr(i) as usize, i.store().object_bytes() as u64))
                .collect(),
        }
    }
}

/// Each guest's share of the cache: every informer's bytes split evenly between its readers.
/// The shares sum to the bytes of all the informers read, exactly.
pub(super) fn split(readers: &[Reader]) -> BTreeMap<String, u64> {
    let mut by_informer: BTreeMap<usize, (u64, Vec<&str>)> = BTreeMap::new();
    for r in readers {
        for &(id, bytes) in &r.informers {
            let entry = by_informer.entry(id).or_insert((bytes, Vec::new()));
            entry.1.push(&r.guest);
        }
    }
    let mut shares: BTreeMap<String, u64> = readers.iter().map(|r| (r.guest.clone(), 0)).collect();
    for (bytes, mut guests) in by_informer.into_values() {
        guests.sort_unstable();
        guests.dedup();
        let k = guests.len() as u64;
        for (i, g) in guests.into_iter().enumerate() {
            let extra = u64::from((i as u64) < bytes % k);
            *shares.get_mut(g).expect("every reader has a share") += bytes / k + extra;
        }
    }
    shares
}

/// The cache bytes attributed to the guests of tenant namespace `namespace`.
fn namespace_bytes(readers: &[Reader], namespace: &str) -> u64 {
    let shares = split(readers);
    readers
        .iter()
        .filter(|r| r.namespace.as_deref() == Some(namespace))
        .map(|r| shares[&r.guest])
        .sum()
}

/// A load refused because the namespace's guests would hold more of the cache than the cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its informers would bring the cache bytes attributed to namespace {namespace}'s guests to {after} (this guest's share {share}; {before} before it), over the cap of {cap} bytes (tenants.max_cached_bytes_per_namespace); narrow what it reads (a label selector, fewer kinds), remove another guest of {namespace}, or ask the host's operator to raise tenants.max_cached_bytes_per_namespace"
)]
pub(super) struct OverCap {
    /// The tenant namespace.
    pub namespace: String,
    /// Its guests' bytes without the candidate (or with its serving version, for a reload).
    pub before: u64,
    /// With the candidate.
    pub after: u64,
    /// The candidate's share of `after`.
    pub share: u64,
    /// The cap.
    pub cap: u64,
}

/// Whether `candidate` may replace whatever version of it `serving` holds, under a cap of
/// `cap` bytes for its namespace's guests. A guest of no namespace always may.
///
/// Only a load that *adds* bytes over the cap is refused: one whose informers the namespace's
/// guests already read adds nothing and passes, and so does a reload that reads what the
/// serving version did, even if the namespace has grown over the cap since it loaded (the cap
/// is checked at load; nothing is evicted).
pub(super) fn check_cap(serving: &[Reader], candidate: Reader, cap: u64) -> Result<(), OverCap> {
    let Some(namespace) = candidate.namespace.clone() else {
        return Ok(());
    };
    let before = namespace_bytes(serving, &namespace);
    let mut with: Vec<Reader> = serving
        .iter()
        .filter(|r| r.guest != candidate.guest)
        .cloned()
        .collect();
    let guest = candidate.guest.clone();
    with.push(candidate);
    let after = namespace_bytes(&with, &namespace);
    if after > cap && after > before {
        return Err(OverCap {
            share: split(&with)[&guest],
            namespace,
            before,
            after,
            cap,
        });
    }
    Ok(())
}

/// Versions admitted under the cache cap that do not serve yet (a first load, or a reload
/// between its check and its swap), by guest, with what they read. Every check counts them, in
/// place of the guest's serving version, so that two loads of one namespace measured at the
/// same moment cannot each pass the cap without the other.
pub(super) type Claims = BTreeMap<String, (Source, Vec<Arc<Informer>>)>;

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(guest: &str, namespace: Option<&str>, informers: &[(usize, u64)]) -> Reader {
        Reader {
            guest: guest.into(),
            namespace: namespace.map(str::to_string),
            informers: informers.to_vec(),
        }
    }

    #[test]
    fn a_shared_informer_is_split_between_its_readers_and_the_shares_sum_to_the_cache() {
        let readers = [
            reader("a", Some("team-a"), &[(1, 10), (2, 7)]),
            reader("b", Some("team-a"), &[(1, 10)]),
            reader("c", None, &[(1, 10)]),
        ];
        let shares = split(&readers);
        assert_eq!(
            shares["a"],
            4 + 7,
            "a third of 10, the remainder byte first by name"
        );
        assert_eq!(shares["b"], 3);
        assert_eq!(shares["c"], 3);
        assert_eq!(
            shares.values().sum::<u64>(),
            17,
            "what informers 1 and 2 hold"
        );
        assert_eq!(namespace_bytes(&readers, "team-a"), 14);
    }

    #[test]
    fn a_load_that_adds_bytes_over_the_cap_is_refused_saying_the_bytes_the_cap_and_the_setting() {
        let serving = [reader("a", Some("team-a"), &[(1, 600)])];
        let candidate = reader("b", Some("team-a"), &[(2, 500)]);
        let err = check_cap(&serving, candidate, 1000).unwrap_err();
        assert_eq!((err.before, err.after, err.share), (600, 1100, 500));
        let message = err.to_string();
        assert!(
            message.contains("1100")
                && message.contains("1000 bytes")
                && message.contains("tenants.max_cached_bytes_per_namespace"),
            "{message}"
        );
        let small = reader("b", Some("team-a"), &[(2, 400)]);
        assert_eq!(
            check_cap(&serving, small, 1000),
            Ok(()),
            "exactly at the cap"
        );
    }

    #[test]
    fn joining_an_informer_the_namespace_already_reads_adds_nothing_and_passes() {
        let serving = [reader("a", Some("team-a"), &[(1, 1500)])];
        let candidate = reader("b", Some("team-a"), &[(1, 1500)]);
        assert_eq!(
            check_cap(&serving, candidate, 1000),
            Ok(()),
            "already over, not by b"
        );
    }

    #[test]
    fn sharing_with_another_namespace_charges_only_the_share() {
        let serving = [reader("x", Some("team-b"), &[(1, 1000)])];
        let candidate = reader("a", Some("team-a"), &[(1, 1000)]);
        assert_eq!(
            check_cap(&serving, candidate.clone(), 500),
            Ok(()),
            "half of 1000"
        );
        let err = check_cap(&serving, candidate, 499).unwrap_err();
        assert_eq!(err.share, 500);
    }

    #[test]
    fn a_reload_is_measured_against_its_own_serving_version_not_on_top_of_it() {
        let serving = [reader("a", Some("team-a"), &[(1, 800)])];
        let same_scope = reader("a", Some("team-a"), &[(1, 800)]);
        assert_eq!(check_cap(&serving, same_scope, 1000), Ok(()));
        let wider = reader("a", Some("team-a"), &[(1, 800), (2, 300)]);
        let err = check_cap(&serving, wider, 1000).unwrap_err();
        assert_eq!((err.before, err.after), (800, 1100));
    }

    #[test]
    fn an_operators_guest_has_no_cap() {
        let candidate = reader("op", None, &[(1, u64::MAX / 2)]);
        assert_eq!(check_cap(&[], candidate, 1), Ok(()));
    }
}
