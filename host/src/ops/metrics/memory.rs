//! The memory families of `/metrics`: per guest, its share of the shared cache, its peak
//! instance memory and its compiled code; per informer, the bytes it caches.
//!
//! The shares are split, not counted in full: an informer read by k guests counts a k-th of its
//! bytes to each, so that summing `reconciled_guest_cached_bytes` over guests (or over one
//! tenant's) gives what their informers really hold, and a per-tenant cap on that sum is
//! honest. A guest's cost alone is the sum of its informers' `reconciled_informer_cached_bytes`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{family, gauge};
use super::scrape::{Guest, Informer};

/// Encodes the memory families of `guests` (those a version of which serves) and `informers`.
pub(super) fn encode_memory(
    e: &mut DescriptorEncoder,
    guests: &[Guest],
    informers: &[Informer],
) -> std::fmt::Result {
    let serving = || {
        guests
            .iter()
            .filter_map(|g| Some((g.name.as_str(), g.memory.as_ref()?)))
    };
    let any = serving().next().is_some();
    family(
        e,
        (
            "reconciled_guest_cached_bytes",
            "Bytes of the shared informer cache attributed to the guest: each informer its serving version reads, split evenly between the guests that read it, so that sums over guests (and over one tenant's guests, which the tenants' cache cap limits) add up to what the cache holds. What a guest would cost alone is the sum of its informers' reconciled_informer_cached_bytes.",
        ),
        MetricType::Gauge,
        any,
        |m| {
            for (name, mem) in serving() {
                gauge(m, &[("guest", name)], mem.cached_bytes)?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_guest_peak_instance_bytes",
            "The most linear memory one call into the guest (a reconcile or a map) held at once, over all its memories and every version since it started; each call gets a fresh instance, so this is the largest, not the sum.",
        ),
        MetricType::Gauge,
        any,
        |m| {
            for (name, mem) in serving() {
                gauge(m, &[("guest", name)], mem.peak_instance_bytes)?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_module_compiled_bytes",
            "Size of the native code image compiled from the guest's serving module (what the precompile cache stores); held once per loaded guest.",
        ),
        MetricType::Gauge,
        any,
        |m| {
            for (name, mem) in serving() {
                gauge(m, &[("guest", name)], mem.compiled_bytes)?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_informer_cached_bytes",
            "Bytes of the objects in the informer's cache (compact JSON and extracted keys, not its indexes), whoever reads them.",
        ),
        MetricType::Gauge,
        !informers.is_empty(),
        |m| {
            for i in informers {
                let labels = [("kind", i.kind.as_str()), ("scope", i.scope.as_str())];
                gauge(m, &labels, i.cached_bytes)?;
            }
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::ops::metrics::{Guest, Scrape, encode};
    use crate::ops::status::GuestMemory;

    fn guest(name: &str, memory: Option<GuestMemory>) -> Guest {
        Guest {
            name: name.into(),
            source: format!("configmap team-a/{name} key rec.wasm"),
            loads: 1,
            rejections: Vec::new(),
            last_load: None,
            controller: None,
            memory,
            rollout: None,
        }
    }

    #[test]
    fn a_serving_guests_memory_is_three_gauges_and_the_help_says_the_cache_is_split() {
        let memory = GuestMemory {
            cached_bytes: 3500,
            peak_instance_bytes: 1_179_648,
            compiled_bytes: 420_000,
        };
        let text = encode(Scrape {
            guests: vec![guest("a", Some(memory)), guest("b", None)],
            ..Scrape::default()
        });
        for line in [
            "reconciled_guest_cached_bytes{guest=\"a\"} 3500\n",
            "reconciled_guest_peak_instance_bytes{guest=\"a\"} 1179648\n",
            "reconciled_module_compiled_bytes{guest=\"a\"} 420000\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert!(
            !text.contains("reconciled_guest_cached_bytes{guest=\"b\"}"),
            "b serves nothing: {text}"
        );
        let help = text
            .lines()
            .find(|l| l.starts_with("# HELP reconciled_guest_cached_bytes "))
            .unwrap();
        assert!(help.contains("split evenly"), "{help}");
        openmetrics_parser::openmetrics::parse_openmetrics(&text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}
