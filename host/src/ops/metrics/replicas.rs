//! The replica families of `/metrics`: which shards this replica holds, how many replicas it
//! sees, and its Lease traffic (see [`crate::replicas`]).
//!
//! Where it may surprise: the counters are this replica's own since it started; a group's Lease
//! writes per second are the sum over its replicas.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{NO_LABELS, counter, family, gauge};
use crate::replicas::Snapshot;

/// Encodes the replica families; nothing for a host alone.
pub(super) fn encode_replicas(e: &mut DescriptorEncoder, r: Option<&Snapshot>) -> std::fmt::Result {
    let Some(r) = r else {
        return Ok(());
    };
    family(
        e,
        (
            "reconciled_shard_held",
            "1 if this replica holds the shard's Lease, so that the shard's guests reconcile here, else 0.",
        ),
        MetricType::Gauge,
        !r.shards.is_empty(),
        |m| {
            for s in &r.shards {
                let shard = s.shard.to_string();
                gauge(
                    m,
                    &[("shard", shard.as_str())],
                    i64::from(r.held.contains(&s.shard)),
                )?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        ("reconciled_shard_guests", "Guests hashed onto the shard."),
        MetricType::Gauge,
        !r.shards.is_empty(),
        |m| {
            for s in &r.shards {
                let shard = s.shard.to_string();
                gauge(m, &[("shard", shard.as_str())], i64::from(s.guests))?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_replicas_alive",
            "Replicas of the group this replica sees alive, itself included.",
        ),
        MetricType::Gauge,
        true,
        |m| gauge(m, &NO_LABELS, r.members.len() as i64),
    )?;
    family(
        e,
        (
            "reconciled_lease_transitions",
            "Shards this replica acquired, lost (renew deadline passed, or taken) or released (rebalance, shutdown).",
        ),
        MetricType::Counter,
        true,
        |m| {
            for (change, n) in [
                ("acquired", r.acquired),
                ("lost", r.lost),
                ("released", r.released),
            ] {
                counter(m, &[("change", change)], n)?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_lease_renew_failures",
            "Renewals of a held shard's Lease that failed; each is retried until the renew deadline.",
        ),
        MetricType::Counter,
        true,
        |m| counter(m, &NO_LABELS, r.renew_failures),
    )?;
    family(
        e,
        (
            "reconciled_lease_writes",
            "Lease writes this replica sent (creates, updates, deletes), whatever their outcome.",
        ),
        MetricType::Counter,
        true,
        |m| counter(m, &NO_LABELS, r.writes),
    )?;
    family(
        e,
        (
            "reconciled_leases_collected",
            "Stale Leases this replica deleted: replicas gone for several lease durations, shards beyond the shard count.",
        ),
        MetricType::Counter,
        true,
        |m| counter(m, &NO_LABELS, r.collected),
    )
}
