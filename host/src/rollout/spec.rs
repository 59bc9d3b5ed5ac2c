//! What a rollout asks for, in the camelCase keys of the YAML below (the shape a Reconciler's
//! `spec.rollout` takes), read and checked.
//!
//! ```yaml
//! rollout:
//!   strategy: Progressive
//!   steps:
//!     - shadow: { minReconciles: 200, maxDivergence: 0.01, ignorePaths: [/metadata/annotations/stamp] }
//!     - canary: { percent: 10, minReconciles: 50, pause: 5m }
//!     - pause: {}
//!     - canary: { percent: 50, minReconciles: 200 }
//!   analysis: { maxErrorRate: 0.05, maxLatencyRatio: 2, minLatencySamples: 30 }
//!   bakeTime: 30s
//!   resyncInterval: 1m
//!   autoRollback: true
//! ```
//!
//! Where it may surprise:
//! - After the last step the new revision takes every key: a last step of `canary: {percent:
//!   100}` is allowed but adds only its wait.
//! - Shadow steps come first: once keys run on the new revision for real, a dry run of it
//!   beside the serving one would compare it with itself.
//! - Shares never shrink from one step to the next: a key that moved to the new revision moves
//!   back only on a rollback.
//! - A canary step's `minReconciles` counts reconciles of live changes only (an object edited,
//!   created or deleted by someone other than the guest, or a `resyncInterval` resync): the
//!   reconciles of the keys that just moved to the new revision, and of the guest's own writes
//!   coming back, prove nothing about how it meets the cluster. Errors and traps count in every
//!   reconcile.
//! - Every canary step lasts at least `bakeTime` (or its own `pause`), whatever it has seen.

use std::time::Duration;

use serde::Deserialize;

/// How a new revision replaces the serving one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Strategy {
    /// At once, between two reconciles (the default).
    #[default]
    Immediate,
    /// Step by step, as `steps` say.
    Progressive,
}

/// A rollout, as asked for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    #[serde(default)]
    pub strategy: Strategy,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub analysis: Analysis,
    /// Take a failing revision back without a person [true]; off, a failing step halts and
    /// waits, with the share it had.
    #[serde(default = "yes")]
    pub auto_rollback: bool,
    /// A token a person changes to resume a pause (or a halt): any new value resumes once,
    /// such as the time of asking. Its value when the revision was staged resumes nothing.
    #[serde(default)]
    pub resume: Option<String>,
    /// Least time in each canary step that names no `pause` of its own, `30s` by default: a
    /// step passes no sooner, whatever it has seen, so that its share has met what a while of
    /// the cluster's traffic brings. Shorten it for a demo.
    #[serde(default = "bake_time", deserialize_with = "required_duration")]
    pub bake_time: Duration,
    /// While a step waits for traffic, every key is reconciled again this often (on the
    /// revision its share gives it), and those reconciles count as traffic: a quiet cluster's
    /// rollout still advances. Off by default: then a step waits for real changes.
    #[serde(default, deserialize_with = "duration")]
    pub resync_interval: Option<Duration>,
}

// Every ratio is a finite number once `validate` passed, and a rollout is compared only to tell
// whether it changed: equality may be total.
impl Eq for Rollout {}

fn yes() -> bool {
    true
}

fn bake_time() -> Duration {
    Duration::from_secs(30)
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            strategy: Strategy::Immediate,
            steps: Vec::new(),
            analysis: Analysis::default(),
            auto_rollback: true,
            resume: None,
            bake_time: bake_time(),
            resync_interval: None,
        }
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Step {
    /// The new revision runs dry beside the serving one on every key, its writes compared.
    Shadow(ShadowStep),
    /// A share of the keys runs on the new revision for real.
    Canary(CanaryStep),
    /// Wait for a person to resume.
    Pause(PauseStep),
}

/// A shadow step: passes once `min_reconciles` were compared with at most `max_divergence` of
/// them divergent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShadowStep {
    pub min_reconciles: u64,
    /// A ratio, 0 to 1.
    #[serde(default)]
    pub max_divergence: f64,
    /// Parts of written objects that may differ without diverging, as JSON pointers into the
    /// object written (RFC 6901: `/metadata/annotations/example.com~1version`, where `~1`
    /// stands for `/` in a name): what a revision is expected to write differently, such as
    /// its own version stamp.
    #[serde(default)]
    pub ignore_paths: Vec<String>,
}

/// A canary step: `percent` of the keys on the new revision; passes once it ran
/// `min_reconciles` and `pause` went by, with the analysis passing all along.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStep {
    pub percent: u32,
    #[serde(default)]
    pub min_reconciles: u64,
    /// Least time in the step, `90s`, `5m` or `1h`.
    #[serde(default, deserialize_with = "duration")]
    pub pause: Option<Duration>,
}

/// A pause: nothing moves until a person resumes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseStep {}

/// What fails a step that runs the new revision for real.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Analysis {
    /// Errors blamed on the guest per reconcile of the new revision, 0 to 1 [0.05]. Errors the
    /// cluster caused (a conflict, a timeout) do not count; a trap always fails the step.
    #[serde(default = "max_error_rate")]
    pub max_error_rate: f64,
    /// The new revision's reconcile time p99 over the serving revision's, at least 1 \[2\],
    /// compared on reconciles of live changes alone (like with like), each side over its most
    /// recent ones, as many on each side. It fails a step only when the new revision is also
    /// slower as a whole (a one-sided Mann-Whitney test at the 0.1% level): a few slow outliers
    /// never roll a revision back.
    #[serde(default = "max_latency_ratio")]
    pub max_latency_ratio: f64,
    /// Reconciles of live changes each revision must have run before latency is judged \[30\].
    #[serde(default = "min_latency_samples")]
    pub min_latency_samples: u64,
}

fn max_error_rate() -> f64 {
    0.05
}

fn max_latency_ratio() -> f64 {
    2.0
}

fn min_latency_samples() -> u64 {
    30
}

impl Default for Analysis {
    fn default() -> Self {
        Self {
            max_error_rate: max_error_rate(),
            max_latency_ratio: max_latency_ratio(),
            min_latency_samples: min_latency_samples(),
        }
    }
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    text.map(|t| parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

fn required_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// `90s`, `5m`, `1h`, `250ms`: one number and one unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write 90s, 5m or 1h"))?;
    let unit = match unit {
        "ms" => Duration::from_millis(1),
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(format!("{text:?} is not a duration; write 90s, 5m or 1h")),
    };
    unit.checked_mul(u32::try_from(n).map_err(|_| format!("{text:?} is too long"))?)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Why a rollout is refused, naming the step at fault (`steps[2]`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// `Progressive` with no step.
    #[error(
        "rollout.strategy is Progressive but rollout.steps is empty; add a step, such as canary: {{percent: 10, minReconciles: 50}}"
    )]
    NoSteps,
    /// A share outside (0, 100].
    #[error(
        "rollout.steps[{step}].canary.percent is {percent}; a share is more than 0 and at most 100"
    )]
    Percent { step: usize, percent: u32 },
    /// A share smaller than an earlier one.
    #[error(
        "rollout.steps[{step}].canary.percent is {percent}, less than the {before}% of an earlier step; shares only grow (a rollback is what takes keys back)"
    )]
    Shrinks {
        step: usize,
        percent: u32,
        before: u32,
    },
    /// A shadow step after a canary step.
    #[error(
        "rollout.steps[{step}] is a shadow step after a canary step; put shadow steps first, before any key runs on the new revision"
    )]
    ShadowAfterCanary { step: usize },
    /// A ratio outside its range.
    #[error("rollout.{field} is {value}; it is a ratio from {min} to {max}")]
    Ratio {
        field: String,
        value: f64,
        min: f64,
        max: f64,
    },
    /// An ignored path that is not a JSON pointer.
    #[error(
        "rollout.steps[{step}].shadow.ignorePaths has {path:?}, which is not a JSON pointer; write it from the object's root, such as /metadata/annotations/example.com~1version (~1 stands for / in a name)"
    )]
    Pointer { step: usize, path: String },
    /// A resync interval of zero.
    #[error("rollout.resyncInterval is 0; leave it out, or give it a time such as 1m")]
    ResyncInterval,
}

impl Rollout {
    /// Whether a new revision rolls out step by step.
    pub fn progressive(&self) -> bool {
        self.strategy == Strategy::Progressive
    }

    /// Checks what no step can be run with; `Immediate` ignores the rest.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.strategy == Strategy::Immediate {
            return Ok(());
        }
        if self.steps.is_empty() {
            return Err(Invalid::NoSteps);
        }
        let ratio = |field: String, value: f64, min: f64, max: f64| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(Invalid::Ratio {
                    field,
                    value,
                    min,
                    max,
                })
            }
        };
        ratio(
            "analysis.maxErrorRate".into(),
            self.analysis.max_error_rate,
            0.0,
            1.0,
        )?;
        ratio(
            "analysis.maxLatencyRatio".into(),
            self.analysis.max_latency_ratio,
            1.0,
            f64::MAX,
        )?;
        if self.resync_interval.is_some_and(|i| i.is_zero()) {
            return Err(Invalid::ResyncInterval);
        }
        let mut share = 0;
        for (step, s) in self.steps.iter().enumerate() {
            match s {
                Step::Shadow(sh) => {
                    if share > 0 {
                        return Err(Invalid::ShadowAfterCanary { step });
                    }
                    ratio(
                        format!("steps[{step}].shadow.maxDivergence"),
                        sh.max_divergence,
                        0.0,
                        1.0,
                    )?;
                    if let Some(path) = sh.ignore_paths.iter().find(|p| !p.starts_with('/')) {
                        return Err(Invalid::Pointer {
                            step,
                            path: path.clone(),
                        });
                    }
                }
                Step::Canary(c) => {
                    if c.percent == 0 || c.percent > 100 {
                        return Err(Invalid::Percent {
                            step,
                            percent: c.percent,
                        });
                    }
                    if c.percent < share {
                        return Err(Invalid::Shrinks {
                            step,
                            percent: c.percent,
                            before: share,
                        });
                    }
                    share = c.percent;
                }
                Step::Pause(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(v: serde_json::Value) -> Result<Rollout, String> {
        let r: Rollout = serde_json::from_value(v).map_err(|e| e.to_string())?;
        r.validate().map_err(|e| e.to_string())?;
        Ok(r)
    }

    #[test]
    fn the_yaml_of_the_docs_reads_as_written() {
        let r = rollout(json!({
            "strategy": "Progressive",
            "steps": [
                {"shadow": {"minReconciles": 200, "maxDivergence": 0.01}},
                {"canary": {"percent": 10, "minReconciles": 50, "pause": "5m"}},
                {"pause": {}},
                {"canary": {"percent": 50, "minReconciles": 200}},
            ],
            "analysis": {"maxErrorRate": 0.05, "maxLatencyRatio": 2},
            "resyncInterval": "1m",
        }))
        .unwrap();
        assert_eq!(r.steps.len(), 4);
        assert!(r.auto_rollback, "on by default");
        assert_eq!(r.bake_time, Duration::from_secs(30), "30 s by default");
        assert_eq!(r.resync_interval, Some(Duration::from_secs(60)));
        assert_eq!(r.analysis.min_latency_samples, 30);
        assert_eq!(
            r.steps[1],
            Step::Canary(CanaryStep {
                percent: 10,
                min_reconciles: 50,
                pause: Some(Duration::from_secs(300)),
            })
        );
        assert_eq!(
            rollout(json!({})).unwrap(),
            Rollout::default(),
            "Immediate by default"
        );
    }

    #[test]
    fn each_bad_rollout_is_refused_naming_its_step() {
        for (v, says) in [
            (json!({"strategy": "Progressive"}), "rollout.steps is empty"),
            (
                json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 0}}]}),
                "steps[0].canary.percent is 0",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 101}}]}),
                "at most 100",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 50}}, {"canary": {"percent": 10}}]}),
                "steps[1].canary.percent is 10, less than the 50%",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 5}}, {"shadow": {"minReconciles": 1}}]}),
                "steps[1] is a shadow step after a canary step",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"shadow": {"minReconciles": 1, "maxDivergence": 2}}]}),
                "steps[0].shadow.maxDivergence is 2",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"pause": {}}], "analysis": {"maxLatencyRatio": 0.5}}),
                "analysis.maxLatencyRatio is 0.5",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 5, "pause": "soon"}}]}),
                "\"soon\" is not a duration",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"shadow": {"minReconciles": 1, "ignorePaths": ["metadata.annotations"]}}]}),
                "steps[0].shadow.ignorePaths has \"metadata.annotations\", which is not a JSON pointer",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"pause": {}}], "resyncInterval": "0s"}),
                "rollout.resyncInterval is 0",
            ),
            (
                json!({"strategy": "Progressive", "steps": [{"pause": {}}], "bakeTime": "soon"}),
                "\"soon\" is not a duration",
            ),
            (json!({"strategy": "Sudden"}), "unknown variant `Sudden`"),
            (
                json!({"strategy": "Progressive", "steps": [{"cannary": {"percent": 5}}]}),
                "unknown variant `cannary`",
            ),
        ] {
            let e = rollout(v.clone()).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
    }

    #[test]
    fn durations_read_with_one_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("99999999999h").is_err());
    }
}
