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

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
    MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::controller::Snapshot;
use crate::controller::fair_share::TenantUsage;
use crate::controller::reconciles::ReconcileResult;
use crate::guest::Blame;
use crate::informer::{Staleness, Stats};
use crate::ops::memory::encode_memory;
use crate::ops::metering::encode_metering;
use crate::ops::process::{Process, encode_process};
use crate::ops::replicas::encode_replicas;
use crate::ops::shadow::encode_shadow;
use crate::ops::status::GuestMemory;

/// The content type of what [`encode`] returns: OpenMetrics text 1.0, which Prometheus parses
/// by this header whatever it asked for.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Everything one scrape shows, gathered by the supervisor; [`encode`] renders it.
#[derive(Debug, Default)]
pub struct Scrape {
    /// Every guest configured or delivered, loaded or not.
    pub guests: Vec<Guest>,
    /// Guests unloaded since the host started.
    pub unloads: u64,
    /// Every informer running.
    pub informers: Vec<Informer>,
    /// The host process, if `/proc` could be read.
    pub process: Option<Process>,
    /// Each tenant's CPU and throttling.
    pub tenants: Vec<TenantUsage>,
    /// This replica among others, for a host that shares its guests.
    pub replicas: Option<crate::replicas::Snapshot>,
}

/// One guest in a [`Scrape`].
#[derive(Debug)]
pub struct Guest {
    /// The guest's name: `controller`, `name` or `guest` in the labels.
    pub name: String,
    /// Where its module comes from (`file …`, `configmap ns/name key k`).
    pub source: String,
    /// Versions swapped in (first load and reloads).
    pub loads: u64,
    /// Modules rejected, by reason label.
    pub rejections: Vec<(&'static str, u64)>,
    /// How long its last successful load took, from bytes to serving.
    pub last_load: Option<Duration>,
    /// Its controller, when a version serves; `None` leaves it out of every family but
    /// `reconciled_guest`, `reconciled_guest_serving` and the module families.
    pub controller: Option<Snapshot>,
    /// What it holds in memory, when a version serves (see `ops/memory.rs`).
    pub memory: Option<GuestMemory>,
}

/// One informer in a [`Scrape`].
#[derive(Debug)]
pub struct Informer {
    /// `group/version/Kind` (`v1/ConfigMap` for core kinds).
    pub kind: String,
    /// Its scope: namespaces, selectors.
    pub scope: String,
    /// Requests and events so far.
    pub stats: Stats,
    /// Whether its cache has synced.
    pub synced: bool,
    /// How fresh it is.
    pub staleness: Staleness,
    /// Objects in its cache.
    pub objects: usize,
    /// Bytes its objects hold.
    pub cached_bytes: u64,
}

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

/// Label sets of one or more labels, all of whose values are text.
type Labels<'a, const N: usize> = [(&'static str, &'a str); N];

pub(super) const NO_LABELS: Labels<'static, 0> = [];

/// Starts a family and lets `samples` add its samples; writes nothing unless `present` says
/// there is at least one.
///
/// A family without samples is left out, as the official clients leave it out: OpenMetrics
/// allows one, but a parser that groups lines by position cannot tell its `# HELP` and `# TYPE`
/// from the next family's.
///
/// `name` is without the `_total` of a counter, which the encoder appends: OpenMetrics names the
/// family, not the sample. Units are spelled in names and never declared in `# UNIT` lines, as
/// the Go client, and so controller-runtime, writes them.
pub(super) fn family(
    e: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    kind: MetricType,
    present: bool,
    samples: impl FnOnce(&mut MetricEncoder) -> std::fmt::Result,
) -> std::fmt::Result {
    // OpenMetrics help text has no escape for these, unlike 0.0.4's: a bug here, not input.
    debug_assert!(
        !help.contains(['"', '\\', '\n']),
        "help of {name} has a quote, backslash or newline"
    );
    if !present {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    samples(&mut m)
}

pub(super) fn counter(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    value: impl EncodeCounterValue,
) -> std::fmt::Result {
    ConstCounter::new(value).encode(m.encode_family(labels)?)
}

pub(super) fn gauge(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    value: impl EncodeGaugeValue,
) -> std::fmt::Result {
    ConstGauge::new(value).encode(m.encode_family(labels)?)
}

fn histogram(
    m: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    h: &Histogram,
) -> std::fmt::Result {
    h.encode(m.encode_family(labels)?)
}

/// 1 for yes, 0 for no: the convention for "is this so" gauges.
fn flag(b: bool) -> i64 {
    i64::from(b)
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
        if let Some(p) = &self.process {
            encode_process(&mut e, p)?;
        }
        Ok(())
    }
}

impl Scrape {
    fn encode_controller_runtime(
        &self,
        e: &mut DescriptorEncoder,
        controllers: &[(&str, &Snapshot)],
    ) -> std::fmt::Result {
        family(
            e,
            (
                "controller_runtime_reconcile",
                "Reconciles per controller (guest), by result: success, error (an error returned, a trap, or a worker panic), requeue (requeue-after 0) or requeue_after.",
            ),
            MetricType::Counter,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    for result in ReconcileResult::ALL {
                        let labels = [("controller", *name), ("result", result.label())];
                        counter(m, &labels, s.reconciles.count(result))?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "controller_runtime_reconcile_errors",
                "Failed reconciles per controller (guest): errors returned, traps and worker panics.",
            ),
            MetricType::Counter,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    let n = s.reconciles.count(ReconcileResult::Error);
                    counter(m, &[("controller", *name)], n)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "controller_runtime_reconcile_panics",
                "Reconciles per controller (guest) during which the host's worker panicked; each was retried.",
            ),
            MetricType::Counter,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    counter(m, &[("controller", *name)], s.reconciles.panics)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "controller_runtime_reconcile_time_seconds",
                "How long reconciles took per controller (guest), from a worker taking the key to handing it back.",
            ),
            MetricType::Histogram,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    histogram(m, &[("controller", *name)], &s.reconciles.time)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "controller_runtime_max_concurrent_reconciles",
                "Workers per controller (guest): the most reconciles it runs at once.",
            ),
            MetricType::Gauge,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    gauge(m, &[("controller", *name)], s.workers)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "controller_runtime_active_workers",
                "Workers per controller (guest) reconciling now.",
            ),
            MetricType::Gauge,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    gauge(m, &[("controller", *name)], s.reconciles.active_workers)?;
                }
                Ok(())
            },
        )
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a list of metric families, one statement each in the order /metrics shows them: splitting it would only cut the list"
    )]
    fn encode_work_queue(
        &self,
        e: &mut DescriptorEncoder,
        controllers: &[(&str, &Snapshot)],
    ) -> std::fmt::Result {
        let labels = |name| [("name", name), ("controller", name)];
        family(
            e,
            (
                "workqueue_depth",
                "Keys waiting in the guest's work queue, by priority (0, or -100 for keys from an initial list or resync): ready ones, and ones added again while being processed.",
            ),
            MetricType::Gauge,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    for (p, depth) in &s.queue.depth {
                        let labels = [
                            ("name", *name),
                            ("controller", *name),
                            ("priority", p.controller_runtime_label()),
                        ];
                        gauge(m, &labels, *depth)?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "workqueue_adds",
                "Keys added to the guest's work queue; adding a key already waiting does not count.",
            ),
            MetricType::Counter,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    counter(m, &labels(*name), s.queue.adds)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "workqueue_queue_duration_seconds",
                "How long keys waited in the guest's work queue, from added (or due, after a delay) to taken by a worker.",
            ),
            MetricType::Histogram,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    histogram(m, &labels(*name), &s.queue.queue_duration)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "workqueue_work_duration_seconds",
                "How long workers held keys of the guest's work queue, from taken to handed back.",
            ),
            MetricType::Histogram,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    histogram(m, &labels(*name), &s.queue.work_duration)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "workqueue_retries",
                "Delayed adds to the guest's work queue: retries after a failure, and requeue-after.",
            ),
            MetricType::Counter,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    counter(m, &labels(*name), s.queue.retries)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "workqueue_unfinished_work_seconds",
                "Seconds the keys being processed have been held so far, summed. Growing by more than one a second means that many workers are stuck.",
            ),
            MetricType::Gauge,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    let secs = s.queue.unfinished_work.as_secs_f64();
                    gauge(m, &labels(*name), secs)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "workqueue_longest_running_processor_seconds",
                "Seconds the longest-held key being processed has been held so far.",
            ),
            MetricType::Gauge,
            !controllers.is_empty(),
            |m| {
                for (name, s) in controllers {
                    let secs = s.queue.longest_running.as_secs_f64();
                    gauge(m, &labels(*name), secs)?;
                }
                Ok(())
            },
        )
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a list of metric families, one statement each in the order /metrics shows them: splitting it would only cut the list"
    )]
    fn encode_guests(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let guests = &self.guests;
        let running = guests.iter().any(|g| g.controller.is_some());
        family(
            e,
            (
                "reconciled_guest",
                "Guests by name, with the sha256 of the module serving (empty when none) and where it comes from.",
            ),
            MetricType::Info,
            !guests.is_empty(),
            |m| {
                for g in guests {
                    let digest = g.controller.as_ref().map_or("", |c| c.digest.as_str());
                    let labels = [
                        ("guest", g.name.as_str()),
                        ("digest", digest),
                        ("source", g.source.as_str()),
                    ];
                    m.encode_info(&labels)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_guest_serving",
                "1 while a version of the guest serves: loaded, its informers synced, and not failing.",
            ),
            MetricType::Gauge,
            !guests.is_empty(),
            |m| {
                for g in guests {
                    let serving = g
                        .controller
                        .as_ref()
                        .is_some_and(|c| c.failing.is_none() && c.held_back.is_none());
                    gauge(m, &[("guest", g.name.as_str())], flag(serving))?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_guest_failing",
                "1 while the guest cannot run: its last reconcile of some key trapped, or a worker died running it.",
            ),
            MetricType::Gauge,
            running,
            |m| {
                for g in guests {
                    if let Some(c) = &g.controller {
                        let failing = flag(c.failing.is_some());
                        gauge(m, &[("guest", g.name.as_str())], failing)?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_module_loads",
                "Versions of the guest swapped in (first load and reloads).",
            ),
            MetricType::Counter,
            !guests.is_empty(),
            |m| {
                for g in guests {
                    counter(m, &[("guest", g.name.as_str())], g.loads)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_module_rejections",
                "Modules rejected, by reason; the previous version, if any, kept serving.",
            ),
            MetricType::Counter,
            guests.iter().any(|g| !g.rejections.is_empty()),
            |m| {
                for g in guests {
                    for (reason, n) in &g.rejections {
                        counter(m, &[("guest", g.name.as_str()), ("reason", *reason)], *n)?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_module_load_seconds",
                "How long the guest's last successful load took, from bytes to serving.",
            ),
            MetricType::Gauge,
            guests.iter().any(|g| g.last_load.is_some()),
            |m| {
                for g in guests {
                    if let Some(t) = g.last_load {
                        gauge(m, &[("guest", g.name.as_str())], t.as_secs_f64())?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_module_unloads",
                "Guests unloaded (module or ConfigMap removed).",
            ),
            MetricType::Counter,
            true,
            |m| counter(m, &NO_LABELS, self.unloads),
        )?;
        family(
            e,
            (
                "reconciled_reconcile_errors",
                "Failed reconciles (errors, traps, worker panics) by blame: the guest's code, the host, or the API server (cluster).",
            ),
            MetricType::Counter,
            running,
            |m| {
                for g in guests {
                    if let Some(c) = &g.controller {
                        for b in Blame::ALL {
                            let labels = [("guest", g.name.as_str()), ("blame", b.label())];
                            counter(m, &labels, c.errors_by_blame[b as usize])?;
                        }
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_worker_panics",
                "Worker panics caught, in a reconcile or outside one; each worker was restarted and its key retried.",
            ),
            MetricType::Counter,
            running,
            |m| {
                for g in guests {
                    if let Some(c) = &g.controller {
                        counter(m, &[("guest", g.name.as_str())], c.worker_panics)?;
                    }
                }
                Ok(())
            },
        )
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a list of metric families, one statement each in the order /metrics shows them: splitting it would only cut the list"
    )]
    fn encode_informers(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let informers = &self.informers;
        fn labels(i: &Informer) -> Labels<'_, 2> {
            [("kind", i.kind.as_str()), ("scope", i.scope.as_str())]
        }
        type Field = fn(&Stats) -> u64;
        let counters: [(&str, &str, Field); 4] = [
            (
                "reconciled_informer_lists",
                "LIST requests (pages) made by the informer; after startup these grow only on a relist.",
                |s| s.lists,
            ),
            (
                "reconciled_informer_relists",
                "Relists after the initial sync (a watch expired or the connection broke for too long).",
                |s| s.relists,
            ),
            ("reconciled_informer_watches", "Watches opened.", |s| {
                s.watches
            }),
            (
                "reconciled_informer_events",
                "Watch events received.",
                |s| s.events,
            ),
        ];
        for (name, help, field) in counters {
            family(
                e,
                (name, help),
                MetricType::Counter,
                !informers.is_empty(),
                |m| {
                    for i in informers {
                        counter(m, &labels(i), field(&i.stats))?;
                    }
                    Ok(())
                },
            )?;
        }
        family(
            e,
            (
                "reconciled_informer_synced",
                "1 once the informer's cache has synced.",
            ),
            MetricType::Gauge,
            !informers.is_empty(),
            |m| {
                for i in informers {
                    gauge(m, &labels(i), flag(i.synced))?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_informer_silent_seconds",
                "Seconds since the API server last showed a sign of life for the informer (an event, a bookmark, a watch opened, a sync); its most silent watch counts. Absent until every watch has heard from the server.",
            ),
            MetricType::Gauge,
            informers.iter().any(|i| i.staleness.silent_for.is_some()),
            |m| {
                for i in informers {
                    if let Some(silent) = i.staleness.silent_for {
                        gauge(m, &labels(i), silent.as_secs_f64())?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_informer_resource_version",
                "The highest resourceVersion applied to the informer's cache.",
            ),
            MetricType::Gauge,
            !informers.is_empty(),
            |m| {
                for i in informers {
                    gauge(m, &labels(i), i.staleness.resource_version)?;
                }
                Ok(())
            },
        )?;
        family(
            e,
            (
                "reconciled_informer_objects",
                "Objects in the informer's cache.",
            ),
            MetricType::Gauge,
            !informers.is_empty(),
            |m| {
                for i in informers {
                    gauge(m, &labels(i), i.objects)?;
                }
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconciles::{RECONCILE_TIME_BUCKETS, Reconciles, WORK_QUEUE_BUCKETS};
    use crate::ops::process::tests::{LIMITS, STAT, SYSTEM};

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
