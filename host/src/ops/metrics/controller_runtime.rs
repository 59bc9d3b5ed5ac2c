//! controller-runtime's `controller_runtime_*` and client-go's `workqueue_*` families, under the
//! names operators already chart and alert on, with a guest's name for the controller's.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{counter, family, gauge, histogram};
use super::scrape::Scrape;
use crate::controller::Snapshot;
use crate::controller::reconciles::ReconcileResult;

impl Scrape {
    pub(super) fn encode_controller_runtime(
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
    pub(super) fn encode_work_queue(
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
}
