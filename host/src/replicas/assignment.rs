//! Assignment: which replica should hold which shard, computed by every replica from what all of
//! them can see (the replicas alive, the guests per shard, the Leases' holders), so that they
//! agree without talking to each other.
//!
//! Balanced by guests, not by shards: with 30 guests hashed onto 16 shards, some shards hold 4
//! guests and some none, and an even split of shards could leave one replica three times the
//! work of another. Sticky: a shard stays with a live holder as long as every replica's load
//! stays within a band around the mean, so a guest added or a replica's brief hiccup moves
//! nothing; only a plan outside the band is replaced by a fresh one.
//!
//! Where it may surprise: the plan is what replicas *want*; the Leases decide who *holds*. Two
//! replicas that momentarily disagree (one has not seen a guest yet) never both run a shard,
//! since a shard changes hands only through its Lease, and the elector only lets go of a shard
//! after the plan has wanted it elsewhere for a while.

/// Everything the plan depends on; every replica sees the same, give or take a moment.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// The replicas alive, by identity; order does not matter.
    pub members: &'a [String],
    /// Guests per shard, indexed by shard.
    pub weights: &'a [u32],
    /// Each shard's holder now, if it is held by a live replica.
    pub holders: &'a [Option<String>],
    /// Whether some guest's keys are spread over every shard: each shard then holds an equal
    /// part of them, and a holding is balanced only if every replica holds as many shards as
    /// another, give or take one.
    pub spread: bool,
}

/// How far a replica's load may stray from the mean (as a fraction of it) before the plan is
/// redone from scratch.
const BAND: f64 = 0.25;

/// The replica each shard should go to, indexed by shard; empty without members.
pub fn plan(input: &Input<'_>) -> Vec<String> {
    let mut members: Vec<&str> = input.members.iter().map(String::as_str).collect();
    members.sort_unstable();
    members.dedup();
    if members.is_empty() {
        return Vec::new();
    }
    let sticky = place(&members, input.weights, Some(input.holders));
    if balanced(&members, input.weights, &sticky) && (!input.spread || even(&members, &sticky)) {
        return sticky;
    }
    place(&members, input.weights, None)
}

/// Places every shard: first those whose holder is a member (when `holders` is given), then the
/// rest, heaviest first, each on the least-loaded member (fewest guests, then fewest shards, then
/// the highest rendezvous score, so that ties break the same way on every replica).
fn place(members: &[&str], weights: &[u32], holders: Option<&[Option<String>]>) -> Vec<String> {
    let mut owner: Vec<Option<usize>> = vec![None; weights.len()];
    let mut load = vec![0u64; members.len()];
    let mut count = vec![0usize; members.len()];
    if let Some(holders) = holders {
        for (shard, holder) in holders.iter().enumerate().take(weights.len()) {
            if let Some(m) = holder
                .as_deref()
                .and_then(|h| members.iter().position(|m| *m == h))
            {
                owner[shard] = Some(m);
                load[m] += u64::from(weights[shard]);
                count[m] += 1;
            }
        }
    }
    let mut rest: Vec<usize> = (0..weights.len()).filter(|s| owner[*s].is_none()).collect();
    rest.sort_by_key(|s| (std::cmp::Reverse(weights[*s]), *s));
    for shard in rest {
        let m = (0..members.len())
            .min_by_key(|m| {
                (
                    load[*m],
                    count[*m],
                    std::cmp::Reverse(score(shard, members[*m])),
                )
            })
            .expect("members is not empty");
        owner[shard] = Some(m);
        load[m] += u64::from(weights[shard]);
        count[m] += 1;
    }
    owner
        .into_iter()
        .map(|m| members[m.expect("every shard placed")].to_string())
        .collect()
}

/// Whether every member's guests lie within [`BAND`] of the mean (rounded outwards, and never
/// narrower than the heaviest shard, which cannot be split).
fn balanced(members: &[&str], weights: &[u32], plan: &[String]) -> bool {
    let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    let mean = total as f64 / members.len() as f64;
    let heaviest = weights.iter().copied().max().unwrap_or(0) as f64;
    let slack = (mean * BAND).max(heaviest);
    let (low, high) = ((mean - slack).floor(), (mean + slack).ceil());
    members.iter().all(|m| {
        let load: u64 = plan
            .iter()
            .zip(weights)
            .filter(|(o, _)| o.as_str() == *m)
            .map(|(_, w)| u64::from(*w))
            .sum();
        (low..=high).contains(&(load as f64))
    })
}

/// Whether every member holds as many shards as another, give or take one.
fn even(members: &[&str], plan: &[String]) -> bool {
    let counts = members
        .iter()
        .map(|m| plan.iter().filter(|o| o.as_str() == *m).count());
    let (low, high) = counts.fold((usize::MAX, 0), |(l, h), c| (l.min(c), h.max(c)));
    high - low <= 1
}

/// Rendezvous score of `member` for `shard`: a stable hash, the same in every build of the host.
fn score(shard: usize, member: &str) -> u64 {
    let mut h = super::shard::Fnv::default();
    h.write(&(shard as u64).to_le_bytes());
    h.write(member.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicas::shard::shard_of;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    fn loads(plan: &[String], weights: &[u32], members: &[String]) -> Vec<u32> {
        members
            .iter()
            .map(|m| {
                plan.iter()
                    .zip(weights)
                    .filter(|(o, _)| *o == m)
                    .map(|(_, w)| *w)
                    .sum()
            })
            .collect()
    }

    fn weights_of(guests: usize, shards: u32) -> Vec<u32> {
        let mut w = vec![0; shards as usize];
        for g in 0..guests {
            w[shard_of(&format!("guest-{g}"), shards) as usize] += 1;
        }
        w
    }

    #[test]
    fn thirty_guests_on_three_replicas_give_each_between_five_and_fifteen() {
        let weights = weights_of(30, 16);
        let m = members(3);
        let holders = vec![None; 16];
        let p = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &holders,
            spread: false,
        });
        let l = loads(&p, &weights, &m);
        assert!(
            l.iter().all(|l| (5..=15).contains(l)),
            "{l:?} from {weights:?}"
        );
        assert_eq!(l.iter().sum::<u32>(), 30);
    }

    #[test]
    fn every_replica_computes_the_same_plan_whatever_order_it_lists_the_members_in() {
        let weights = weights_of(100, 16);
        let mut m = members(3);
        let holders = vec![None; 16];
        let a = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &holders,
            spread: false,
        });
        m.reverse();
        let b = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &holders,
            spread: false,
        });
        assert_eq!(a, b);
    }

    #[test]
    fn a_balanced_holding_is_kept_when_a_guest_is_added() {
        let m = members(3);
        let mut weights = weights_of(30, 16);
        let first = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &vec![None; 16],
            spread: false,
        });
        let holders: Vec<Option<String>> = first.iter().cloned().map(Some).collect();
        weights[5] += 1;
        let second = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &holders,
            spread: false,
        });
        assert_eq!(first, second, "one more guest moves no shard");
    }

    #[test]
    fn a_joining_replica_gets_a_fair_share_taken_from_the_one_that_held_everything() {
        let weights = weights_of(30, 16);
        let m = members(3);
        let all_mine: Vec<Option<String>> = vec![Some("replica-0".into()); 16];
        let p = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &all_mine,
            spread: false,
        });
        let l = loads(&p, &weights, &m);
        assert!(l.iter().all(|l| (5..=15).contains(l)), "{l:?}");
    }

    #[test]
    fn shards_of_a_dead_replica_go_to_the_living_and_theirs_stay_put() {
        let weights = weights_of(30, 16);
        let three = members(3);
        let before = plan(&Input {
            members: &three,
            weights: &weights,
            holders: &vec![None; 16],
            spread: false,
        });
        let holders: Vec<Option<String>> = before
            .iter()
            .map(|o| (o != "replica-2").then(|| o.clone()))
            .collect();
        let two = members(2);
        let after = plan(&Input {
            members: &two,
            weights: &weights,
            holders: &holders,
            spread: false,
        });
        for (shard, owner) in before.iter().enumerate() {
            if owner != "replica-2" {
                assert_eq!(&after[shard], owner, "shard {shard} moved needlessly");
            }
        }
        assert!(after.iter().all(|o| o != "replica-2"));
    }

    #[test]
    fn one_shard_is_one_leader_and_no_members_is_no_plan() {
        let m = members(3);
        let p = plan(&Input {
            members: &m,
            weights: &[7],
            holders: &[Some("replica-1".into())],
            spread: false,
        });
        assert_eq!(p, vec!["replica-1".to_string()], "the holder keeps it");
        assert!(
            plan(&Input {
                members: &[],
                weights: &[1],
                holders: &[None],
                spread: false,
            })
            .is_empty()
        );
    }

    #[test]
    fn keys_spread_over_every_shard_move_an_uneven_holding_to_an_even_one() {
        // Twelve shards of one key-sharded guest, eight held by the replica that came first:
        // within the band by guests, but two thirds of the keys on one replica.
        let m = members(2);
        let weights = vec![1; 12];
        let holders: Vec<Option<String>> = (0..12)
            .map(|s| Some(format!("replica-{}", usize::from(s >= 8))))
            .collect();
        let spread = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &holders,
            spread: true,
        });
        for r in &m {
            assert_eq!(spread.iter().filter(|o| *o == r).count(), 6, "{spread:?}");
        }
        let kept = plan(&Input {
            members: &m,
            weights: &weights,
            holders: &holders,
            spread: false,
        });
        let held: Vec<String> = holders.into_iter().map(Option::unwrap).collect();
        assert_eq!(kept, held, "guests alone keep a holding within the band");
    }

    #[test]
    fn a_holder_that_is_not_a_member_counts_for_nothing() {
        let m = members(2);
        let p = plan(&Input {
            members: &m,
            weights: &[1, 1],
            holders: &[Some("gone".into()), Some("gone".into())],
            spread: false,
        });
        assert!(p.iter().all(|o| m.contains(o)));
        assert_ne!(p[0], p[1], "two equal shards on two replicas: one each");
    }
}
