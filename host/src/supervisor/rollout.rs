//! The driver of a guest's progressive rollout: a task per staged revision that, on the replica
//! holding the guest's shard, asks [`decide`] what to do next and does it on the controller
//! (route, promote, roll back), posting an Event at each turn and publishing its [`Progress`]
//! for `/status`, `/metrics` and the Reconciler's status.
//!
//! Where it may surprise:
//! - Every replica stages the revision and runs a driver, but only the one whose gate is open
//!   judges it; the others wait warm. Each learns from its source what the driving replica
//!   recorded (see [`Tracker::recorded`]): one that takes over resumes at that step, never from
//!   the beginning, and a rollout recorded as promoted or rolled back is promoted or rolled back
//!   here too, quietly (the Event was posted once, by the replica that decided).
//! - A revision rolled back is refused while it is offered again with the same settings: a new
//!   digest or new settings is a new revision, which may roll out.
//! - A person resumes a pause (or a halt) by changing the rollout's `resume` token; its value
//!   when the revision was staged does not count, and a resume is forgotten when the rollout
//!   enters another step.
//! - A driver that takes over a rollout recorded as under way (a replica taking the shard, a
//!   host restarted) posts `RolloutResumed` when it first drives it; only the stage of a rollout
//!   nobody recorded posts `RolloutStarted`.
//! - While a step waits for traffic, a `resyncInterval` queues every key again that often, as
//!   traffic; the first resync comes one interval into the step, after the keys that moved.
//! - A rollout needs a serving revision to roll out beside. A Reconciler's source starts the one
//!   its status records first on a host where the guest does not run yet (see
//!   `sources/reconciler/spec.rs`); a guest of the host config with no version serving, or one
//!   restarted for new settings (grant, limits, workers), loads the revision asked for at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::events::Poster;
use super::source::Source;
use crate::controller::{Controller, Route};
use crate::events::Type;
use crate::guest::settings::GuestSettings;
use crate::rollout::decide::{Failure, Verdict, decide, shadows_at, share_at, waiting};
use crate::rollout::progress::{Phase, Progress, settings_hash, step_label};
use crate::rollout::spec::{Rollout, Step};

/// How often the driver looks when no reconcile tells it to.
const TICK: Duration = Duration::from_millis(200);

/// One staged revision's rollout, as the supervisor keeps it beside the guest.
pub(crate) struct Tracker {
    pub(super) digest: String,
    pub(super) settings: GuestSettings,
    spec: Rollout,
    progress: watch::Sender<Progress>,
    /// The hash of `settings`, as progress records it.
    settings_hash: String,
    resume_token: Mutex<Option<String>>,
    resumed: AtomicBool,
    /// The step to be in: advanced by this driver, or recorded by the driving replica.
    step: AtomicUsize,
    /// How the driving replica recorded the rollout's end, if it ended there.
    ended_elsewhere: Mutex<Option<Progress>>,
    /// It learned its step from a record of the rollout under way: whoever drives it first here
    /// resumes it.
    from_record: AtomicBool,
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

/// The parts of written objects `spec`'s step `step` lets a shadow's writes differ in.
fn ignored_at(spec: &Rollout, step: usize) -> &[String] {
    match spec.steps.get(step) {
        Some(Step::Shadow(s)) => &s.ignore_paths,
        _ => &[],
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

    /// The progress of this rollout as the replica that drives it recorded it (a Reconciler's
    /// status): a step to resume from, or an end to follow. Progress of another revision is
    /// ignored. Whether it was this rollout under way: then this tracker resumes it.
    pub(super) fn recorded(&self, progress: &Progress) -> bool {
        if !progress.of(&self.digest, &self.settings_hash) {
            return false;
        }
        match progress.phase {
            Phase::Promoted | Phase::RolledBack => {
                *self.ended_elsewhere.lock().unwrap() = Some(progress.clone());
                false
            }
            Phase::Superseded => false,
            _ => {
                self.from_record.store(true, Ordering::SeqCst);
                // Shown at once, so that a replica taking over writes the step it resumes at
                // even before its driver's first look.
                let before = self.step.fetch_max(progress.step, Ordering::SeqCst);
                if progress.step > before && !self.progress.borrow().ended() {
                    self.publish(self.at(progress.step));
                }
                true
            }
        }
    }

    /// The progress of this rollout entering `step` now.
    fn at(&self, step: usize) -> Progress {
        Progress::at(&self.spec, (&self.digest, &self.settings_hash), step, now())
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
/// at step 0: the caller hands it what was recorded ([`Tracker::recorded`]).
pub(super) fn start(
    controller: &Arc<Controller>,
    spec: &Rollout,
    (digest, settings): (&str, &GuestSettings),
    reporting: Reporting,
) -> Arc<Tracker> {
    let settings_hash = settings_hash(settings.as_str());
    let tracker = Arc::new(Tracker {
        digest: digest.to_string(),
        settings: settings.clone(),
        spec: spec.clone(),
        progress: watch::Sender::new(Progress::at(spec, (digest, &settings_hash), 0, now())),
        settings_hash,
        resume_token: Mutex::new(spec.resume.clone()),
        resumed: AtomicBool::new(false),
        step: AtomicUsize::new(0),
        ended_elsewhere: Mutex::new(None),
        from_record: AtomicBool::new(false),
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
    crate::text::micro_time(SystemTime::now())
}

/// The driver's loop; see the module docs.
async fn drive(tracker: Weak<Tracker>, controller: Weak<Controller>, r: Reporting) {
    // The step this driver routed, while its gate is open; the step it last entered, kept
    // across a closed gate, so that a halt or a resume is not forgotten there.
    let (mut routed, mut entered): (Option<usize>, Option<usize>) = (None, None);
    let mut halted = false;
    // Whether this driver has driven the rollout yet (its gate open once).
    let mut driven = false;
    // The last resync of the step waiting for traffic (`resyncInterval`), or its start.
    let mut resynced = Instant::now();
    loop {
        wait(&controller).await;
        let (Some(t), Some(c)) = (tracker.upgrade(), controller.upgrade()) else {
            return;
        };
        // Superseded (another revision staged or swapped in, or the serving one asked for
        // again): its own driver, if any, takes over.
        if !(c.candidate()).is_some_and(|k| t.follows(&k.digest, &k.settings)) {
            let mut progress = t.progress();
            if !progress.ended() {
                progress.phase = Phase::Superseded;
                progress.since = now();
                t.publish(progress);
            }
            return;
        }
        let ended = t.ended_elsewhere.lock().unwrap().clone();
        if let Some(ended) = ended {
            follow(&t, &c, ended).await;
            return;
        }
        if !c.gate().is_open() {
            routed = None;
            continue;
        }
        let step = t.step.load(Ordering::SeqCst);
        if !driven {
            driven = true;
            if t.from_record.load(Ordering::SeqCst) {
                post_resumed(&t, &r, step);
            }
        }
        if routed != Some(step) {
            c.route(route_at(&t.spec, step), ignored_at(&t.spec, step));
            routed = Some(step);
            if entered != Some(step) {
                entered = Some(step);
                halted = false;
                resynced = Instant::now();
                t.resumed.store(false, Ordering::SeqCst);
                t.publish(t.at(step));
            }
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
            continue;
        };
        let mut progress = t.progress();
        progress.count(&observed);
        progress.waiting = waiting(&t.spec, step, &observed);
        if resync_due(&t.spec, &progress, resynced) {
            resynced = Instant::now();
            c.resync_rollout();
        }
        match decide(&t.spec, step, &observed) {
            Verdict::Stay | Verdict::WaitForResume => t.publish(progress),
            Verdict::Advance(next) => {
                t.publish(progress);
                advance(&t, &r, next);
            }
            Verdict::Promote => {
                if c.promote(&t.digest, &t.settings).await.is_none() {
                    continue;
                }
                let mut done = t.at(t.spec.steps.len());
                done.count(&observed);
                t.publish(done);
                post_promoted(&t, &r);
                return;
            }
            Verdict::RollBack(failure) => {
                roll_back(&t, &c, &r, progress, step, &failure).await;
                return;
            }
            Verdict::Halt(failure) => {
                halted = true;
                halt(&t, &r, progress, step, &failure);
            }
        }
    }
}

/// Says that the rollout promoted its revision.
fn post_promoted(t: &Tracker, r: &Reporting) {
    let message = format!(
        "guest {}: sha256 {} passed every step and now serves every key",
        r.guest, t.digest
    );
    (r.events).post(
        &r.guest,
        &r.source,
        Type::Normal,
        "RolloutPromoted",
        message,
    );
}

/// Says that this driver resumed the rollout at `step`, as recorded by another (a replica that
/// took the shard over, a host restarted).
fn post_resumed(t: &Tracker, r: &Reporting, step: usize) {
    let message = format!(
        "guest {}: resumed the rollout of sha256 {} at {} as recorded: {}",
        r.guest,
        t.digest,
        step_label(step, t.spec.steps.len()),
        t.at(step).summary()
    );
    (r.events).post(&r.guest, &r.source, Type::Normal, "RolloutResumed", message);
}

/// Whether `spec` wants every key reconciled again now: its step waits for traffic, and its
/// `resyncInterval` went by since the step began or since the last resync, `resynced`.
fn resync_due(spec: &Rollout, progress: &Progress, resynced: Instant) -> bool {
    let for_traffic =
        (progress.waiting.as_deref()).is_some_and(|w| w.starts_with("waiting for traffic"));
    spec.resync_interval
        .is_some_and(|every| for_traffic && resynced.elapsed() >= every)
}

/// Halts the rollout after `failure` in `step` (`autoRollback: false`), with its share, and
/// says so.
fn halt(t: &Tracker, r: &Reporting, mut progress: Progress, step: usize, failure: &Failure) {
    progress.phase = Phase::Halted;
    progress.waiting = Some(
        "waiting for a person: the analysis failed and autoRollback is off; resume, or revert spec.module"
            .into(),
    );
    progress.reason = Some(failure.reason.to_string());
    progress.message = Some(failure.message.clone());
    progress.since = now();
    t.publish(progress);
    let message = format!(
        "guest {}: sha256 {} halted at {} with its share ({}), waiting for a person (autoRollback is off): {}",
        r.guest,
        t.digest,
        step_label(step, t.spec.steps.len()),
        failure.reason,
        failure.message
    );
    (r.events).post(&r.guest, &r.source, Type::Warning, "RolloutHalted", message);
}

/// Waits for a reconcile the step counts, or a tick at most (a pause's resume, a canary's least
/// time, a gate that opened are seen at the next tick).
async fn wait(controller: &Weak<Controller>) {
    let changed = controller.upgrade().and_then(|c| c.rollout_changed());
    match changed {
        Some(changed) => tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            () = changed.notified() => {}
        },
        None => tokio::time::sleep(TICK).await,
    }
}

/// Does here what the driving replica recorded, `ended`: promote or roll back, without an
/// Event (that replica posted it).
async fn follow(t: &Tracker, c: &Controller, ended: Progress) {
    match ended.phase {
        Phase::Promoted => {
            c.promote(&t.digest, &t.settings).await;
        }
        _ => {
            let why = "rolled back by the replica that drove the rollout";
            c.roll_back(&t.digest, &t.settings, why).await;
        }
    }
    t.publish(ended);
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
    let rolled = (c.roll_back(&t.digest, &t.settings, &failure.message)).await;
    progress.phase = Phase::RolledBack;
    progress.percent = 0;
    progress.reason = Some(failure.reason.to_string());
    progress.message = Some(failure.message.clone());
    if let Some(rolled) = &rolled {
        progress.since = crate::text::micro_time(rolled.at);
    }
    progress.waiting = None;
    t.publish(progress);
    let message = format!(
        "guest {}: sha256 {} rolled back at {} ({}) at {}; the serving revision keeps every key: {}",
        r.guest,
        t.digest,
        step_label(step, t.spec.steps.len()),
        failure.reason,
        t.progress().since,
        failure.message
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
    t.step.fetch_max(step, Ordering::SeqCst);
    let next = t.at(step);
    let message = format!(
        "guest {}: sha256 {} entered {}: {}",
        r.guest,
        t.digest,
        next.step_label(),
        next.summary()
    );
    r.events
        .post(&r.guest, &r.source, Type::Normal, "RolloutStep", message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::spec::{CanaryStep, ShadowStep, Strategy};

    fn tracker(resume: Option<&str>) -> Tracker {
        let canary = |percent| {
            Step::Canary(CanaryStep {
                percent,
                min_reconciles: 10,
                pause: None,
            })
        };
        let spec = Rollout {
            strategy: Strategy::Progressive,
            steps: vec![canary(10), canary(50), canary(100)],
            resume: resume.map(str::to_string),
            ..Rollout::default()
        };
        Tracker {
            digest: "d".into(),
            settings: GuestSettings::default(),
            progress: watch::Sender::new(Progress::at(&spec, ("d", "s"), 0, "t".into())),
            settings_hash: "s".into(),
            resume_token: Mutex::new(spec.resume.clone()),
            spec,
            resumed: AtomicBool::new(false),
            step: AtomicUsize::new(0),
            ended_elsewhere: Mutex::new(None),
            from_record: AtomicBool::new(false),
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
    fn a_recorded_step_only_grows_and_only_this_revisions_counts() {
        let t = tracker(None);
        let spec = Rollout::default();
        let at = |digest: &str, hash: &str, step: usize, phase: Phase| Progress {
            phase,
            ..Progress::at(&spec, (digest, hash), step, "t".into())
        };
        assert!(!t.from_record.load(Ordering::SeqCst));
        assert!(
            t.recorded(&at("d", "s", 2, Phase::Canary)),
            "under way: resumed"
        );
        assert!(t.from_record.load(Ordering::SeqCst));
        t.recorded(&at("d", "s", 1, Phase::Canary));
        assert_eq!(t.step.load(Ordering::SeqCst), 2);
        assert_eq!(
            t.progress().step,
            2,
            "shown at once: a replica taking over writes the step it resumes at"
        );
        // Another digest, or the same digest with other settings, is another revision.
        assert!(!t.recorded(&at("e", "s", 5, Phase::Canary)));
        assert!(!t.recorded(&at("d", "other", 5, Phase::RolledBack)));
        assert_eq!(t.step.load(Ordering::SeqCst), 2);
        assert!(t.ended_elsewhere.lock().unwrap().is_none());
        assert!(
            !t.recorded(&at("d", "s", 2, Phase::RolledBack)),
            "ended: followed"
        );
        assert_eq!(
            t.ended_elsewhere.lock().unwrap().as_ref().map(|p| p.phase),
            Some(Phase::RolledBack),
            "a standby follows the end the driving replica recorded"
        );
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
                    ignore_paths: vec!["/metadata/annotations/v".into()],
                }),
                Step::Canary(CanaryStep {
                    percent: 10,
                    min_reconciles: 10,
                    pause: None,
                }),
            ],
            ..Rollout::default()
        };
        assert_eq!(ignored_at(&spec, 0), ["/metadata/annotations/v"]);
        assert!(ignored_at(&spec, 1).is_empty());
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
