//! Where a rollout stands, in the shape `/status` shows and a Reconciler's `status.rollout`
//! records: the revision being rolled out, its step and share, what its step has seen, and how
//! it ended. Pure: the driver fills it in, the reporters read it.
//!
//! Where it may surprise:
//! - The counts are the current step's, not the rollout's: each step is judged on its own.
//! - A replica that takes a rollout over resumes at the recorded `step`; the counts of that step
//!   start again from zero there.
//! - `step` is an index into `spec.rollout.steps`, from 0; every message a person reads names a
//!   step from 1, as [`Progress::step_label`] writes it (`step 2 of 4`).

use serde::{Deserialize, Serialize};

use super::decide::{Observed, shadows_at, share_at};
use super::spec::{Rollout, Step};

/// What a rollout is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The new revision runs dry beside the serving one on every key.
    Shadow,
    /// A share of the keys runs on the new revision.
    Canary,
    /// Waiting for a person to resume.
    Paused,
    /// The analysis failed with `autoRollback: false`: the share stays, nothing advances.
    Halted,
    /// Every key runs on the new revision, which now serves.
    Promoted,
    /// The analysis failed: the new revision runs on no key.
    RolledBack,
    /// Another revision was staged or swapped in, or the serving one asked for again: this
    /// one runs on no key.
    Superseded,
}

/// A rollout's progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// sha256 of the revision rolled out.
    pub digest: String,
    /// The revision's settings, as a hash ([`settings_hash`]): a revision is its digest and its
    /// settings.
    #[serde(default)]
    pub settings_hash: String,
    /// The step it is in, from 0 (`steps` once promoted).
    pub step: usize,
    /// How many steps the rollout has.
    pub steps: usize,
    pub phase: Phase,
    /// Percent of keys on the new revision.
    pub percent: u32,
    /// What the step needs before it passes: reconciles compared (shadow) or run (canary).
    pub min_reconciles: u64,
    /// Shadow reconciles compared in this step, and how many diverged.
    pub compared: u64,
    pub divergent: u64,
    /// Reconciles the new revision ran for real in this step, and its errors (its own fault).
    pub reconciles: u64,
    pub errors: u64,
    /// Of `reconciles`, those of live changes: what a canary step's `minReconciles` counts.
    #[serde(default)]
    pub live_reconciles: u64,
    /// What the step waits for before it may pass (traffic, its bake time, a person), if
    /// anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Where the latest shadow divergence began: a JSON pointer into the write, and both
    /// values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<String>,
    /// Why it failed (`Divergence`, `Errors`, `Trap`, `Latency`) and what a person reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it entered this phase, RFC 3339 with microseconds (a `metav1.MicroTime`, cut,
    /// never rounded up); for a rollback, the instant of the fence: no write of the revision
    /// was sent after it.
    pub since: String,
}

impl Progress {
    /// The progress of `rollout` of `digest` with settings hashed `settings_hash` as it enters
    /// `step`.
    pub fn at(
        rollout: &Rollout,
        (digest, settings_hash): (&str, &str),
        step: usize,
        since: String,
    ) -> Self {
        let phase = match rollout.steps.get(step) {
            None => Phase::Promoted,
            Some(Step::Pause(_)) => Phase::Paused,
            Some(_) if shadows_at(rollout, step) => Phase::Shadow,
            Some(_) => Phase::Canary,
        };
        let min_reconciles = match rollout.steps.get(step) {
            Some(Step::Shadow(s)) => s.min_reconciles,
            Some(Step::Canary(c)) => c.min_reconciles,
            _ => 0,
        };
        Self {
            digest: digest.to_string(),
            settings_hash: settings_hash.to_string(),
            step,
            steps: rollout.steps.len(),
            phase,
            percent: share_at(rollout, step),
            min_reconciles,
            compared: 0,
            divergent: 0,
            reconciles: 0,
            errors: 0,
            live_reconciles: 0,
            waiting: None,
            first_difference: None,
            reason: None,
            message: None,
            since,
        }
    }

    /// Takes the step's counts from `o`.
    pub fn count(&mut self, o: &Observed) {
        self.compared = o.compared;
        self.divergent = o.divergent;
        self.reconciles = o.reconciles;
        self.live_reconciles = o.live;
        self.errors = o.guest_errors + o.traps;
        self.first_difference.clone_from(&o.first_difference);
    }

    /// The step as every message names it, counted from 1: `step 2 of 4`.
    pub fn step_label(&self) -> String {
        step_label(self.step, self.steps)
    }

    /// Whether the rollout is over (promoted, rolled back or superseded).
    pub fn ended(&self) -> bool {
        matches!(
            self.phase,
            Phase::Promoted | Phase::RolledBack | Phase::Superseded
        )
    }

    /// Whether this is the progress of `digest` with settings hashed `settings_hash`.
    pub fn of(&self, digest: &str, settings_hash: &str) -> bool {
        self.digest == digest && self.settings_hash == settings_hash
    }

    /// One short line, as the ROLLOUT printer column shows it: `shadow 140/200`, `canary 10%`,
    /// `canary 10% (waiting for traffic)`, `paused at 10%`, `halted at 10%`, `promoted`,
    /// `rolled back`.
    pub fn summary(&self) -> String {
        let traffic = if self
            .waiting
            .as_deref()
            .is_some_and(|w| w.starts_with("waiting for traffic"))
        {
            " (waiting for traffic)"
        } else {
            ""
        };
        match self.phase {
            Phase::Shadow => format!("shadow {}/{}{traffic}", self.compared, self.min_reconciles),
            Phase::Canary => format!("canary {}%{traffic}", self.percent),
            Phase::Paused => format!("paused at {}%", self.percent),
            Phase::Halted => format!("halted at {}%", self.percent),
            Phase::Promoted => "promoted".to_string(),
            Phase::RolledBack => "rolled back".to_string(),
            Phase::Superseded => "superseded".to_string(),
        }
    }
}

/// Step `step` (an index from 0) of `steps`, as a person reads it: `step 2 of 4`.
pub fn step_label(step: usize, steps: usize) -> String {
    format!("step {} of {steps}", step + 1)
}

/// A short, stable hash of `settings` (a JSON text): the 64-bit FNV-1a, hex.
pub fn settings_hash(settings: &str) -> String {
    let mut h = crate::fnv::Fnv::default();
    h.write(settings.as_bytes());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::spec::{Analysis, CanaryStep, PauseStep, ShadowStep, Strategy};

    fn rollout() -> Rollout {
        Rollout {
            strategy: Strategy::Progressive,
            steps: vec![
                Step::Shadow(ShadowStep {
                    min_reconciles: 200,
                    max_divergence: 0.0,
                    ignore_paths: Vec::new(),
                }),
                Step::Canary(CanaryStep {
                    percent: 10,
                    min_reconciles: 50,
                    pause: None,
                }),
                Step::Pause(PauseStep {}),
                Step::Canary(CanaryStep {
                    percent: 50,
                    min_reconciles: 100,
                    pause: None,
                }),
            ],
            analysis: Analysis::default(),
            ..Rollout::default()
        }
    }

    #[test]
    fn each_step_shows_its_phase_share_and_sample_in_one_short_line() {
        let r = rollout();
        let mut shadow = Progress::at(&r, ("d", "s"), 0, "t".into());
        shadow.count(&Observed {
            compared: 140,
            ..Observed::default()
        });
        let seen: Vec<String> = (1..=4)
            .map(|step| Progress::at(&r, ("d", "s"), step, "t".into()).summary())
            .collect();
        assert_eq!(shadow.summary(), "shadow 140/200");
        assert_eq!(
            seen,
            ["canary 10%", "paused at 10%", "canary 50%", "promoted"]
        );
        assert_eq!(
            Progress::at(&r, ("d", "s"), 1, "t".into()).min_reconciles,
            50
        );
        assert!(Progress::at(&r, ("d", "s"), 4, "t".into()).ended());
        let mut waiting = Progress::at(&r, ("d", "s"), 1, "t".into());
        waiting.waiting = Some("waiting for traffic: 0 of 50 reconciles".into());
        assert_eq!(waiting.summary(), "canary 10% (waiting for traffic)");
        assert_eq!(waiting.step_label(), "step 2 of 4");
    }

    #[test]
    fn errors_and_traps_count_together() {
        let mut p = Progress::at(&rollout(), ("d", "s"), 1, "t".into());
        p.count(&Observed {
            reconciles: 60,
            guest_errors: 17,
            traps: 1,
            ..Observed::default()
        });
        assert_eq!((p.reconciles, p.errors), (60, 18));
    }
}
