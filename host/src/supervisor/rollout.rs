//! The driver of a guest's progressive rollout: a task per staged revision that, on the replica
//! holding the guest's shard, asks [`decide`] what to do next and does it on the controller
//! (route, promote, roll back), posting an Event at each turn and publishing its [`Progress`]
//! for `/status`, `/metrics` and the Reconciler's status.
//!
//! Where it may surprise:
//! - Every replica stages the revision and runs a driver, but only the one whose gate is open
//!   decides; the others wait warm. One that takes over starts from the step its source last
//!   recorded (see [`Tracker::recorded`]), never from the beginning, and cannot promote twice:
//!   a promotion ends the rollout everywhere once the source offers the promoted revision as
//!   serving.
//! - A revision rolled back is refused while it is offered again with the same settings: a
//!   new digest or new settings is a new revision, which may roll out.
//! - A person resumes a pause (or a halt) by changing the rollout's `resume` token; its value
//!   when the revision was staged does not count.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::events::Poster;
use super::source::Source;
use crate::controller::{Controller, Route};
use crate::events::Type;
use crate::guest::settings::GuestSettings;
use crate::rollout::decide::{Failure, Verdict, decide, shadows_at, share_at};
use crate::rollout::progress::{Phase, Progress};
use crate::rollout::spec::Rollout;

/// How often the driver looks when no reconcile tells it to.
const TICK: Duration = Duration::from_millis(200);

/// One staged revision's rollout, as the supervisor keeps it beside the guest.
pub(crate) struct Tracker {
    pub(super) digest: String,
    pub(super) settings: GuestSettings,
    spec: Rollout,
    progress: watch::Sender<Progress>,
    resume_token: Mutex<Option<String>>,
    resumed: AtomicBool,
    recorded: AtomicUsize,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap().take() {
            task.abort();
        }
    }
}

/// The route of `spec` in `step`.
pub(crate) fn route_at(spec: &Rollout, step: usize) -> Route {
    Route {
        shadow: shadows_at(spec, step),
        percent: share_at(spec, step),
    }
}

impl Tracker {
    /// Where the rollout stands.
    pub(crate) fn progress(&self) -> Progress {
        self.progress.borrow().clone()
    }

    /// Whether it is over and the revision it rolled out was taken back.
    pub(super) fn rolled_back(&self) -> bool {
        self.progress.borrow().phase == Phase::RolledBack
    }

    /// Whether this tracker follows `digest` with `settings`.
    pub(super) fn follows(&self, digest: &str, settings: &GuestSettings) -> bool {
        self.digest == digest && &self.settings == settings
    }

    /// The rollout as offered again: a `resume` token that changed resumes a pause or a halt.
    pub(super) fn offered(&self, spec: &Rollout) {
        let mut token = self.resume_token.lock().unwrap();
        if spec.resume != *token {
            token.clone_from(&spec.resume);
            self.resumed.store(true, Ordering::SeqCst);
        }
    }

    /// Resumes a pause or a halt, as a changed `resume` token does.
    pub(super) fn resume(&self) {
        self.resumed.store(true, Ordering::SeqCst);
    }

    /// A step of this rollout recorded elsewhere (a Reconciler's status, written by the replica
    /// that drove it): a driver that takes over resumes from there.
    pub(super) fn recorded(&self, step: usize) {
        self.recorded.fetch_max(step, Ordering::SeqCst);
    }

    fn publish(&self, progress: Progress) {
        self.progress.send_replace(progress);
    }
}

/// Who the driver reports to.
pub(super) struct Reporting {
    pub(super) guest: String,
    pub(super) source: Source,
    pub(super) events: Poster,
}

/// Starts the rollout of the revision `controller` has just staged (`digest` with `settings`),
/// from `recorded_step`.
pub(super) fn start(
    controller: &Arc<Controller>,
    spec: &Rollout,
    digest: &str,
    settings: &GuestSettings,
    recorded_step: usize,
    reporting: Reporting,
) -> Arc<Tracker> {
    let step = recorded_step.min(spec.steps.len());
    let tracker = Arc::new(Tracker {
        digest: digest.to_string(),
        settings: settings.clone(),
        spec: spec.clone(),
        progress: watch::Sender::new(Progress::at(spec, digest, step, now())),
        resume_token: Mutex::new(spec.resume.clone()),
        resumed: AtomicBool::new(false),
        recorded: AtomicUsize::new(step),
        task: Mutex::new(None),
    });
    let task = tokio::spawn(drive(
        Arc::downgrade(&tracker),
        Arc::downgrade(controller),
        reporting,
    ));
    *tracker.task.lock().unwrap() = Some(task.abort_handle());
    tracker
}

fn now() -> String {
    crate::text::rfc3339(SystemTime::now())
}

/// The driver's loop; see the module docs.
async fn drive(tracker: Weak<Tracker>, controller: Weak<Controller>, r: Reporting) {
    let mut routed: Option<usize> = None;
    let mut halted = false;
    loop {
        // Judged after every reconcile the step counts, and at least every tick (a pause's
        // resume, a canary's least time, a gate that opened).
        let changed = controller.upgrade().and_then(|c| c.rollout_changed());
        match changed {
            Some(changed) => tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                () = changed.notified() => {}
            },
            None => tokio::time::sleep(TICK).await,
        }
        let (Some(t), Some(c)) = (tracker.upgrade(), controller.upgrade()) else {
            return;
        };
        // Superseded (another revision staged or swapped in): its own driver takes over.
        if !c
            .candidate()
            .is_some_and(|k| t.follows(&k.digest, &k.settings))
        {
            return;
        }
        if !c.gate().is_open() {
            routed = None;
            continue;
        }
        let step = t.recorded.load(Ordering::SeqCst);
        if routed != Some(step) {
            c.route(route_at(&t.spec, step));
            routed = Some(step);
            halted = false;
            t.publish(Progress::at(&t.spec, &t.digest, step, now()));
            continue;
        }
        let resumed = t.resumed.swap(false, Ordering::SeqCst);
        if halted {
            if resumed {
                advance(&t, &r, step + 1);
            }
            continue;
        }
        let Some(observed) = c.rollout_observed(resumed) else {
            return;
        };
        let mut progress = t.progress();
        progress.count(&observed);
        match decide(&t.spec, step, &observed) {
            Verdict::Stay | Verdict::WaitForResume => t.publish(progress),
            Verdict::Advance(next) => {
                t.publish(progress);
                advance(&t, &r, next);
            }
            Verdict::Promote => {
                c.promote().await;
                let mut done = Progress::at(&t.spec, &t.digest, t.spec.steps.len(), now());
                done.count(&observed);
                t.publish(done);
                let message = format!(
                    "guest {}: sha256 {} passed every step and now serves every key",
                    r.guest, t.digest
                );
                r.events.post(
                    &r.guest,
                    &r.source,
                    Type::Normal,
                    "RolloutPromoted",
                    message,
                );
                return;
            }
            Verdict::RollBack(failure) => {
                roll_back(&t, &c, &r, progress, step, &failure).await;
                return;
            }
            Verdict::Halt(failure) => {
                halted = true;
                progress.phase = Phase::Halted;
                progress.reason = Some(failure.reason.to_string());
                progress.message = Some(failure.message.clone());
                progress.since = now();
                t.publish(progress);
                let message = format!(
                    "guest {}: sha256 {} halted at step {step} with its share ({}), waiting for a person (autoRollback is off): {}",
                    r.guest, t.digest, failure.reason, failure.message
                );
                r.events
                    .post(&r.guest, &r.source, Type::Warning, "RolloutHalted", message);
            }
        }
    }
}

/// Takes the revision back after `failure` in `step`, and says so.
async fn roll_back(
    t: &Tracker,
    c: &Controller,
    r: &Reporting,
    mut progress: Progress,
    step: usize,
    failure: &Failure,
) {
    let rolled = c.roll_back(&failure.message).await;
    progress.phase = Phase::RolledBack;
    progress.percent = 0;
    progress.reason = Some(failure.reason.to_string());
    progress.message = Some(failure.message.clone());
    if let Some(rolled) = &rolled {
        progress.since = crate::text::rfc3339(rolled.at);
    }
    t.publish(progress);
    let message = format!(
        "guest {}: sha256 {} rolled back at step {step} ({}); the serving revision keeps every key: {}",
        r.guest, t.digest, failure.reason, failure.message
    );
    (r.events).post(
        &r.guest,
        &r.source,
        Type::Warning,
        "RolloutRolledBack",
        message,
    );
}

/// Moves the rollout to `step`: the next look routes it.
fn advance(t: &Tracker, r: &Reporting, step: usize) {
    t.recorded(step);
    let next = Progress::at(&t.spec, &t.digest, step, now());
    let message = format!(
        "guest {}: sha256 {} entered step {} of {}: {}",
        r.guest,
        t.digest,
        step + 1,
        t.spec.steps.len(),
        next.summary()
    );
    r.events
        .post(&r.guest, &r.source, Type::Normal, "RolloutStep", message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::spec::{CanaryStep, ShadowStep, Step, Strategy};

    fn tracker(resume: Option<&str>) -> Tracker {
        let spec = Rollout {
            resume: resume.map(str::to_string),
            ..Rollout::default()
        };
        Tracker {
            digest: "d".into(),
            settings: GuestSettings::default(),
            progress: watch::Sender::new(Progress::at(&spec, "d", 0, "t".into())),
            resume_token: Mutex::new(spec.resume.clone()),
            spec,
            resumed: AtomicBool::new(false),
            recorded: AtomicUsize::new(0),
            task: Mutex::new(None),
        }
    }

    #[test]
    fn only_a_changed_resume_token_resumes_and_only_once() {
        let t = tracker(Some("monday"));
        let offer = |token: Option<&str>| Rollout {
            resume: token.map(str::to_string),
            ..Rollout::default()
        };
        t.offered(&offer(Some("monday")));
        assert!(
            !t.resumed.load(Ordering::SeqCst),
            "the token it was staged with"
        );
        t.offered(&offer(Some("tuesday")));
        assert!(t.resumed.swap(false, Ordering::SeqCst));
        t.offered(&offer(Some("tuesday")));
        assert!(
            !t.resumed.load(Ordering::SeqCst),
            "the same token twice is one resume"
        );
    }

    #[test]
    fn a_recorded_step_only_grows() {
        let t = tracker(None);
        t.recorded(2);
        t.recorded(1);
        assert_eq!(t.recorded.load(Ordering::SeqCst), 2);
        assert!(t.follows("d", &GuestSettings::default()));
        assert!(!t.follows("e", &GuestSettings::default()));
    }

    #[test]
    fn a_step_routes_its_shadow_and_its_share() {
        let spec = Rollout {
            strategy: Strategy::Progressive,
            steps: vec![
                Step::Shadow(ShadowStep {
                    min_reconciles: 10,
                    max_divergence: 0.0,
                }),
                Step::Canary(CanaryStep {
                    percent: 10,
                    min_reconciles: 10,
                    pause: None,
                }),
            ],
            ..Rollout::default()
        };
        let seen: Vec<Route> = (0..3).map(|s| route_at(&spec, s)).collect();
        assert_eq!(
            seen,
            [
                Route {
                    shadow: true,
                    percent: 0
                },
                Route {
                    shadow: false,
                    percent: 10
                },
                Route {
                    shadow: false,
                    percent: 100
                },
            ]
        );
    }
}
