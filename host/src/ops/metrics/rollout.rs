//! The rollout families of `/metrics`: per guest with a step-by-step rollout, the step it is in,
//! the share of keys on the new revision, what the step has seen, and how the rollout ended,
//! labelled with the new revision's digest (see [`crate::rollout`]).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{family, flag, gauge};
use super::scrape::Guest;
use crate::rollout::progress::{Phase, Progress};

/// Encodes the rollout families; nothing when no guest has had a rollout.
pub(super) fn encode_rollout(e: &mut DescriptorEncoder, guests: &[Guest]) -> std::fmt::Result {
    let rollouts: Vec<(&str, &Progress)> = guests
        .iter()
        .filter_map(|g| Some((g.name.as_str(), g.rollout.as_ref()?)))
        .collect();
    type Field = fn(&Progress) -> i64;
    let families: [(&str, &str, Field); 6] = [
        (
            "reconciled_rollout_step",
            "The step a guest's rollout of a new revision is in, from 0; the number of steps once promoted.",
            |p| p.step as i64,
        ),
        (
            "reconciled_rollout_share_percent",
            "Percent of a guest's keys that run on the revision being rolled out.",
            |p| i64::from(p.percent),
        ),
        (
            "reconciled_rollout_step_reconciles",
            "Reconciles the new revision ran for real in the current step (shadow steps compare instead).",
            |p| p.reconciles as i64,
        ),
        (
            "reconciled_rollout_step_errors",
            "Reconciles of the new revision in the current step that failed or trapped by its own fault.",
            |p| p.errors as i64,
        ),
        (
            "reconciled_rollout_step_divergent",
            "Shadow reconciles of the new revision in the current step whose writes differed from the serving revision's.",
            |p| p.divergent as i64,
        ),
        (
            "reconciled_rollout_rolled_back",
            "1 when the guest's latest rollout was rolled back by its analysis, else 0.",
            |p| flag(p.phase == Phase::RolledBack),
        ),
    ];
    for (name, help, field) in families {
        family(
            e,
            (name, help),
            MetricType::Gauge,
            !rollouts.is_empty(),
            |m| {
                for (guest, p) in &rollouts {
                    let labels = [("guest", *guest), ("revision", p.digest.as_str())];
                    gauge(m, &labels, field(p))?;
                }
                Ok(())
            },
        )?;
    }
    Ok(())
}
