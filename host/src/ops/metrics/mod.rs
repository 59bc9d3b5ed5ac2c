//! `/metrics`: OpenMetrics text, encoded by `prometheus-client` from a [`Scrape`] of the host's
//! state taken when Prometheus asks.
//!
//! The families carry the names operators already chart and alert on:
//! - controller-runtime's `controller_runtime_*`, with `controller` = the guest's name;
//! - client-go's `workqueue_*`, with `name` = the guest's name (and `controller`, the same name,
//!   as controller-runtime adds), in controller-runtime's buckets;
//! - the standard process collector's `process_*`, read from `/proc`;
//! - `reconciled_*` for what only this host has: guests and their modules, failures by blame,
//!   worker panics, informers, CPU per guest and per tenant. These label the guest `guest` and
//!   the tenant `tenant` (empty for the operator's own guests).
//!
//! Where it may surprise:
//! - Counters and histograms belong to a guest's controller: a reload keeps them, but unloading
//!   the guest, or restarting it with other settings (grant, limits, workers), starts them from
//!   zero, which Prometheus reads as a counter reset. A guest no version of which serves shows
//!   in the `reconciled_*` families only.
//! - The text is OpenMetrics 1.0 and must be served as [`CONTENT_TYPE`]: a counter's `# TYPE`
//!   line names it without `_total`, and guest info is of type `info`, neither of which the older
//!   0.0.4 text format allows.
//! - The `process_*` families are left out where `/proc` cannot be read (not Linux).
//!
//! ```
//! use reconciled::ops::metrics::{Scrape, encode};
//!
//! let text = encode(Scrape { unloads: 2, ..Scrape::default() });
//! assert!(text.contains("\nreconciled_module_unloads_total 2\n"));
//! assert!(text.ends_with("# EOF\n"));
//! ```

mod controller_runtime;
mod encode;
mod guests;
mod informers;
mod memory;
pub mod metering;
pub mod process;
mod replicas;
mod rollout;
mod scrape;
mod shadow;

pub use scrape::{Guest, Informer, Scrape};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::controller::Snapshot;
use memory::encode_memory;
use metering::encode_metering;
use process::encode_process;
use replicas::encode_replicas;
use rollout::encode_rollout;
use shadow::encode_shadow;

/// The content type of what [`encode`](fn@encode) returns: OpenMetrics text 1.0, which Prometheus parses
/// by this header whatever it asked for.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders `scrape` as OpenMetrics text, `# EOF` included; serve it as [`CONTENT_TYPE`].
pub fn encode(scrape: Scrape) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut out = String::new();
    // Writing to a String does not fail, and neither does any encoder here.
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding to a String does not fail");
    out
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let controllers: Vec<(&str, &Snapshot)> = self
            .guests
            .iter()
            .filter_map(|g| g.controller.as_ref().map(|c| (g.name.as_str(), c)))
            .collect();
        self.encode_controller_runtime(&mut e, &controllers)?;
        self.encode_work_queue(&mut e, &controllers)?;
        self.encode_guests(&mut e)?;
        self.encode_informers(&mut e)?;
        encode_memory(&mut e, &self.guests, &self.informers)?;
        encode_metering(&mut e, &self.guests, &self.tenants)?;
        encode_replicas(&mut e, self.replicas.as_ref())?;
        encode_shadow(&mut e, &self.guests)?;
        encode_rollout(&mut e, &self.guests)?;
        if let Some(p) = &self.process {
            encode_process(&mut e, p)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconciles::{RECONCILE_TIME_BUCKETS, Reconciles, WORK_QUEUE_BUCKETS};
    use std::time::Duration;

    use crate::controller::reconciles::ReconcileResult;
    use crate::informer::{Staleness, Stats};
    use crate::ops::metrics::process::Process;
    use crate::ops::metrics::process::tests::{LIMITS, STAT, SYSTEM};

    #[test]
    fn an_empty_scrape_shows_only_the_unload_count() {
        assert_eq!(
            encode(Scrape::default()),
            "# HELP reconciled_module_unloads Guests unloaded (module or ConfigMap removed).\n\
             # TYPE reconciled_module_unloads counter\n\
             reconciled_module_unloads_total 0\n\
             # EOF\n"
        );
    }

    #[test]
    fn reconciles_count_results_time_and_active_workers() {
        let r = Reconciles::default();
        {
            let _a = r.active();
            let _b = r.active();
            assert_eq!(r.stats().active_workers, 2);
        }
        assert_eq!(
            r.stats().active_workers,
            0,
            "a dropped guard is not counted"
        );
        r.finished(ReconcileResult::Success, Duration::from_millis(30));
        r.finished(ReconcileResult::Error, Duration::from_millis(70));
        r.panicked();
        let s = r.stats();
        assert_eq!(s.results, [1, 1, 0, 0]);
        assert_eq!(s.panics, 1);
        assert_eq!(s.time.count(), 2);
        assert!((s.time.sum() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn buckets_are_controller_runtimes() {
        assert_eq!(RECONCILE_TIME_BUCKETS.first(), Some(&0.005));
        assert_eq!(RECONCILE_TIME_BUCKETS.last(), Some(&60.0));
        assert!(RECONCILE_TIME_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(WORK_QUEUE_BUCKETS.first(), Some(&1e-8));
        assert_eq!(WORK_QUEUE_BUCKETS.last(), Some(&1000.0));
        assert!(WORK_QUEUE_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_process_renders_the_go_collectors_names() {
        let process = Process::parse(STAT, SYSTEM, LIMITS, 12, 100.0, 4096).unwrap();
        let text = encode(Scrape {
            process: Some(process),
            ..Scrape::default()
        });
        for line in [
            "process_cpu_seconds_total 3.0\n",
            "process_resident_memory_bytes 8388608\n",
            "process_virtual_memory_bytes 987654321\n",
            "process_start_time_seconds 1700001234.0\n",
            "process_open_fds 12\n",
            "process_max_fds 1024\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_scrape_parses_as_openmetrics_even_with_quotes_and_commas_in_labels() {
        let informer = Informer {
            kind: "v1/ConfigMap".into(),
            scope: r#"ns=a,b labels=app in (x,y),note="q\" fields=metadata.name!=z"#.into(),
            stats: Stats {
                lists: 2,
                ..Stats::default()
            },
            synced: true,
            staleness: Staleness {
                silent_for: Some(Duration::from_millis(1500)),
                resource_version: 42,
            },
            objects: 7,
            cached_bytes: 7000,
        };
        let text = encode(Scrape {
            guests: vec![Guest {
                name: "team-a/rec/rec".into(),
                source: "configmap team-a/rec key rec.wasm".into(),
                loads: 0,
                rejections: vec![("grant", 2)],
                last_load: None,
                controller: None,
                memory: None,
                rollout: None,
            }],
            unloads: 1,
            informers: vec![informer],
            process: Some(Process::parse(STAT, SYSTEM, LIMITS, 12, 100.0, 4096).unwrap()),
            tenants: Vec::new(),
            replicas: None,
        });
        let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let scope = parsed.families["reconciled_informer_lists"]
            .iter_samples()
            .next()
            .unwrap()
            .get_labelset()
            .unwrap()
            .get_label_value("scope")
            .map(str::to_owned);
        assert_eq!(
            scope.as_deref(),
            Some(r#"ns=a,b labels=app in (x,y),note="q\" fields=metadata.name!=z"#)
        );
        assert!(
            !parsed.families.contains_key("controller_runtime_reconcile"),
            "a guest with no version serving has no controller"
        );
        for family in [
            "reconciled_guest",
            "reconciled_module_rejections",
            "reconciled_informer_silent_seconds",
            "reconciled_informer_cached_bytes",
            "process_resident_memory_bytes",
            "process_cpu_seconds",
        ] {
            assert!(
                parsed.families.contains_key(family),
                "no {family} in\n{text}"
            );
        }
    }
}
