//! The `reconciled_informer_*` families: requests, events, sync, silence and size of every
//! informer, whoever reads it.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{Labels, counter, family, flag, gauge};
use super::scrape::{Informer, Scrape};
use crate::informer::Stats;

impl Scrape {
    #[expect(
        clippy::too_many_lines,
        reason = "a list of metric families, one statement each in the order /metrics shows them: splitting it would only cut the list"
    )]
    pub(super) fn encode_informers(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
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
