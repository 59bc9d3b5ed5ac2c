//! One run of a case to its fixed point: reconcile until a call changes nothing, make the
//! fixture's next change, settle again; under at most one [`Perturbation`].
//!
//! The guest's clock stands still except when a requeue-after fires, so that a perturbed run
//! stamps the same times as the reference wherever it does the same thing.

use std::time::Duration;

use crate::guest::bindings::Outcome as GuestOutcome;
use crate::offline::chaos::plans::Perturbation;
use crate::offline::chaos::trace::{Run, Step};
use crate::offline::fixture::Case;
use crate::offline::runner::{CaseError, Rig, Subject};
use crate::offline::server::Interference;

/// Runs `case` on `subject` under `perturbation` (none: the reference).
pub async fn run(
    subject: &Subject,
    case: &Case,
    perturbation: Option<&Perturbation>,
) -> Result<Run, CaseError> {
    let mut rig = subject.rig(case)?;
    let server = rig.server.clone();
    let mut steps: Vec<Step> = Vec::new();
    let mut now = case.now;
    let changes = &case.setup.changes;
    // The objects as the last step left them: the next step's `before`, unless a change came
    // between.
    let mut after = None;
    for phase in 0..=changes.len() {
        if phase > 0 {
            server.change(&changes[phase - 1])?;
            after = None;
            let skipped = matches!(perturbation, Some(Perturbation::SkipState { change })
                if *change as usize == phase);
            if skipped && phase < changes.len() {
                continue;
            }
        }
        let mut settled = false;
        for _ in 0..case.setup.settle.max(1) {
            let at = u32::try_from(steps.len() + 1).unwrap_or(u32::MAX);
            let mine = perturbation.filter(|p| p.at() == Some(at));
            let before = after.take().unwrap_or_else(|| server.objects());
            let (interference, relist) = prepare(mine, &mut rig, &steps);
            let written = server.writes().len();
            server.begin_call(interference);
            let reconciled = subject.reconcile(&rig, case, now).await;
            let interfered = server.end_call();
            if relist {
                // The host restarted, or its watch caught up: the caches hold what the server does.
                server.resync();
            }
            if interfered.crashed {
                rig.restart();
            }
            let (mut outcome, message) = crate::guest::tape::outcome_of(&reconciled.result);
            if interfered.crashed {
                outcome = "crashed".into();
            }
            let step = Step {
                writes: server.writes()[written..].to_vec(),
                outcome,
                message,
                interfered,
                before,
            };
            let requeue = match &reconciled.result {
                Ok(Ok(GuestOutcome::RequeueAfter(ms))) if !step.interfered.crashed => {
                    Some(Duration::from_millis(*ms))
                }
                _ => None,
            };
            let early = matches!(mine, Some(Perturbation::EarlyRequeue { .. }));
            if let (Some(after), false) = (requeue, early) {
                now += after;
            }
            // An apply that changes nothing is no write: only a changed object keeps it going.
            // A stale view catching up is an event too, which reconciles again.
            let now_held = server.objects();
            let quiet = now_held == step.before
                && !matches!(mine, Some(Perturbation::Stale { .. }))
                && !step.interfered.crashed
                && (step.outcome == "done" || requeue.is_some());
            after = Some(now_held);
            steps.push(step);
            // An early requeue is one more reconcile, however quiet this one was.
            if quiet && !early {
                settled = true;
                break;
            }
        }
        if !settled {
            return Ok(Run {
                steps,
                end: server.objects(),
                lifecycle: server.lifecycle(),
                unsettled: Some(phase),
            });
        }
    }
    Ok(Run {
        steps,
        end: server.objects(),
        lifecycle: server.lifecycle(),
        unsettled: None,
    })
}

/// Sets up the step's perturbation, if it has one: the interference its call runs under, and
/// whether the caches must relist after it (a crash, or a stale view catching up).
fn prepare(mine: Option<&Perturbation>, rig: &mut Rig, steps: &[Step]) -> (Interference, bool) {
    let mut interference = Interference::default();
    let mut relist = false;
    match mine {
        Some(Perturbation::CrashAfterWrite { write, .. }) => {
            interference.crash_after = Some(*write);
            relist = true;
        }
        Some(Perturbation::Inject { write, answer, .. }) => {
            interference.answer = Some((*write, answer.clone()));
        }
        Some(Perturbation::UnseenWrites { .. }) => interference.hold_feed = true,
        Some(Perturbation::Stale {
            object, seen_at, ..
        }) => {
            // Time travel: a restarted host whose watch a lagging API server serves.
            rig.restart();
            let seen = steps
                .get((*seen_at as usize).saturating_sub(1))
                .and_then(|s| s.before.get(object));
            rig.server.show(object, seen);
            relist = true;
        }
        _ => {}
    }
    (interference, relist)
}
