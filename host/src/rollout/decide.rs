//! The step machine: what a rollout does next, from what was observed since its current step
//! began. Pure; the driver that owns the guest calls it on each look and acts on the verdict.
//!
//! Where it may surprise:
//! - A trap fails a canary step at once (a shadow's writes are compared, not its traps). The
//!   error rate is judged only once the step's `minReconciles` ran (of any cause), so that two
//!   errors in the first three reconciles do not roll back a good revision, while a 30% error
//!   rate is caught as soon as the step has its sample.
//! - Errors the cluster caused are not the revision's: only errors blamed on the guest count.
//! - A canary step passes only on traffic: `minReconciles` reconciles of live changes (never
//!   the keys that just moved to the new revision, nor the guest's own writes coming back),
//!   and at least its bake time. Until then it stays, and [`waiting`] says why.
//! - Latency is compared like with like (reconciles of live changes on both revisions) and
//!   only once each side has `minLatencySamples`; see [`latency`].
//! - A pause step waits for a person whatever the analysis says; nothing new runs meanwhile
//!   except the share already given.

use std::time::Duration;

use super::latency::{self, Judgement};
use super::spec::{CanaryStep, Rollout, Step};

/// What was observed since the current step began.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Reconciles the shadow compared, and how many of them diverged.
    pub compared: u64,
    pub divergent: u64,
    /// The latest divergence: the request and the first thing that differed.
    pub last_divergence: Option<String>,
    /// Where the latest divergence began: a JSON pointer into the write, with both values.
    pub first_difference: Option<String>,
    /// Reconciles the new revision ran for real (of any cause), its errors blamed on the
    /// guest, its traps.
    pub reconciles: u64,
    pub guest_errors: u64,
    pub traps: u64,
    /// Of `reconciles`, those of live changes: an object changed by someone other than the
    /// guest, or every key reconciled again by the rollout's `resyncInterval`.
    pub live: u64,
    /// The new revision's latest error or trap.
    pub last_error: Option<String>,
    /// Reconcile times of live changes, oldest first: the new revision's in this step, and
    /// the serving revision's in this step too (none at 100% of keys, whose latency is then
    /// not judged: the serving revision's earlier times are of another load).
    pub times: Vec<Duration>,
    pub serving_times: Vec<Duration>,
    /// Time spent in the step.
    pub in_step: Duration,
    /// A person resumed the rollout since the step began.
    pub resumed: bool,
}

/// Why a step failed: the condition's reason, and what a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `Divergence`, `Errors`, `Trap` or `Latency`.
    pub reason: &'static str,
    pub message: String,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Keep going as is: the step has not seen enough yet.
    Stay,
    /// A pause step: wait for a person.
    WaitForResume,
    /// Enter step `n`.
    Advance(usize),
    /// The steps are done: every key to the new revision.
    Promote,
    /// The analysis failed: the new revision's share to 0 at once, the serving one keeps
    /// every key.
    RollBack(Failure),
    /// The analysis failed with `autoRollback: false`: the share stays and nothing advances,
    /// until a person decides.
    Halt(Failure),
}

/// The share of keys on the new revision during step `step` (0 before any canary step; 100
/// past the last step).
pub fn share_at(rollout: &Rollout, step: usize) -> u32 {
    if step >= rollout.steps.len() {
        return 100;
    }
    rollout.steps[..=step]
        .iter()
        .filter_map(|s| match s {
            Step::Canary(c) => Some(c.percent),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Whether the new revision runs as a shadow during step `step`.
pub fn shadows_at(rollout: &Rollout, step: usize) -> bool {
    matches!(rollout.steps.get(step), Some(Step::Shadow(_)))
}

/// The least time a canary step lasts: its own `pause`, else the rollout's `bakeTime`.
pub fn bake_time(rollout: &Rollout, canary: &CanaryStep) -> Duration {
    canary.pause.unwrap_or(rollout.bake_time)
}

/// What `rollout` does next in step `step`, from `o`.
pub fn decide(rollout: &Rollout, step: usize, o: &Observed) -> Verdict {
    let Some(current) = rollout.steps.get(step) else {
        return Verdict::Promote;
    };
    let next = || {
        if step + 1 < rollout.steps.len() {
            Verdict::Advance(step + 1)
        } else {
            Verdict::Promote
        }
    };
    let fail = |f: Failure| {
        if rollout.auto_rollback {
            Verdict::RollBack(f)
        } else {
            Verdict::Halt(f)
        }
    };
    match current {
        Step::Shadow(s) => {
            if o.compared < s.min_reconciles.max(1) {
                return Verdict::Stay;
            }
            let ratio = o.divergent as f64 / o.compared as f64;
            if ratio > s.max_divergence {
                let at = o
                    .first_difference
                    .as_deref()
                    .map(|d| format!(", first at {d}"))
                    .unwrap_or_default();
                return fail(Failure {
                    reason: "Divergence",
                    message: format!(
                        "in shadow, {} of {} reconciles diverged ({:.1}%, more than {:.1}%); the latest: {}{at}",
                        o.divergent,
                        o.compared,
                        ratio * 100.0,
                        s.max_divergence * 100.0,
                        o.last_divergence.as_deref().unwrap_or("(not kept)")
                    ),
                });
            }
            next()
        }
        Step::Canary(c) => {
            if let Some(f) = analyse(rollout, c.percent, c.min_reconciles, o) {
                return fail(f);
            }
            if o.live >= c.min_reconciles.max(1) && o.in_step >= bake_time(rollout, c) {
                next()
            } else {
                Verdict::Stay
            }
        }
        Step::Pause(_) if o.resumed => next(),
        Step::Pause(_) => Verdict::WaitForResume,
    }
}

/// What step `step` waits for before it may pass, in words for its status, when it is not
/// waiting on its analysis alone: traffic, its bake time or a person. `None` once it has all
/// it needs (it passes at the driver's next look, unless the analysis fails it).
pub fn waiting(rollout: &Rollout, step: usize, o: &Observed) -> Option<String> {
    let resync = if rollout.resync_interval.is_some() {
        "its resyncInterval reconciles every key again"
    } else {
        "edit its objects, or set spec.rollout.resyncInterval to reconcile every key again that often"
    };
    match rollout.steps.get(step)? {
        Step::Shadow(s) => (o.compared < s.min_reconciles.max(1)).then(|| {
            format!(
                "waiting for traffic: {} of {} reconciles compared; {resync}",
                o.compared,
                s.min_reconciles.max(1)
            )
        }),
        Step::Canary(c) => {
            let min = c.min_reconciles.max(1);
            let bake = bake_time(rollout, c);
            if o.live < min {
                Some(format!(
                    "waiting for traffic: {} of {min} reconciles of live changes on the new revision (the keys that moved to it and its own writes do not count); {resync}",
                    o.live
                ))
            } else if o.in_step < bake {
                Some(format!(
                    "baking: {}s of the step's {}s",
                    o.in_step.as_secs(),
                    bake.as_secs()
                ))
            } else {
                None
            }
        }
        Step::Pause(_) => {
            Some("waiting for a person: reconciled rollout resume <guest> (or a new spec.rollout.resume) goes on".into())
        }
    }
}

/// The analysis of a canary step of `percent` with `min` reconciles: what fails it, if anything.
fn analyse(rollout: &Rollout, percent: u32, min: u64, o: &Observed) -> Option<Failure> {
    let a = &rollout.analysis;
    let latest = o.last_error.as_deref().unwrap_or("(not kept)");
    if o.traps > 0 {
        return Some(Failure {
            reason: "Trap",
            message: format!(
                "at {percent}% of keys, the new revision trapped {} time(s) in {} reconciles; the latest: {latest}",
                o.traps, o.reconciles
            ),
        });
    }
    if o.reconciles < min.max(1) {
        return None;
    }
    let rate = o.guest_errors as f64 / o.reconciles as f64;
    if rate > a.max_error_rate {
        return Some(Failure {
            reason: "Errors",
            message: format!(
                "at {percent}% of keys, {} of {} reconciles of the new revision failed by its own fault ({:.1}%, more than {:.1}%); the latest: {latest}",
                o.guest_errors,
                o.reconciles,
                rate * 100.0,
                a.max_error_rate * 100.0
            ),
        });
    }
    let min_samples = usize::try_from(a.min_latency_samples).unwrap_or(usize::MAX);
    if let Judgement::Slower {
        p99,
        serving_p99,
        z,
    } = latency::judge(&o.times, &o.serving_times, a.max_latency_ratio, min_samples)
    {
        return Some(Failure {
            reason: "Latency",
            message: format!(
                "at {percent}% of keys, the new revision's reconciles of live changes have a p99 of {p99:?}, more than {} times the serving revision's {serving_p99:?} over as many in the step, and are slower as a whole (Mann-Whitney z = {z:.1})",
                a.max_latency_ratio
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::spec::{Analysis, PauseStep, ShadowStep, Strategy};

    /// A progressive rollout of `steps` with no bake time: the tests of time set their own.
    fn rollout(steps: Vec<Step>) -> Rollout {
        Rollout {
            strategy: Strategy::Progressive,
            steps,
            analysis: Analysis::default(),
            bake_time: Duration::ZERO,
            ..Rollout::default()
        }
    }

    fn canary(percent: u32, min: u64) -> Step {
        Step::Canary(CanaryStep {
            percent,
            min_reconciles: min,
            pause: None,
        })
    }

    fn shadow(min: u64, max: f64) -> Step {
        Step::Shadow(ShadowStep {
            min_reconciles: min,
            max_divergence: max,
            ignore_paths: Vec::new(),
        })
    }

    /// `reconciles` of live changes, `guest_errors` of them failed.
    fn ran(reconciles: u64, guest_errors: u64) -> Observed {
        Observed {
            reconciles,
            live: reconciles,
            guest_errors,
            ..Observed::default()
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_revision_failing_a_third_of_its_keys_is_rolled_back_once_the_step_has_its_sample() {
        let r = rollout(vec![canary(10, 50), canary(50, 200), canary(100, 0)]);
        assert_eq!(
            decide(&r, 0, &ran(10, 4)),
            Verdict::Stay,
            "too few to judge"
        );
        let Verdict::RollBack(f) = decide(&r, 0, &ran(50, 15)) else {
            panic!("rolled back")
        };
        assert_eq!(f.reason, "Errors");
        assert!(
            f.message.contains("15 of 50 reconciles") && f.message.contains("30.0%"),
            "{}",
            f.message
        );
        assert_eq!(
            decide(&r, 0, &ran(50, 2)),
            Verdict::Advance(1),
            "4% is within 5%"
        );
    }

    #[test]
    fn errors_of_the_keys_that_moved_count_though_they_are_not_traffic() {
        // The first burst of moved keys: no live change yet, but a tenth of them fail.
        let r = rollout(vec![canary(10, 20), canary(100, 20)]);
        let moved = Observed {
            reconciles: 20,
            guest_errors: 2,
            ..Observed::default()
        };
        assert!(matches!(
            decide(&r, 0, &moved),
            Verdict::RollBack(Failure {
                reason: "Errors",
                ..
            })
        ));
    }

    #[test]
    fn moved_keys_alone_never_pass_a_canary_step() {
        let r = rollout(vec![canary(5, 10), canary(25, 10), canary(100, 10)]);
        let moved = Observed {
            reconciles: 500,
            in_step: Duration::from_secs(3600),
            ..Observed::default()
        };
        assert_eq!(decide(&r, 0, &moved), Verdict::Stay);
        let why = waiting(&r, 0, &moved).unwrap();
        assert!(
            why.starts_with("waiting for traffic: 0 of 10 reconciles of live changes"),
            "{why}"
        );
        assert!(why.contains("spec.rollout.resyncInterval"), "{why}");
        // Even a step asking for none needs one: a canary that saw no traffic proved nothing.
        let r = rollout(vec![canary(100, 0)]);
        assert_eq!(decide(&r, 0, &moved), Verdict::Stay);
        assert_eq!(decide(&r, 0, &ran(1, 0)), Verdict::Promote);
    }

    #[test]
    fn a_step_passes_no_sooner_than_its_bake_time() {
        let mut r = rollout(vec![canary(10, 5), canary(50, 5)]);
        r.bake_time = Duration::from_secs(30);
        let mut o = ran(50, 0);
        o.in_step = Duration::from_secs(12);
        assert_eq!(decide(&r, 0, &o), Verdict::Stay);
        assert_eq!(
            waiting(&r, 0, &o).as_deref(),
            Some("baking: 12s of the step's 30s")
        );
        o.in_step = Duration::from_secs(30);
        assert_eq!(decide(&r, 0, &o), Verdict::Advance(1));
        assert_eq!(waiting(&r, 0, &o), None);
    }

    #[test]
    fn a_trap_fails_a_canary_step_at_once() {
        let r = rollout(vec![canary(10, 50)]);
        let o = Observed {
            reconciles: 1,
            traps: 1,
            last_error: Some("unreachable executed".into()),
            ..Observed::default()
        };
        let Verdict::RollBack(f) = decide(&r, 0, &o) else {
            panic!("rolled back")
        };
        assert_eq!(f.reason, "Trap");
        assert!(
            f.message.ends_with("the latest: unreachable executed"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_divergent_shadow_fails_before_the_revision_writes_anything() {
        let r = rollout(vec![shadow(100, 0.0), canary(10, 50)]);
        let o = Observed {
            compared: 100,
            divergent: 1,
            last_divergence: Some("ns/a: patch data.v \"2\" against \"1\"".into()),
            first_difference: Some("/body/data/v: \"1\" -> \"2\"".into()),
            ..Observed::default()
        };
        let Verdict::RollBack(f) = decide(&r, 0, &o) else {
            panic!("rolled back")
        };
        assert_eq!(f.reason, "Divergence");
        assert!(
            f.message.contains("1 of 100 reconciles diverged")
                && f.message.ends_with("first at /body/data/v: \"1\" -> \"2\""),
            "{}",
            f.message
        );
        let clean = Observed {
            compared: 100,
            ..Observed::default()
        };
        assert_eq!(decide(&r, 0, &clean), Verdict::Advance(1));
        assert_eq!(share_at(&r, 0), 0, "a shadow writes nothing");
        assert!(shadows_at(&r, 0) && !shadows_at(&r, 1));
    }

    #[test]
    fn a_shadow_step_without_traffic_says_it_waits_for_it() {
        let mut r = rollout(vec![shadow(60, 0.01)]);
        let why = waiting(&r, 0, &Observed::default()).unwrap();
        assert!(
            why.starts_with("waiting for traffic: 0 of 60 reconciles compared; edit its objects"),
            "{why}"
        );
        r.resync_interval = Some(Duration::from_secs(60));
        let why = waiting(&r, 0, &Observed::default()).unwrap();
        assert!(
            why.ends_with("its resyncInterval reconciles every key again"),
            "{why}"
        );
    }

    #[test]
    fn a_slower_revision_fails_by_the_latency_ratio_on_live_changes() {
        let r = rollout(vec![canary(10, 10)]);
        let o = Observed {
            times: vec![ms(90); 40],
            serving_times: (0..200).map(|i| ms(28 + i % 5)).collect(),
            ..ran(40, 0)
        };
        assert!(matches!(
            decide(&r, 0, &o),
            Verdict::RollBack(Failure {
                reason: "Latency",
                ..
            })
        ));
        let fine = Observed {
            times: (0..40).map(|i| ms(28 + i % 5)).collect(),
            ..o.clone()
        };
        assert_eq!(decide(&r, 0, &fine), Verdict::Promote, "the last step done");
        let too_few = Observed {
            times: vec![ms(90); 10],
            ..o
        };
        assert_eq!(
            decide(&r, 0, &too_few),
            Verdict::Promote,
            "latency is not judged on fewer than minLatencySamples"
        );
    }

    #[test]
    fn a_pause_waits_for_a_person_and_a_canary_for_its_time() {
        let r = rollout(vec![
            Step::Canary(CanaryStep {
                percent: 10,
                min_reconciles: 1,
                pause: Some(Duration::from_secs(60)),
            }),
            Step::Pause(PauseStep {}),
            canary(50, 0),
        ]);
        let mut o = ran(5, 0);
        o.in_step = Duration::from_secs(30);
        assert_eq!(decide(&r, 0, &o), Verdict::Stay, "its pause not over");
        o.in_step = Duration::from_secs(60);
        assert_eq!(decide(&r, 0, &o), Verdict::Advance(1));
        assert_eq!(decide(&r, 1, &Observed::default()), Verdict::WaitForResume);
        assert!(
            waiting(&r, 1, &Observed::default())
                .unwrap()
                .starts_with("waiting for a person")
        );
        let resumed = Observed {
            resumed: true,
            ..Observed::default()
        };
        assert_eq!(decide(&r, 1, &resumed), Verdict::Advance(2));
        assert_eq!(
            share_at(&r, 1),
            10,
            "the share given before the pause stays"
        );
        assert_eq!(share_at(&r, 2), 50);
        assert_eq!(share_at(&r, 3), 100, "past the last step");
    }

    #[test]
    fn without_auto_rollback_a_failing_step_halts_where_it_is() {
        let mut r = rollout(vec![canary(10, 10)]);
        r.auto_rollback = false;
        assert!(matches!(
            decide(&r, 0, &ran(10, 10)),
            Verdict::Halt(Failure {
                reason: "Errors",
                ..
            })
        ));
    }
}
