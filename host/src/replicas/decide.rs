//! What to do with one shard this round, decided from what this replica knows of it: pure, so
//! that every rule that keeps replicas from overlapping is tested on its own.

use std::time::{Duration, Instant};

/// One shard's Lease as this replica sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen<'a> {
    /// Its holder on record (`None`: released or never held).
    pub holder: Option<&'a str>,
    /// When anyone may take it (see [`super::lease::free_at`]).
    pub free_at: Instant,
    /// Whether it was written since this replica's own last write of it.
    pub newer_than_ours: bool,
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Facts<'a> {
    pub me: &'a str,
    pub now: Instant,
    /// Held here, and when its next renewal is due.
    pub next_renew: Option<Instant>,
    /// The Lease as seen, if it exists.
    pub seen: Option<Seen<'a>>,
    /// Who the plan wants to hold it.
    pub planned: &'a str,
    /// Whether that replica is alive.
    pub planned_alive: bool,
    /// Held here and planned for a live replica elsewhere: since when.
    pub elsewhere_since: Option<Instant>,
    /// Whether the Lease informer has synced: nothing is taken before.
    pub synced: bool,
    /// How long a held shard must be planned elsewhere before it is handed over.
    pub rebalance_after: Duration,
    /// How long a free shard planned for another replica waits for it before anyone takes it.
    pub grace: Duration,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Held here, but another replica wrote the Lease since: stop at once.
    Lost { by: Option<String> },
    /// Held here and planned elsewhere for long enough: hand it over.
    Release { to: String },
    /// Held here and due: renew.
    Renew,
    /// Not held here, and free (or still ours on record), and ours to take: take it.
    Acquire,
    /// Nothing now; look again by then (`None`: whenever something changes).
    Wait(Option<Instant>),
}

/// Decides for one shard.
pub(super) fn decide(f: &Facts<'_>) -> Decision {
    if let Some(next_renew) = f.next_renew {
        if let Some(seen) = f.seen
            && seen.holder != Some(f.me)
            && seen.newer_than_ours
        {
            return Decision::Lost {
                by: seen.holder.map(str::to_string),
            };
        }
        let mut wake = next_renew;
        if let Some(since) = f.elsewhere_since
            && f.planned != f.me
            && f.planned_alive
        {
            if f.now >= since + f.rebalance_after {
                return Decision::Release {
                    to: f.planned.to_string(),
                };
            }
            wake = wake.min(since + f.rebalance_after);
        }
        return if f.now >= next_renew {
            Decision::Renew
        } else {
            Decision::Wait(Some(wake))
        };
    }
    if !f.synced {
        return Decision::Wait(None);
    }
    // A Lease never created is free now; one still ours on record (this replica restarted, or
    // was cut off and fenced) may be taken back at any time, since the write is guarded by the
    // resourceVersion read and so fails if anyone else took it meanwhile.
    let (free_at, ours_on_record) = match f.seen {
        None => (f.now, false),
        Some(s) => (s.free_at, s.holder == Some(f.me)),
    };
    let mine = f.planned == f.me;
    // The plan may still give the shard to the replica that let its Lease expire: that one
    // counts as alive until its own replica Lease expires too, up to a renew interval later.
    // It stopped renewing the shard, so it is not waited for.
    let expired_under_planned = f.seen.is_some_and(|s| s.holder == Some(f.planned));
    // A free shard the plan gives another replica is left to it for a while; if it does not
    // take it (the replicas disagree on the plan for a moment), anyone may.
    let want = mine || expired_under_planned || f.now >= free_at + f.grace;
    if (f.now >= free_at || ours_on_record) && want {
        Decision::Acquire
    } else if mine || expired_under_planned {
        Decision::Wait(Some(free_at))
    } else {
        Decision::Wait(Some(free_at.max(f.now) + f.grace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn facts(now: Instant) -> Facts<'static> {
        Facts {
            me: "a",
            now,
            next_renew: None,
            seen: None,
            planned: "a",
            planned_alive: true,
            elsewhere_since: None,
            synced: true,
            rebalance_after: 15 * S,
            grace: 4 * S,
        }
    }

    #[test]
    fn a_held_shard_is_renewed_when_due_and_lost_at_once_if_someone_else_wrote_it() {
        let now = Instant::now();
        let held = Facts {
            next_renew: Some(now + 2 * S),
            seen: Some(Seen {
                holder: Some("a"),
                free_at: now + 15 * S,
                newer_than_ours: false,
            }),
            ..facts(now)
        };
        assert_eq!(decide(&held), Decision::Wait(Some(now + 2 * S)));
        let due = Facts {
            now: now + 2 * S,
            ..held
        };
        assert_eq!(decide(&due), Decision::Renew);
        let taken = Facts {
            seen: Some(Seen {
                holder: Some("b"),
                free_at: now + 15 * S,
                newer_than_ours: true,
            }),
            ..held
        };
        assert_eq!(
            decide(&taken),
            Decision::Lost {
                by: Some("b".into())
            }
        );
        // Our own older copy in the cache (the informer lags our write) is not a loss.
        let lagging = Facts {
            seen: Some(Seen {
                holder: Some("b"),
                free_at: now,
                newer_than_ours: false,
            }),
            ..held
        };
        assert_eq!(decide(&lagging), Decision::Wait(Some(now + 2 * S)));
    }

    #[test]
    fn a_held_shard_planned_elsewhere_is_handed_over_only_after_rebalance_after() {
        let now = Instant::now();
        let held = Facts {
            next_renew: Some(now + 5 * S),
            planned: "b",
            elsewhere_since: Some(now),
            ..facts(now)
        };
        assert_eq!(decide(&held), Decision::Wait(Some(now + 5 * S)));
        let later = Facts {
            now: now + 15 * S,
            next_renew: Some(now + 20 * S),
            ..held
        };
        assert_eq!(decide(&later), Decision::Release { to: "b".into() });
        let dead = Facts {
            planned_alive: false,
            ..later
        };
        assert_eq!(
            decide(&dead),
            Decision::Wait(Some(now + 20 * S)),
            "never to a dead replica"
        );
    }

    #[test]
    fn a_free_shard_is_taken_by_its_planned_owner_at_once_and_by_anyone_after_the_grace() {
        let now = Instant::now();
        let free = Facts {
            seen: Some(Seen {
                holder: None,
                free_at: now,
                newer_than_ours: false,
            }),
            ..facts(now)
        };
        assert_eq!(decide(&free), Decision::Acquire);
        let theirs = Facts {
            planned: "b",
            ..free
        };
        assert_eq!(decide(&theirs), Decision::Wait(Some(now + 4 * S)));
        let abandoned = Facts {
            now: now + 4 * S,
            ..theirs
        };
        assert_eq!(decide(&abandoned), Decision::Acquire);
        let never_created = Facts {
            seen: None,
            ..facts(now)
        };
        assert_eq!(decide(&never_created), Decision::Acquire);
    }

    #[test]
    fn a_shard_held_elsewhere_is_taken_only_once_its_lease_has_expired() {
        let now = Instant::now();
        let held = Facts {
            seen: Some(Seen {
                holder: Some("b"),
                free_at: now + 15 * S,
                newer_than_ours: false,
            }),
            ..facts(now)
        };
        assert_eq!(decide(&held), Decision::Wait(Some(now + 15 * S)));
        let expired = Facts {
            now: now + 15 * S,
            ..held
        };
        assert_eq!(decide(&expired), Decision::Acquire);
    }

    #[test]
    fn a_shard_that_expired_under_the_replica_the_plan_still_gives_it_to_is_taken_at_its_expiry() {
        // The dead holder still counts as alive, and so keeps its place in the plan, until its
        // replica Lease expires too; waiting the grace for it only delayed the failover.
        let now = Instant::now();
        let dying = Facts {
            seen: Some(Seen {
                holder: Some("b"),
                free_at: now + 3 * S,
                newer_than_ours: false,
            }),
            planned: "b",
            ..facts(now)
        };
        assert_eq!(
            decide(&dying),
            Decision::Wait(Some(now + 3 * S)),
            "woken at the expiry, not a grace after it"
        );
        let expired = Facts {
            now: now + 3 * S,
            ..dying
        };
        assert_eq!(decide(&expired), Decision::Acquire);
        let released_for_b = Facts {
            seen: Some(Seen {
                holder: None,
                free_at: now,
                newer_than_ours: false,
            }),
            ..dying
        };
        assert_eq!(
            decide(&released_for_b),
            Decision::Wait(Some(now + 4 * S)),
            "a shard handed over to b on purpose is still left to b for the grace"
        );
    }

    #[test]
    fn a_lease_still_ours_on_record_may_be_taken_back_before_it_expires() {
        let now = Instant::now();
        let ours = Facts {
            seen: Some(Seen {
                holder: Some("a"),
                free_at: now + 15 * S,
                newer_than_ours: false,
            }),
            ..facts(now)
        };
        assert_eq!(decide(&ours), Decision::Acquire);
    }

    #[test]
    fn nothing_is_taken_before_the_leases_are_synced() {
        let now = Instant::now();
        let unsynced = Facts {
            synced: false,
            ..facts(now)
        };
        assert_eq!(decide(&unsynced), Decision::Wait(None));
    }
}
