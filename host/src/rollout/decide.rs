//! The step machine: what a rollout does next, from what was observed since its current step
//! began. Pure; the driver that owns the guest calls it on each look and acts on the verdict.
//!
//! Where it may surprise:
//! - A trap fails a canary step at once (a shadow's writes are compared, not its traps). Error
//!   rate and latency are judged only once the step's
//!   `minReconciles` ran, so that two errors in the first three reconciles do not roll back a
//!   good revision, while a 30% error rate is caught as soon as the step has its sample.
//! - Errors the cluster caused are not the revision's: only errors blamed on the guest count.
//! - A pause step waits for a person whatever the analysis says; nothing new runs meanwhile
//!   except the share already given.

use std::time::Duration;

use super::spec::{Rollout, Step};

/// What was observed since the current step began.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Reconciles the shadow compared, and how many of them diverged.
    pub compared: u64,
    pub divergent: u64,
    /// The latest divergence: the request and the first thing that differed.
    pub last_divergence: Option<String>,
    /// Reconciles the new revision ran for real, its errors blamed on the guest, its traps.
    pub reconciles: u64,
    pub guest_errors: u64,
    pub traps: u64,
    /// The new revision's latest error or trap.
    pub last_error: Option<String>,
    /// Reconcile time p99 of the new and of the serving revision, when each has run.
    pub p99: Option<Duration>,
    pub serving_p99: Option<Duration>,
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
                return fail(Failure {
                    reason: "Divergence",
                    message: format!(
                        "in shadow, {} of {} reconciles diverged ({:.1}%, more than {:.1}%); the latest: {}",
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
            let waited = c.pause.is_none_or(|p| o.in_step >= p);
            if o.reconciles >= c.min_reconciles && waited {
                next()
            } else {
                Verdict::Stay
            }
        }
        Step::Pause(_) if o.resumed => next(),
        Step::Pause(_) => Verdict::WaitForResume,
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
    if let (Some(p99), Some(serving)) = (o.p99, o.serving_p99)
        && !serving.is_zero()
        && p99.as_secs_f64() > serving.as_secs_f64() * a.max_latency_ratio
    {
        return Some(Failure {
            reason: "Latency",
            message: format!(
                "at {percent}% of keys, the new revision's reconcile p99 is {p99:?}, more than {} times the serving revision's {serving:?}",
                a.max_latency_ratio
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::spec::{Analysis, CanaryStep, PauseStep, ShadowStep, Strategy};

    fn rollout(steps: Vec<Step>) -> Rollout {
        Rollout {
            strategy: Strategy::Progressive,
            steps,
            analysis: Analysis::default(),
            auto_rollback: true,
            resume: None,
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
        })
    }

    fn ran(reconciles: u64, guest_errors: u64) -> Observed {
        Observed {
            reconciles,
            guest_errors,
            ..Observed::default()
        }
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
            ..Observed::default()
        };
        let Verdict::RollBack(f) = decide(&r, 0, &o) else {
            panic!("rolled back")
        };
        assert_eq!(f.reason, "Divergence");
        assert!(
            f.message.contains("1 of 100 reconciles diverged"),
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
    fn a_slower_revision_fails_by_the_latency_ratio() {
        let r = rollout(vec![canary(10, 10)]);
        let o = Observed {
            reconciles: 10,
            p99: Some(Duration::from_millis(90)),
            serving_p99: Some(Duration::from_millis(30)),
            ..Observed::default()
        };
        assert!(matches!(
            decide(&r, 0, &o),
            Verdict::RollBack(Failure {
                reason: "Latency",
                ..
            })
        ));
        let fine = Observed {
            p99: Some(Duration::from_millis(50)),
            ..o
        };
        assert_eq!(decide(&r, 0, &fine), Verdict::Promote, "the last step done");
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
