//! Which of the group's Leases are litter: the replica Leases of replicas gone without saying so
//! (killed, their node lost), and shard Leases beyond the shard count (left by a larger
//! `shards` before), each untouched for several lease durations past its expiry.
//!
//! Pure; the elector deletes what this names, each delete guarded by the resourceVersion seen,
//! so a Lease written meanwhile (its replica came back) survives.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::lease::{self, Seen};

/// How many lease durations past its expiry a Lease must lie untouched before it is collected:
/// enough that a replica frozen for a while (a paused VM, a stopped process) and resumed does not
/// find its Lease gone, without leaving litter for long.
pub const AFTER_DURATIONS: u32 = 3;

/// The group's shape, as the collecting replica knows it.
#[derive(Debug, Clone, Copy)]
pub struct Group<'a> {
    /// The Leases' name prefix.
    pub name: &'a str,
    /// The shard count: shard Leases numbered below it are reused, never litter.
    pub shards: u32,
    /// The lease duration, the unit of "several durations" (a released Lease claims only one
    /// second, which would make its litter due at once).
    pub lease_duration: Duration,
    /// This replica's own Lease, never litter to itself.
    pub own: &'a str,
}

/// Leases due for deletion at `now`, as `(name, resourceVersion)`, sorted by name. `seen` is
/// every Lease of the group with when this replica saw its current version.
///
/// Where it may surprise: the clock of a Lease starts when *this* replica first saw its current
/// version, so a replica that has just started collects nothing for several durations.
pub fn due(
    seen: &HashMap<String, (Seen, Instant)>,
    group: Group<'_>,
    now: Instant,
) -> Vec<(String, String)> {
    let shard_prefix = format!("{}-shard-", group.name);
    let replica_prefix = format!("{}-replica-", group.name);
    let grace = group.lease_duration * AFTER_DURATIONS;
    let mut out: Vec<(String, String)> = seen
        .iter()
        .filter(|(name, _)| name.as_str() != group.own)
        .filter(|(name, _)| {
            name.starts_with(&replica_prefix)
                || name
                    .strip_prefix(&shard_prefix)
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n >= group.shards)
        })
        .filter(|(_, (s, at))| {
            let expired = lease::free_at(s, *at).max(*at + group.lease_duration);
            now >= expired + grace
        })
        .map(|(name, (s, _))| (name.clone(), s.resource_version().to_string()))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: Group<'static> = Group {
        name: "reconciled",
        shards: 4,
        lease_duration: Duration::from_secs(15),
        own: "reconciled-replica-me",
    };

    fn seen(name: &str, holder: Option<&str>, seconds: i32) -> Seen {
        let json = serde_json::json!({
            "metadata": {"name": name, "resourceVersion": "7"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds},
        });
        Seen::from_json(json.to_string().as_bytes()).unwrap()
    }

    fn table(
        leases: &[(&str, Option<&str>, i32)],
        at: Instant,
    ) -> HashMap<String, (Seen, Instant)> {
        leases
            .iter()
            .map(|(n, h, s)| (n.to_string(), (seen(n, *h, *s), at)))
            .collect()
    }

    #[test]
    fn a_dead_replicas_lease_is_collected_three_durations_after_it_expired_not_before() {
        let t0 = Instant::now();
        let seen = table(&[("reconciled-replica-gone", Some("gone"), 15)], t0);
        let expired = t0 + Duration::from_secs(15);
        assert!(due(&seen, GROUP, expired + Duration::from_secs(44)).is_empty());
        assert_eq!(
            due(&seen, GROUP, expired + Duration::from_secs(45)),
            vec![("reconciled-replica-gone".to_string(), "7".to_string())]
        );
    }

    #[test]
    fn shard_leases_within_the_count_and_our_own_lease_are_never_litter() {
        let t0 = Instant::now();
        let seen = table(
            &[
                ("reconciled-shard-3", None, 1),
                ("reconciled-replica-me", Some("me"), 15),
                ("reconciled-shard-4", None, 1),
                ("reconciled-shard-x", None, 1),
                ("other-replica-b", Some("b"), 15),
            ],
            t0,
        );
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(
            due(&seen, GROUP, later),
            vec![("reconciled-shard-4".to_string(), "7".to_string())]
        );
    }

    #[test]
    fn a_released_lease_waits_a_whole_lease_duration_before_its_grace_starts() {
        let t0 = Instant::now();
        let seen = table(&[("reconciled-shard-9", None, 1)], t0);
        let grace = GROUP.lease_duration * AFTER_DURATIONS;
        assert!(due(&seen, GROUP, t0 + grace).is_empty());
        assert_eq!(
            due(&seen, GROUP, t0 + GROUP.lease_duration + grace).len(),
            1
        );
    }
}
