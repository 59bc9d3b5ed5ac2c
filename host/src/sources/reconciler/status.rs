//! A Reconciler's status: the document (conditions, revision, digest, owner, counts) computed
//! from what the source decided and what the supervisor reports, and when to write it. Pure;
//! `report` writes it.
//!
//! Where it may surprise:
//! - `Ready` says whether a revision serves, not whether the latest spec does: an edit that is
//!   refused or rejected leaves the older revision serving, `Ready=True`, with `Accepted=False`
//!   or `Degraded=True` saying why the new one does not.
//! - A guest loaded but held back (its informers not synced, its ServiceAccount not allowed to
//!   read what it declares) is `Ready=False`: it cannot reconcile, so it does not serve.
//! - Counts change with every reconcile; they are written at most once per refresh interval,
//!   while a change of condition, revision or owner is written within the shorter one.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::spec::Refusal;
use crate::ops::status::{GuestState, GuestStatus};
use crate::rollout::progress::{Phase, Progress};

/// What the status is computed from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a> {
    /// The generation the source last acted on.
    pub(crate) generation: i64,
    /// What the policy cut down (accepted), or why the spec is refused.
    pub(crate) accepted: Result<&'a [String], &'a Refusal>,
    pub(crate) suspended: bool,
    /// The supervisor's view of the guest, if it knows it.
    pub(crate) guest: Option<&'a GuestStatus>,
    /// Whether an offer for the guest has not been carried out yet.
    pub(crate) pending: bool,
    /// The revision serving, once recorded.
    pub(crate) revision: Option<u64>,
    pub(crate) owner: Option<&'a str>,
    pub(crate) shard: Option<u32>,
}

/// One condition, before its transition time is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Condition {
    pub(crate) type_: &'static str,
    pub(crate) status: bool,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

fn condition(
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
) -> Condition {
    Condition {
        type_,
        status,
        reason,
        message,
    }
}

/// Whether a revision serves: loaded, synced, not held, and reconciling here (failing keys
/// included: it runs). Only the replica that reconciles writes status, so `Standby` is never
/// its to report as serving.
fn serving(guest: Option<&GuestStatus>) -> bool {
    guest.is_some_and(|g| matches!(g.state, GuestState::Serving | GuestState::Failing))
}

/// The four conditions `view` calls for, in a fixed order.
pub(crate) fn conditions(view: &View<'_>) -> Vec<Condition> {
    let revision = match view.revision {
        Some(n) => format!("revision {n}"),
        None => "the module".to_string(),
    };
    vec![
        accepted(view, &revision),
        ready(view, &revision),
        progressing(view),
        degraded(view, &revision),
    ]
}

/// Whether the spec is valid and allowed, and what the policy cut.
fn accepted(view: &View<'_>, revision: &str) -> Condition {
    let serves = serving(view.guest);
    match view.accepted {
        Ok([]) => condition(
            "Accepted",
            true,
            "Valid",
            "the spec is valid and allowed".into(),
        ),
        Ok(cut) => condition(
            "Accepted",
            true,
            "Clamped",
            format!(
                "the spec is valid; the tenant policy cut it down ({}): ask the host's operator to raise [tenants] workers or limits for more",
                cut.join(", ")
            ),
        ),
        Err(r) => {
            let keeps = if serves {
                format!("; {revision} keeps serving")
            } else {
                String::new()
            };
            condition("Accepted", false, r.reason, format!("{}{keeps}", r.message))
        }
    }
}

/// Whether a revision serves.
fn ready(view: &View<'_>, revision: &str) -> Condition {
    let guest = view.guest;
    let last_error = guest.and_then(|g| g.last_error.clone());
    match (guest.map(|g| g.state), &view.accepted) {
        _ if view.suspended => condition(
            "Ready",
            false,
            "Suspended",
            "spec.suspend is true: nothing reconciles; set it to false to resume".into(),
        ),
        (Some(GuestState::Serving | GuestState::Failing), _) => {
            let digest = guest.and_then(|g| g.digest.as_deref()).unwrap_or("");
            condition(
                "Ready",
                true,
                "Serving",
                format!("{revision} serves (module sha256 {digest})"),
            )
        }
        (_, Err(r)) => condition(
            "Ready",
            false,
            "NotAccepted",
            format!("nothing serves: the spec is not accepted ({})", r.reason),
        ),
        (Some(GuestState::Waiting), _) => condition(
            "Ready",
            false,
            "Waiting",
            format!(
                "loaded, but its reconciles wait: {}",
                guest.and_then(|g| g.reason.clone()).unwrap_or_default()
            ),
        ),
        (Some(GuestState::Rejected), _) => condition(
            "Ready",
            false,
            "Rejected",
            format!(
                "no revision serves: {}",
                last_error
                    .clone()
                    .unwrap_or_else(|| "the module was rejected".into())
            ),
        ),
        (Some(GuestState::Standby), _) => condition(
            "Ready",
            false,
            "Standby",
            "loaded here, but this replica does not hold its shard".into(),
        ),
        (Some(GuestState::Loading) | None, _) => condition(
            "Ready",
            false,
            "Loading",
            "the module is being fetched and loaded".into(),
        ),
    }
}

/// The rollout of `guest`, while it runs.
fn rolling_out(guest: Option<&GuestStatus>) -> Option<&Progress> {
    guest?.rollout.as_ref().filter(|p| !p.ended())
}

/// Whether a new version is on its way.
fn progressing(view: &View<'_>) -> Condition {
    let loading = view.pending || view.guest.is_some_and(|g| g.state == GuestState::Loading);
    if let Some(p) = rolling_out(view.guest) {
        let message = match p.phase {
            Phase::Paused => format!(
                "sha256 {} is paused at {}% of keys; resume with `reconciled rollout resume`, or set spec.rollout.resume to a new value",
                p.digest, p.percent
            ),
            Phase::Halted => format!(
                "sha256 {} is halted at {}% of keys ({}): revert spec.module, or resume to go on",
                p.digest,
                p.percent,
                p.message.as_deref().unwrap_or("")
            ),
            _ => {
                let waiting = (p.waiting.as_deref())
                    .map(|w| format!("; {w}"))
                    .unwrap_or_default();
                format!(
                    "rolling out sha256 {}: {}, {}{waiting}",
                    p.digest,
                    p.step_label(),
                    p.summary()
                )
            }
        };
        condition("Progressing", true, "RollingOut", message)
    } else if loading && view.accepted.is_ok() && !view.suspended {
        condition(
            "Progressing",
            true,
            "Loading",
            "a new version is being fetched and loaded".into(),
        )
    } else {
        condition("Progressing", false, "Settled", "nothing is loading".into())
    }
}

/// Whether what serves is not what it should be: failing keys, a revision rolled back, a newer
/// version rejected. Of a rollback and a rejection, the newer says why.
fn degraded(view: &View<'_>, revision: &str) -> Condition {
    let serves = serving(view.guest);
    let rolled_back = |g: &GuestStatus| {
        (g.rollout.as_ref()).is_some_and(|p| {
            p.phase == Phase::RolledBack
                && !p.of(
                    g.digest.as_deref().unwrap_or_default(),
                    g.settings_hash.as_deref().unwrap_or_default(),
                )
                && !rejected_since(g, &p.since)
        })
    };
    match view.guest {
        Some(g) if g.state == GuestState::Failing => condition(
            "Degraded",
            true,
            "GuestFailing",
            // The count of failing keys is in /status, not here: it changes with every
            // reconcile, and a message that changes is written again.
            format!(
                "keys are failing (blame: {}): {}",
                g.blame.map_or("unknown", |b| b.label()),
                crate::text::one_line(g.reason.as_deref().unwrap_or(""))
            ),
        ),
        Some(g) if serves && rolled_back(g) => {
            let p = g.rollout.as_ref().expect("matched above");
            condition(
                "Degraded",
                true,
                "RolledBack",
                format!(
                    "sha256 {} was rolled back ({}) and {revision} keeps serving every key: {}; fix the module and set spec.module to a new build",
                    p.digest,
                    p.reason.as_deref().unwrap_or(""),
                    p.message.as_deref().unwrap_or("")
                ),
            )
        }
        Some(g) if serves && g.last_error.is_some() => condition(
            "Degraded",
            true,
            "NewVersionRejected",
            format!(
                "the newest module was rejected and {revision} keeps serving: {}",
                g.last_error.as_deref().unwrap_or("")
            ),
        ),
        _ => condition("Degraded", false, "AsExpected", "nothing is wrong".into()),
    }
}

/// Whether `g`'s last rejection happened after `since` (an RFC 3339 time): then it, not what
/// happened at `since`, is the news.
fn rejected_since(g: &GuestStatus, since: &str) -> bool {
    let parse = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().ok();
    g.last_error.is_some()
        && match (g.last_error_at.as_deref().and_then(parse), parse(since)) {
            (Some(rejected), Some(since)) => rejected > since,
            (Some(_), None) => true,
            (None, _) => false,
        }
}

/// The status document for `view`: `conditions` stamped with their transition times, keeping
/// each `lastTransitionTime` of `previous` (the status as the cache has it) whose status did not
/// change, and `now` for the others.
pub(crate) fn document(view: &View<'_>, previous: &Value, now: &str) -> Value {
    let conditions: Vec<Value> = conditions(view)
        .into_iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let since = previous["conditions"]
                .as_array()
                .and_then(|all| {
                    all.iter()
                        .find(|p| p["type"] == c.type_ && p["status"] == status)
                })
                .and_then(|p| p["lastTransitionTime"].as_str())
                .unwrap_or(now);
            json!({
                "type": c.type_,
                "status": status,
                "reason": c.reason,
                // The CRD allows 32 KiB; guest-made text is cut well below it.
                "message": crate::text::one_line(&c.message).chars().take(4096).collect::<String>(),
                "lastTransitionTime": since,
                "observedGeneration": view.generation,
            })
        })
        .collect();
    let mut doc = json!({
        "observedGeneration": view.generation,
        "conditions": conditions,
    });
    let put = |doc: &mut Value, k: &str, v: Value| {
        doc[k] = v;
    };
    if let Some(n) = view.revision {
        put(&mut doc, "currentRevision", json!(n));
    }
    if let Some(g) = view.guest {
        if let Some(d) = &g.digest {
            put(&mut doc, "digest", json!(d));
        }
        let r = &g.reconciles;
        put(&mut doc, "reconciles", json!(r.ok + r.failed + r.traps));
        put(
            &mut doc,
            "errors",
            json!({
                "guest": r.errors_by_blame.guest,
                "host": r.errors_by_blame.host,
                "cluster": r.errors_by_blame.cluster,
            }),
        );
        put(&mut doc, "traps", json!(r.traps));
        if let Some(p) = &g.rollout {
            let mut rollout = serde_json::to_value(p).unwrap_or_default();
            rollout["summary"] = json!(p.summary());
            if let Some(m) = p.message.as_deref() {
                rollout["message"] = json!(
                    crate::text::one_line(m)
                        .chars()
                        .take(4096)
                        .collect::<String>()
                );
            }
            put(&mut doc, "rollout", rollout);
        }
        let last = g.last_error.clone().or_else(|| {
            (g.state == GuestState::Failing)
                .then(|| g.reason.clone())
                .flatten()
        });
        if let Some(e) = last {
            put(
                &mut doc,
                "lastError",
                json!(
                    crate::text::one_line(&e)
                        .chars()
                        .take(4096)
                        .collect::<String>()
                ),
            );
        }
    }
    if let Some(o) = view.owner {
        put(&mut doc, "owner", json!(o));
    }
    if let Some(s) = view.shard {
        put(&mut doc, "shard", json!(s));
    }
    doc
}

/// The fields that change with every reconcile: written at the slower pace.
const COUNTS: [&str; 4] = ["reconciles", "errors", "traps", "lastError"];

/// The fields of `rollout` that change with every reconcile of a step.
const ROLLOUT_COUNTS: [&str; 5] = ["compared", "divergent", "reconciles", "errors", "summary"];

fn without_counts(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(o) = d.as_object_mut() {
        for k in COUNTS {
            o.remove(k);
        }
        if let Some(r) = o.get_mut("rollout").and_then(Value::as_object_mut) {
            for k in ROLLOUT_COUNTS {
                r.remove(k);
            }
        }
    }
    d
}

/// The last status written for a Reconciler, and when.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(crate) at: Instant,
    pub(crate) doc: Value,
}

/// How often status may be written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// Least time between two writes for one Reconciler.
    pub(crate) min_gap: Duration,
    /// Least time between two writes that change only counts.
    pub(crate) refresh: Duration,
}

/// Whether `doc` should be written now, after `last`.
pub(crate) fn due(last: Option<&Written>, doc: &Value, now: Instant, pace: Pace) -> bool {
    let Some(last) = last else {
        return true;
    };
    if &last.doc == doc {
        return false;
    }
    let since = now.saturating_duration_since(last.at);
    if without_counts(&last.doc) != without_counts(doc) {
        since >= pace.min_gap
    } else {
        since >= pace.refresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Blame;

    fn guest(state: GuestState) -> GuestStatus {
        GuestStatus {
            digest: Some("ab".repeat(32)),
            ..crate::ops::status::tests::guest("team-a/rec", state)
        }
    }

    fn view<'a>(
        guest: Option<&'a GuestStatus>,
        accepted: Result<&'a [String], &'a Refusal>,
    ) -> View<'a> {
        View {
            generation: 2,
            accepted,
            suspended: false,
            guest,
            pending: false,
            revision: Some(1),
            owner: Some("replica-a"),
            shard: Some(3),
        }
    }

    fn find(cs: &[Condition], t: &str) -> Condition {
        cs.iter().find(|c| c.type_ == t).unwrap().clone()
    }

    fn progress(phase: crate::rollout::progress::Phase) -> Progress {
        Progress {
            digest: "cd".repeat(32),
            settings_hash: "s".into(),
            step: 1,
            steps: 3,
            phase,
            percent: 10,
            min_reconciles: 50,
            compared: 0,
            divergent: 0,
            reconciles: 12,
            errors: 4,
            live_reconciles: 3,
            waiting: None,
            first_difference: None,
            reason: None,
            message: None,
            since: "2026-12-03T18:00:00.250000Z".into(),
        }
    }

    #[test]
    fn a_rollout_in_flight_is_progressing_and_one_rolled_back_is_degraded() {
        let mut g = guest(GuestState::Serving);
        g.rollout = Some(progress(Phase::Canary));
        let cs = conditions(&view(Some(&g), Ok(&[])));
        let p = find(&cs, "Progressing");
        assert_eq!((p.status, p.reason), (true, "RollingOut"));
        assert!(
            p.message.contains("step 2 of 3, canary 10%"),
            "{}",
            p.message
        );
        assert!(!find(&cs, "Degraded").status);
        assert!(
            find(&cs, "Ready").status,
            "the serving revision still serves"
        );

        let mut failed = progress(Phase::RolledBack);
        failed.reason = Some("Errors".into());
        failed.message = Some("at 10% of keys, 4 of 12 failed".into());
        g.rollout = Some(failed);
        let cs = conditions(&view(Some(&g), Ok(&[])));
        let d = find(&cs, "Degraded");
        assert_eq!((d.status, d.reason), (true, "RolledBack"));
        assert!(
            d.message.contains("(Errors)") && d.message.contains("4 of 12"),
            "{}",
            d.message
        );
        assert!(!find(&cs, "Progressing").status);

        // Once the rolled-back revision serves after all (a later, fixed rollout of the same
        // bytes is refused, but a pin may bring it), nothing is degraded.
        g.digest = Some("cd".repeat(32));
        g.settings_hash = Some("s".into());
        assert!(!find(&conditions(&view(Some(&g), Ok(&[]))), "Degraded").status);
    }

    #[test]
    fn a_settings_only_rollback_is_degraded_rolled_back() {
        // The same module serving, with the settings before the ones rolled back.
        let mut g = guest(GuestState::Serving);
        g.digest = Some("cd".repeat(32));
        g.settings_hash = Some("before".into());
        g.rollout = Some(progress(Phase::RolledBack));
        let d = find(&conditions(&view(Some(&g), Ok(&[]))), "Degraded");
        assert_eq!((d.status, d.reason), (true, "RolledBack"));
    }

    #[test]
    fn a_rejection_after_a_rollback_is_what_degraded_says() {
        let mut g = guest(GuestState::Serving);
        g.rollout = Some(progress(Phase::RolledBack));
        g.last_error = Some("cannot pull r.example/team-a/rec:3: manifest unknown".into());
        // Rejected before the rollback (its fence at 18:00:00.25): the rollback is the news.
        g.last_error_at = Some("2026-12-03T18:00:00.100000Z".into());
        let d = find(&conditions(&view(Some(&g), Ok(&[]))), "Degraded");
        assert_eq!(d.reason, "RolledBack");
        // Rejected after it, even within the same second: the rejection is.
        g.last_error_at = Some("2026-12-03T18:00:00.900000Z".into());
        let d = find(&conditions(&view(Some(&g), Ok(&[]))), "Degraded");
        assert_eq!((d.status, d.reason), (true, "NewVersionRejected"));
        assert!(d.message.contains("manifest unknown"), "{}", d.message);
    }

    #[test]
    fn progressing_names_the_step_as_every_message_does_and_says_what_it_waits_for() {
        let mut g = guest(GuestState::Serving);
        let mut p = progress(Phase::Canary);
        p.waiting = Some("waiting for traffic: 3 of 50 reconciles of live changes".into());
        g.rollout = Some(p);
        let m = find(&conditions(&view(Some(&g), Ok(&[]))), "Progressing").message;
        assert!(
            m.contains(
                "step 2 of 3, canary 10% (waiting for traffic); waiting for traffic: 3 of 50"
            ),
            "{m}"
        );
    }

    #[test]
    fn a_rollouts_counts_are_written_at_the_refresh_pace_and_its_step_at_once() {
        let mut g = guest(GuestState::Serving);
        g.rollout = Some(progress(Phase::Canary));
        let doc = |g: &GuestStatus| document(&view(Some(g), Ok(&[])), &Value::Null, "t");
        let first = doc(&g);
        assert_eq!(first["rollout"]["summary"], "canary 10%");
        let pace = Pace {
            min_gap: Duration::from_secs(1),
            refresh: Duration::from_secs(60),
        };
        let last = Written {
            at: Instant::now(),
            doc: first,
        };
        let soon = last.at + Duration::from_secs(5);
        g.rollout.as_mut().unwrap().reconciles += 10;
        assert!(
            !due(Some(&last), &doc(&g), soon, pace),
            "a count alone waits"
        );
        g.rollout.as_mut().unwrap().step = 2;
        assert!(
            due(Some(&last), &doc(&g), soon, pace),
            "a new step is written"
        );
    }

    #[test]
    fn a_serving_guest_is_ready_accepted_and_not_degraded() {
        let g = guest(GuestState::Serving);
        let cs = conditions(&view(Some(&g), Ok(&[])));
        assert!(find(&cs, "Ready").status && find(&cs, "Accepted").status);
        assert!(!find(&cs, "Degraded").status && !find(&cs, "Progressing").status);
        assert!(find(&cs, "Ready").message.starts_with("revision 1 serves"));
    }

    #[test]
    fn a_refused_edit_leaves_the_older_revision_serving_and_says_so() {
        let g = guest(GuestState::Serving);
        let refusal = Refusal {
            reason: "RegistryNotAllowed",
            message: "spec.module.image: registry evil.example is not one tenants may pull from"
                .into(),
        };
        let cs = conditions(&view(Some(&g), Err(&refusal)));
        let accepted = find(&cs, "Accepted");
        assert_eq!(
            (accepted.status, accepted.reason),
            (false, "RegistryNotAllowed")
        );
        assert!(
            accepted.message.ends_with("; revision 1 keeps serving"),
            "{}",
            accepted.message
        );
        assert!(find(&cs, "Ready").status, "the older revision serves");
        let cs = conditions(&view(None, Err(&refusal)));
        assert_eq!(find(&cs, "Ready").reason, "NotAccepted");
    }

    #[test]
    fn a_guest_that_cannot_reconcile_is_never_ready() {
        for state in [
            GuestState::Waiting,
            GuestState::Rejected,
            GuestState::Loading,
        ] {
            let mut g = guest(state);
            g.last_error = Some("describe trapped".into());
            let cs = conditions(&view(Some(&g), Ok(&[])));
            assert!(!find(&cs, "Ready").status, "{state:?}");
        }
        let mut g = guest(GuestState::Failing);
        g.blame = Some(Blame::Guest);
        g.failing_keys = Some(2);
        g.reason = Some("trap: unreachable".into());
        let cs = conditions(&view(Some(&g), Ok(&[])));
        let degraded = find(&cs, "Degraded");
        assert!(
            degraded.status && find(&cs, "Ready").status,
            "failing keys, still running"
        );
        assert_eq!(
            degraded.message,
            "keys are failing (blame: guest): trap: unreachable"
        );
    }

    #[test]
    fn suspend_and_a_rejected_new_version_read_as_such() {
        let g = guest(GuestState::Serving);
        let mut v = view(Some(&g), Ok(&[]));
        v.suspended = true;
        assert_eq!(find(&conditions(&v), "Ready").reason, "Suspended");
        let mut g = guest(GuestState::Serving);
        g.last_error = Some("the grant refuses kind v1/Secret".into());
        let cs = conditions(&view(Some(&g), Ok(&[])));
        assert_eq!(find(&cs, "Degraded").reason, "NewVersionRejected");
    }

    #[test]
    fn a_transition_time_is_kept_while_the_status_stays_and_set_when_it_changes() {
        let g = guest(GuestState::Serving);
        let first = document(
            &view(Some(&g), Ok(&[])),
            &Value::Null,
            "2026-01-01T00:00:00Z",
        );
        let again = document(&view(Some(&g), Ok(&[])), &first, "2026-01-01T00:05:00Z");
        assert_eq!(first, again, "nothing changed, nothing to write");
        let gone = guest(GuestState::Rejected);
        let later = document(&view(Some(&gone), Ok(&[])), &first, "2026-01-01T00:09:00Z");
        let ready = later["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:09:00Z");
        assert_eq!(later["owner"], "replica-a");
        assert_eq!(later["shard"], 3);
        assert_eq!(later["currentRevision"], 1);
    }

    #[test]
    fn counts_alone_are_written_at_the_refresh_pace_and_a_condition_at_the_shorter_one() {
        let pace = Pace {
            min_gap: Duration::from_secs(5),
            refresh: Duration::from_secs(60),
        };
        let t0 = Instant::now();
        let g = guest(GuestState::Serving);
        let doc = document(&view(Some(&g), Ok(&[])), &Value::Null, "t");
        assert!(due(None, &doc, t0, pace), "the first write is at once");
        let last = Written {
            at: t0,
            doc: doc.clone(),
        };
        assert!(
            !due(Some(&last), &doc, t0 + Duration::from_secs(600), pace),
            "unchanged"
        );
        let mut counted = doc.clone();
        counted["reconciles"] = json!(10);
        assert!(!due(
            Some(&last),
            &counted,
            t0 + Duration::from_secs(30),
            pace
        ));
        assert!(due(
            Some(&last),
            &counted,
            t0 + Duration::from_secs(60),
            pace
        ));
        let mut moved = doc.clone();
        moved["owner"] = json!("replica-b");
        assert!(!due(Some(&last), &moved, t0 + Duration::from_secs(1), pace));
        assert!(due(Some(&last), &moved, t0 + Duration::from_secs(5), pace));
    }
}
