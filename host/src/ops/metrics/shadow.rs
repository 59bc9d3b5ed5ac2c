//! The shadow families of `/metrics`: per guest with a shadow version, the requests the shadow
//! reconciled beside the live version and those where it would have acted differently (see
//! [`crate::controller::shadow`]).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{counter, family};
use super::scrape::Guest;
use crate::controller::shadow::ShadowSnapshot;

/// Encodes the shadow families; nothing when no guest has a shadow.
pub(super) fn encode_shadow(e: &mut DescriptorEncoder, guests: &[Guest]) -> std::fmt::Result {
    let shadows: Vec<(&str, &ShadowSnapshot)> = guests
        .iter()
        .filter_map(|g| {
            let s = g.controller.as_ref()?.shadow.as_ref()?;
            Some((g.name.as_str(), s))
        })
        .collect();
    type Field = fn(&ShadowSnapshot) -> u64;
    let families: [(&str, &str, Field); 2] = [
        (
            "reconciled_shadow_reconciles",
            "Requests a guest's shadow version reconciled beside the live version, with dry-run writes.",
            |s| s.reconciles,
        ),
        (
            "reconciled_shadow_divergences",
            "Shadow reconciles whose writes, Events or outcome differed from the live version's on the same request.",
            |s| s.divergent,
        ),
    ];
    for (name, help, field) in families {
        family(
            e,
            (name, help),
            MetricType::Counter,
            !shadows.is_empty(),
            |m| {
                for (guest, s) in &shadows {
                    let labels = [("guest", *guest), ("shadow", s.digest.as_str())];
                    counter(m, &labels, field(s))?;
                }
                Ok(())
            },
        )?;
    }
    Ok(())
}
