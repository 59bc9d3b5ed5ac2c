//! The elector: one task that reads the group's Leases from the informer, plans, and takes,
//! renews and hands over shards, and deletes the group's litter; the watchdog, which closes a
//! shard's gate at its renew deadline whatever the elector is doing (waiting on an API server
//! that does not answer, say); and the claim of this replica's identity before it joins.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use super::assignment;
use super::config::{Config, Error};
use super::decide::{self, Decision};
use super::instance::{self, Claim};
use super::lease::{self, Observed, Seen};
use super::snapshot::ShardView;
use super::stale;
use super::state::{Guests, Held, Inner};
use crate::informer::store::Store;

/// How often the watchdog looks at the deadlines, at the least: a deadline is kept to within
/// this, which is small beside the margin between renew deadline and lease duration.
const WATCHDOG_TICK: Duration = Duration::from_millis(100);

/// How long a handing-over waits for reconciles in flight to end: they are cancelled at their
/// next await, which takes milliseconds.
const DRAIN: Duration = Duration::from_secs(1);

/// Closes each held shard's gate once its renew deadline has passed.
pub(super) async fn watchdog(inner: Arc<Inner>) {
    loop {
        let now = Instant::now();
        let next = {
            let state = inner.state.lock().unwrap();
            let expired: Vec<u32> = state
                .held
                .iter()
                .filter(|(_, h)| h.deadline <= now)
                .map(|(s, _)| *s)
                .collect();
            let next = state.held.values().map(|h| h.deadline).min();
            drop(state);
            for shard in expired {
                inner.drop_shard(
                    shard,
                    format!(
                        "shard {shard}: its Lease could not be renewed within the renew deadline ({:?})",
                        inner.config.renew_deadline
                    ),
                    true,
                );
            }
            next
        };
        let wake = next.map_or(now + WATCHDOG_TICK, |d| d.min(now + WATCHDOG_TICK));
        tokio::time::sleep_until(wake.into()).await;
    }
}

/// What one round decided to write.
enum Write {
    Acquire { shard: u32, seen: Option<Lease> },
    Renew { shard: u32, lease: Lease },
    Release { shard: u32, to: String },
}

/// What one round of the elector read from the Leases, at `now`.
struct View {
    now: Instant,
    /// Whether the Lease informer holds the whole picture; unsynced, nothing is taken.
    synced: bool,
    /// Every Lease of the group by name, with when this replica saw its current version.
    seen: HashMap<String, (Seen, Instant)>,
    /// The replicas alive, this one included, sorted.
    members: Vec<String>,
    /// Each shard's live holder.
    holders: Vec<Option<String>>,
    /// Guests per shard.
    weights: Vec<u32>,
    /// Who the plan wants holding each shard.
    plan: Vec<String>,
}

/// What one round decided.
struct Round {
    writes: Vec<Write>,
    /// Shards another replica took, and who.
    lost: Vec<(u32, Option<String>)>,
    /// When to look again at the latest, unless something changes first.
    wake: Instant,
}

/// Takes this replica's identity before it joins: writes its own Lease, stamped with this
/// process's instance token, and returns it as written.
///
/// If the Lease on record is held by another process's token, watches it for a lease duration
/// (and a retry period): renewed meanwhile, that process is alive and this one refuses with
/// [`Error::Duplicate`]; untouched, it is gone (killed before it could delete its Lease) and the
/// identity is taken over. So a pod restarted after a crash waits at most a lease duration, and
/// one stopped cleanly (its Lease deleted) not at all. Any other failure (forbidden, no answer)
/// is left to the elector's announcements, which retry it and report it: `Ok(None)`.
pub(super) async fn claim_identity(
    writer: &lease::Writer,
    config: &Config,
) -> Result<Option<Lease>, Error> {
    let name = config.member_lease();
    // The other process's Lease version when first seen, since when, and how long to watch.
    let mut watching: Option<(String, Instant, Duration)> = None;
    loop {
        let on_record = match writer.get_opt(&name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    "cannot read this replica's Lease before joining (retried as it announces itself): {e}"
                );
                return Ok(None);
            }
        };
        if let Claim::Other { instance } = instance::judge(on_record.as_ref(), writer.instance()) {
            let lease = on_record
                .as_ref()
                .expect("only a Lease on record is another's");
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            match &watching {
                None => {
                    let seconds = (lease.spec.as_ref())
                        .and_then(|s| s.lease_duration_seconds)
                        .map_or(0, |n| u64::try_from(n).unwrap_or(0));
                    let wait = config.lease_duration.max(Duration::from_secs(seconds))
                        + config.retry_period;
                    tracing::info!(identity = %config.identity, other = %instance, ?wait, "this replica's identity is on record for another process: watching its Lease to see whether that process is alive");
                    watching = Some((rv, Instant::now(), wait));
                }
                Some((first, _, _)) if *first != rv => {
                    return Err(Error::Duplicate {
                        identity: config.identity.clone(),
                        other: instance,
                        namespace: config.namespace.clone(),
                        lease: name,
                    });
                }
                Some((_, since, wait)) if since.elapsed() >= *wait => {
                    tracing::info!(identity = %config.identity, other = %instance, "the other process left this replica's Lease untouched for a lease duration: it is gone; taking the identity over");
                }
                Some(_) => {}
            }
            if watching
                .as_ref()
                .is_some_and(|(_, since, wait)| since.elapsed() < *wait)
            {
                tokio::time::sleep(config.retry_period.min(Duration::from_secs(1))).await;
                continue;
            }
        }
        match writer.acquire(&name, "replica", on_record.as_ref()).await {
            Ok(l) => return Ok(Some(l)),
            // Written by someone between our read and our write: look again.
            Err(lease::Error::Conflict { .. }) => {}
            Err(e) => {
                tracing::warn!(
                    "cannot write this replica's Lease before joining (retried as it announces itself): {e}"
                );
                return Ok(None);
            }
        }
    }
}

/// [`claim_identity`], noting meanwhile when each Lease version is first seen in `store`, so
/// that the elector measures expiry from then rather than from when the claim ended. The claim
/// of a restarted replica waits a lease duration or more; without this, its first look would
/// take every Lease as just renewed, and it would wait a whole lease duration more before
/// taking a shard whose holder died before it started.
pub(super) async fn claim_observing(
    writer: &lease::Writer,
    config: &Config,
    store: &Store,
) -> Result<(Option<Lease>, Observed), Error> {
    let mut observed = Observed::default();
    let claim = claim_identity(writer, config);
    tokio::pin!(claim);
    loop {
        let changed = store.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        note_all(store, &mut observed, Instant::now());
        tokio::select! {
            claimed = &mut claim => return Ok((claimed?, observed)),
            () = &mut changed => {}
        }
    }
}

/// Notes every Lease in `store` as seen at `now` (a version seen before keeps its time).
fn note_all(store: &Store, observed: &mut Observed, now: Instant) {
    for s in leases(store) {
        observed.note(&s, now);
    }
}

/// The group's Leases in `store`, as read.
fn leases(store: &Store) -> impl Iterator<Item = Seen> {
    store
        .all()
        .into_iter()
        .filter_map(|o| Seen::from_json(o.json()))
}

/// The elector's loop: every change of a Lease, every change of the guests, and every due
/// renewal or expiry wakes it. Each round reads the Leases ([`look`]), decides per shard
/// ([`decide_round`]), then makes the writes and announces this replica at once, and deletes
/// litter ([`collect`]). `claimed` is this replica's Lease as [`claim_identity`] wrote it.
///
/// `observed` holds when each Lease version was first seen before the loop starts (see
/// [`claim_observing`]).
///
/// It ends only if another process turns out to hold this replica's identity: every shard is
/// then dropped here (gates closed, Leases left to that process) and the refusal published.
pub(super) async fn elect(inner: Arc<Inner>, claimed: Option<Lease>, mut observed: Observed) {
    let mut membership: Option<(Lease, Instant)> =
        claimed.map(|l| (l, Instant::now() + inner.config.renew_every()));
    let mut tried: HashSet<(String, String)> = HashSet::new();
    // Shards the plan wants elsewhere, since when, and to whom.
    let mut elsewhere: HashMap<u32, (String, Instant)> = HashMap::new();
    let mut guests = inner.guests.subscribe();
    let store = inner.informer.store().clone();
    loop {
        let changed = store.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let names = guests.borrow_and_update().clone();
        let view = look(&inner, &store, &mut observed, &names);
        let round = decide_round(&inner, &view, &mut elsewhere);
        for (s, by) in round.lost {
            inner.drop_shard(
                s,
                format!(
                    "shard {s}: replica {} took its Lease",
                    by.as_deref().unwrap_or("(none)")
                ),
                true,
            );
        }
        let writes = futures::future::join_all(round.writes.into_iter().map(|w| {
            let inner = inner.clone();
            async move { perform(&inner, w).await }
        }));
        let (announced, _) = tokio::join!(announce(&inner, &view, &mut membership), writes);
        if let Err(e) = announced {
            refuse(&inner, &e);
            return;
        }
        collect(&inner, &view, &mut tried).await;
        let mut wake = round.wake;
        if let Some((_, next)) = &membership {
            wake = wake.min(*next);
        }
        {
            let state = inner.state.lock().unwrap();
            for h in state.held.values() {
                wake = wake.min(h.next_renew);
            }
        }
        let wake = wake.max(Instant::now() + Duration::from_millis(5));
        tokio::select! {
            () = &mut changed => {}
            _ = guests.changed() => {}
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

/// What the Leases in `store` say now: who is alive, who holds each shard, and the plan for
/// the guests `guests`. `observed` remembers when each Lease version was first seen, which is
/// what expiry is measured from.
fn look(inner: &Inner, store: &Store, observed: &mut Observed, guests: &Guests) -> View {
    let config = &inner.config;
    let now = Instant::now();
    let synced = inner.informer.status().state.is_synced();
    let mut seen: HashMap<String, (Seen, Instant)> = HashMap::new();
    for s in leases(store) {
        let at = observed.note(&s, now);
        seen.insert(s.name().to_string(), (s, at));
    }
    observed.retain(&seen.keys().map(String::as_str).collect::<HashSet<_>>());
    let live_holder = |name: &str| -> Option<String> {
        let (s, at) = seen.get(name)?;
        (now < lease::free_at(s, *at)).then(|| s.holder.clone())?
    };
    let mut members: Vec<String> = seen
        .values()
        .filter(|(s, _)| role(s) == "replica")
        .filter_map(|(s, _)| live_holder(s.name()))
        .collect();
    members.push(config.identity.clone());
    members.sort();
    members.dedup();
    let holders: Vec<Option<String>> = (0..config.shards)
        .map(|s| live_holder(&config.shard_lease(s)))
        .collect();
    let weights = guests.weights(config.shards);
    let plan = assignment::plan(&assignment::Input {
        members: &members,
        weights: &weights,
        holders: &holders,
        spread: !guests.spread.is_empty(),
    });
    View {
        now,
        synced,
        seen,
        members,
        holders,
        weights,
        plan,
    }
}

/// Decides, for each shard, what this replica does this round ([`decide::decide`] on the facts
/// of `view` and of what it holds), and shows the view in the snapshot. `elsewhere` remembers,
/// across rounds, since when the plan has wanted a held shard elsewhere.
fn decide_round(
    inner: &Inner,
    view: &View,
    elsewhere: &mut HashMap<u32, (String, Instant)>,
) -> Round {
    let config = &inner.config;
    let (me, now) = (config.identity.as_str(), view.now);
    let mut round = Round {
        writes: Vec::new(),
        lost: Vec::new(),
        wake: now + config.retry_period,
    };
    let mut state = inner.state.lock().unwrap();
    state.snapshot.members = view.members.clone();
    state.snapshot.shards = (0..config.shards)
        .map(|s| ShardView {
            shard: s,
            holder: view.holders[s as usize].clone(),
            planned: view.plan.get(s as usize).cloned(),
            guests: view.weights[s as usize],
        })
        .collect();
    for s in 0..config.shards {
        let name = config.shard_lease(s);
        let planned = view.plan.get(s as usize).map_or("", String::as_str);
        let held = state.held.get(&s);
        let planned_alive = view.members.iter().any(|m| m == planned);
        let elsewhere_since = match held {
            Some(_) if planned != me && planned_alive => Some(
                elsewhere
                    .entry(s)
                    .and_modify(|(to, at)| {
                        if to != planned {
                            (*to, *at) = (planned.to_string(), now);
                        }
                    })
                    .or_insert((planned.to_string(), now))
                    .1,
            ),
            _ => {
                elsewhere.remove(&s);
                None
            }
        };
        let seen = view.seen.get(&name);
        let facts = decide::Facts {
            me,
            now,
            next_renew: held.map(|h| h.next_renew),
            seen: seen.map(|(l, at)| decide::Seen {
                holder: l.holder.as_deref(),
                free_at: lease::free_at(l, *at),
                newer_than_ours: held.is_some_and(|h| newer(l.resource_version(), &h.lease)),
            }),
            planned,
            planned_alive,
            elsewhere_since,
            synced: view.synced,
            rebalance_after: config.rebalance_after,
            grace: config.retry_period * 2,
        };
        match decide::decide(&facts) {
            Decision::Lost { by } => round.lost.push((s, by)),
            Decision::Release { to } => round.writes.push(Write::Release { shard: s, to }),
            Decision::Renew => round.writes.push(Write::Renew {
                shard: s,
                lease: held.expect("renewed only when held").lease.clone(),
            }),
            Decision::Acquire => round.writes.push(Write::Acquire {
                shard: s,
                seen: seen.map(|(l, _)| l.lease.clone()),
            }),
            Decision::Wait(Some(at)) => round.wake = round.wake.min(at),
            Decision::Wait(None) => {}
        }
    }
    round
}

/// Writes this replica's own Lease when due, so that the others count it in their plans, and
/// keeps in `membership` the Lease as written and when to renew it. [`Error::Duplicate`] when
/// the Lease, to be written afresh, is held and live under another process's token: two
/// processes started at once with one identity both found it free, and the other won.
async fn announce(
    inner: &Inner,
    view: &View,
    membership: &mut Option<(Lease, Instant)>,
) -> Result<(), Error> {
    if membership
        .as_ref()
        .is_some_and(|(_, next)| view.now < *next)
    {
        return Ok(());
    }
    let member = inner.config.member_lease();
    if membership.is_none()
        && let Some((s, at)) = view.seen.get(&member)
        && let Claim::Other { instance } = instance::judge(Some(&s.lease), inner.writer.instance())
        && view.now < lease::free_at(s, *at)
    {
        return Err(Error::Duplicate {
            identity: inner.config.identity.clone(),
            other: instance,
            namespace: inner.config.namespace.clone(),
            lease: member,
        });
    }
    inner.state.lock().unwrap().snapshot.writes += 1;
    let sent = Instant::now();
    let written = match membership.as_ref() {
        Some((l, _)) => inner.writer.renew(l).await,
        None => {
            let on_record = view.seen.get(&member).map(|(s, _)| &s.lease);
            inner.writer.acquire(&member, "replica", on_record).await
        }
    };
    match written {
        Ok(l) => {
            inner.state.lock().unwrap().snapshot.forbidden = None;
            *membership = Some((l, sent + inner.config.renew_every()));
        }
        Err(e) => {
            note_forbidden(inner, &e);
            tracing::warn!("cannot announce this replica: {e}");
            // A conflict means our copy is stale: read it afresh next round.
            *membership = None;
        }
    }
    Ok(())
}

/// Stops taking part because another process holds this replica's identity: every shard held
/// is dropped (its gate closed; its Lease, which names the shared identity, left alone) and the
/// refusal published for [`super::Replicas::refused`] and [`super::Replicas::problem`].
fn refuse(inner: &Inner, e: &Error) {
    tracing::error!("{e}");
    let held: Vec<u32> = inner.state.lock().unwrap().held.keys().copied().collect();
    for s in held {
        inner.drop_shard(
            s,
            format!("shard {s}: another process holds this replica's identity"),
            true,
        );
    }
    inner.refused.send_replace(Some(e.to_string()));
}

/// Deletes the group's litter ([`stale::due`]): only the first replica alive by name does, so
/// that one delete is sent for each, and once for the version seen (`tried`) unless it failed
/// in passing.
async fn collect(inner: &Inner, view: &View, tried: &mut HashSet<(String, String)>) {
    let config = &inner.config;
    if !view.synced || view.members.first() != Some(&config.identity) {
        return;
    }
    let own = config.member_lease();
    let group = stale::Group {
        name: &config.group,
        shards: config.shards,
        lease_duration: config.lease_duration,
        own: &own,
    };
    for (name, rv) in stale::due(&view.seen, group, view.now) {
        if !tried.insert((name.clone(), rv.clone())) {
            continue;
        }
        inner.state.lock().unwrap().snapshot.writes += 1;
        match inner.writer.delete_if(&name, &rv).await {
            Ok(true) => {
                inner.state.lock().unwrap().snapshot.collected += 1;
                tracing::info!(lease = %name, "deleted a Lease expired for {} lease durations: its replica is gone, or its shard no longer exists", stale::AFTER_DURATIONS);
            }
            Ok(false) => {
                tracing::debug!(lease = %name, "a stale Lease changed or went before its deletion: kept")
            }
            Err(e) => {
                tracing::warn!(lease = %name, "cannot delete a stale Lease: {e}");
                // A passing failure is tried again next round; a forbidden one only once.
                if !e.is_forbidden() {
                    tried.remove(&(name, rv));
                }
            }
        }
    }
    tried.retain(|(n, _)| view.seen.contains_key(n));
}

/// Whether the resourceVersion `seen` is newer than the one of our `held` copy. Both are
/// numbers on Kubernetes 1.35 and later; otherwise any difference counts as newer.
fn newer(seen: &str, held: &Lease) -> bool {
    let ours = held.metadata.resource_version.as_deref().unwrap_or("");
    match (seen.parse::<u64>(), ours.parse::<u64>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => seen != ours,
    }
}

fn role(seen: &Seen) -> &str {
    seen.lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(lease::ROLE_LABEL))
        .map_or("", String::as_str)
}

/// Makes one write and records what came of it.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per write (acquire, renew, release), each with how its outcome changes what this replica holds"
)]
async fn perform(inner: &Inner, write: Write) {
    let config = &inner.config;
    inner.state.lock().unwrap().snapshot.writes += 1;
    match write {
        Write::Acquire { shard, seen } => {
            let name = config.shard_lease(shard);
            let was = seen
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty());
            let sent = Instant::now();
            match inner.writer.acquire(&name, "shard", seen.as_ref()).await {
                Ok(lease) => {
                    let deadline = sent + config.renew_deadline;
                    if Instant::now() >= deadline {
                        return;
                    }
                    {
                        let mut state = inner.state.lock().unwrap();
                        state.held.insert(
                            shard,
                            Held {
                                lease,
                                deadline,
                                next_renew: sent + config.renew_every(),
                            },
                        );
                        state.snapshot.acquired += 1;
                        state.snapshot.forbidden = None;
                    }
                    inner.gates[shard as usize].set_open();
                    inner.publish_held();
                    match was {
                        Some(w) if w != config.identity => {
                            tracing::info!(shard, from = %w, "shard taken over: its Lease expired; its guests reconcile here now")
                        }
                        _ => tracing::info!(shard, "shard acquired; its guests reconcile here now"),
                    }
                }
                Err(lease::Error::Conflict { .. }) => {
                    tracing::debug!(shard, "another replica took the shard first");
                }
                Err(e) => {
                    note_forbidden(inner, &e);
                    tracing::warn!(shard, "cannot take the shard: {e}");
                }
            }
        }
        Write::Renew { shard, lease } => {
            let sent = Instant::now();
            let result = inner.writer.renew(&lease).await;
            let mut state = inner.state.lock().unwrap();
            match result {
                Ok(lease) => {
                    if let Some(held) = state.held.get_mut(&shard) {
                        held.lease = lease;
                        held.deadline = sent + config.renew_deadline;
                        held.next_renew = sent + config.renew_every();
                    }
                }
                Err(lease::Error::Conflict { .. }) => {
                    drop(state);
                    // Perhaps our own write, answered too late: look before giving up.
                    let name = config.shard_lease(shard);
                    match inner.writer.get(&name).await {
                        Ok(now) if holder(&now) == Some(config.identity.as_str()) => {
                            if let Some(held) = inner.state.lock().unwrap().held.get_mut(&shard) {
                                held.lease = now;
                                held.next_renew = Instant::now();
                            }
                        }
                        Ok(now) => {
                            inner.drop_shard(
                                shard,
                                format!(
                                    "shard {shard}: replica {} holds its Lease",
                                    holder(&now).unwrap_or("(none)")
                                ),
                                true,
                            );
                        }
                        Err(e) => {
                            let mut state = inner.state.lock().unwrap();
                            state.snapshot.renew_failures += 1;
                            if let Some(held) = state.held.get_mut(&shard) {
                                held.next_renew = Instant::now() + config.retry_period;
                            }
                            tracing::warn!(shard, "cannot renew the shard's Lease: {e}");
                        }
                    }
                }
                Err(e) => {
                    state.snapshot.renew_failures += 1;
                    if e.is_forbidden() {
                        state.snapshot.forbidden = Some(e.to_string());
                    }
                    if let Some(held) = state.held.get_mut(&shard) {
                        held.next_renew = Instant::now() + config.retry_period;
                        let left = held.deadline.saturating_duration_since(Instant::now());
                        tracing::warn!(
                            shard,
                            ?left,
                            "cannot renew the shard's Lease (its guests stop here when the renew deadline passes): {e}"
                        );
                    }
                }
            }
        }
        Write::Release { shard, to } => {
            let why = format!("shard {shard}: handed over to replica {to} to balance the guests");
            if let Some(held) = inner.drop_shard(shard, why, false) {
                release(
                    inner,
                    shard,
                    held,
                    &format!("to balance the guests, for replica {to}"),
                )
                .await;
            }
        }
    }
}

/// Keeps a forbidden write for [`super::Replicas::problem`].
fn note_forbidden(inner: &Inner, e: &lease::Error) {
    if e.is_forbidden() {
        inner.state.lock().unwrap().snapshot.forbidden = Some(e.to_string());
    }
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// Releases a shard already dropped locally (gate closed), once its reconciles have ended; if
/// they do not end in time, the Lease is left to expire.
async fn release(inner: &Inner, shard: u32, held: Held, why: &str) {
    let gate = &inner.gates[shard as usize];
    if tokio::time::timeout(DRAIN, gate.drained()).await.is_err() {
        tracing::warn!(
            shard,
            running = gate.running(),
            "reconciles did not end within {DRAIN:?}: the shard's Lease is left to expire instead of released"
        );
        return;
    }
    match inner.writer.release(&held.lease).await {
        Ok(_) => {
            inner.state.lock().unwrap().snapshot.released += 1;
            tracing::info!(shard, "shard released {why}");
        }
        Err(e) => tracing::warn!(
            shard,
            "cannot release the shard's Lease (it expires instead): {e}"
        ),
    }
}

/// Drops and releases every shard held, and deletes this replica's own Lease.
pub(super) async fn hand_over(inner: &Arc<Inner>) {
    let shards: Vec<u32> = inner.state.lock().unwrap().held.keys().copied().collect();
    let releases = shards.into_iter().filter_map(|s| {
        let held = inner.drop_shard(s, format!("shard {s}: this replica is stopping"), false)?;
        inner.state.lock().unwrap().snapshot.writes += 1;
        Some(release(inner, s, held, "as this replica stops"))
    });
    futures::future::join_all(releases).await;
    for gate in &inner.gates {
        gate.close("this replica is stopping");
    }
    // A write cancelled as the elector stopped (an acquire or a hand-over) may have reached the
    // server without this replica learning of it: release those too rather than leave them to
    // expire.
    match inner.writer.held_here().await {
        Ok(leases) => {
            let names: HashMap<String, u32> = (0..inner.config.shards)
                .map(|s| (inner.config.shard_lease(s), s))
                .collect();
            let late = leases.into_iter().filter_map(|l| {
                let shard = *names.get(l.metadata.name.as_deref()?)?;
                let held = Held {
                    lease: l,
                    deadline: Instant::now(),
                    next_renew: Instant::now(),
                };
                Some(release(
                    inner,
                    shard,
                    held,
                    "as this replica stops (a write answered late)",
                ))
            });
            futures::future::join_all(late).await;
        }
        Err(e) => tracing::debug!("cannot list the shard Leases this replica may hold: {e}"),
    }
    let member = inner.config.member_lease();
    if let Err(e) = inner.writer.delete(&member).await {
        tracing::debug!("cannot delete this replica's Lease {member} (it expires instead): {e}");
    }
    last_out(inner).await;
}

/// How long a stopping replica waits for the other replicas' Leases to go, to learn whether it
/// is the last: replicas stopped together (an uninstall) delete theirs within about a second.
const LAST_OUT_WAIT: Duration = Duration::from_secs(2);

/// The last replica out deletes the group's shard Leases, so that removing every replica (an
/// uninstall) leaves no Lease behind. A replica stopping while others live on leaves them,
/// after waiting up to [`LAST_OUT_WAIT`] to see whether the others are going too; so a replica
/// of several takes that much longer to exit, its shards already handed over.
async fn last_out(inner: &Inner) {
    let deadline = Instant::now() + LAST_OUT_WAIT;
    loop {
        let others = match inner.writer.list("replica").await {
            Ok(leases) => leases
                .iter()
                .filter(|l| holder(l).is_some_and(|h| h != inner.config.identity))
                .filter(|l| still_claimed(l))
                .count(),
            Err(e) => {
                tracing::debug!("cannot list the replicas' Leases as this replica stops: {e}");
                return;
            }
        };
        if others == 0 {
            break;
        }
        if Instant::now() >= deadline {
            tracing::debug!(others, "other replicas live on: their shard Leases stay");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shards = match inner.writer.list("shard").await {
        Ok(leases) => leases,
        Err(e) => {
            tracing::debug!("cannot list the shard Leases as the last replica stops: {e}");
            return;
        }
    };
    let deletes = shards.iter().filter_map(|l| {
        let name = l.metadata.name.as_deref()?;
        let rv = l.metadata.resource_version.as_deref()?;
        Some(async move { (name, inner.writer.delete_if(name, rv).await) })
    });
    let mut deleted = 0;
    for (name, outcome) in futures::future::join_all(deletes).await {
        match outcome {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(e) => tracing::debug!(lease = %name, "cannot delete a shard Lease: {e}"),
        }
    }
    tracing::info!(deleted, "the last replica out deleted the shard Leases");
}

/// Whether a replica Lease's claim runs on by its own renew time, read against this machine's
/// clock: good enough to tell a replica still running from one gone, for tidying up only (no
/// gate depends on it).
fn still_claimed(lease: &Lease) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return false;
    };
    let (Some(renewed), Some(seconds)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds)
    else {
        return false;
    };
    let until = renewed
        .0
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i64::from(
            seconds,
        )))
        .ok();
    until.is_some_and(|t| t > k8s_openapi::jiff::Timestamp::now())
}
