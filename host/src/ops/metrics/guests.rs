//! The `reconciled_guest*` and `reconciled_module*` families: what only this host has, its guests
//! and their modules, failures by blame, worker panics.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{NO_LABELS, counter, family, flag, gauge};
use super::scrape::Scrape;
use crate::guest::Blame;

impl Scrape {
    #[expect(
        clippy::too_many_lines,
        reason = "a list of metric families, one statement each in the order /metrics shows them: splitting it would only cut the list"
    )]
    pub(super) fn encode_guests(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
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
}
