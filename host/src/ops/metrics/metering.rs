//! The CPU families of `/metrics`: what each guest's calls used, and each tenant's use, budget
//! and throttling (see [`crate::controller::fair_share`]).
//!
//! Where it may surprise: a guest's CPU counter belongs to its controller and starts from zero
//! when the guest is reloaded with other settings or loaded again, while a tenant's counters run
//! from the host's start. The operator's own guests are the tenant `""`.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode::{counter, family, gauge};
use super::scrape::Guest;
use crate::controller::fair_share::TenantUsage;

/// Encodes the guest and tenant CPU families.
#[expect(
    clippy::too_many_lines,
    reason = "a list of metric families, one statement each in the order /metrics shows them: splitting it would only cut the list"
)]
pub(super) fn encode_metering(
    e: &mut DescriptorEncoder,
    guests: &[Guest],
    tenants: &[TenantUsage],
) -> std::fmt::Result {
    family(
        e,
        (
            "reconciled_guest_cpu_seconds",
            "CPU the guest's reconcile and map calls used, measured per call on the thread that ran it.",
        ),
        MetricType::Counter,
        guests.iter().any(|g| g.controller.is_some()),
        |m| {
            for g in guests {
                if let Some(c) = &g.controller {
                    let labels = [("guest", g.name.as_str()), ("tenant", c.tenant.as_str())];
                    counter(m, &labels, c.cpu.as_secs_f64())?;
                }
            }
            Ok(())
        },
    )?;
    let present = !tenants.is_empty();
    let each = |f: fn(&TenantUsage) -> f64| {
        move |m: &mut prometheus_client::encoding::MetricEncoder| {
            for t in tenants {
                counter(m, &[("tenant", t.tenant.as_str())], f(t))?;
            }
            Ok(())
        }
    };
    family(
        e,
        (
            "reconciled_tenant_cpu_seconds",
            "CPU the tenant's guests' calls used.",
        ),
        MetricType::Counter,
        present,
        each(|t| t.cpu.as_secs_f64()),
    )?;
    family(
        e,
        (
            "reconciled_tenant_compile_seconds",
            "Time the tenant's modules took to compile or load precompiled (wall time), charged to its CPU budget.",
        ),
        MetricType::Counter,
        present,
        each(|t| t.compile.as_secs_f64()),
    )?;
    family(
        e,
        (
            "reconciled_tenant_throttled_seconds",
            "Time the tenant's reconciles were held back because it was over its CPU budget.",
        ),
        MetricType::Counter,
        present,
        each(|t| t.throttled.as_secs_f64()),
    )?;
    family(
        e,
        (
            "reconciled_tenant_throttles",
            "Spells of throttling: times the tenant went over its CPU budget.",
        ),
        MetricType::Counter,
        present,
        |m| {
            for t in tenants {
                counter(m, &[("tenant", t.tenant.as_str())], t.throttles)?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_tenant_throttled",
            "1 while the tenant is over its CPU budget and its reconciles wait for it to refill.",
        ),
        MetricType::Gauge,
        present,
        |m| {
            for t in tenants {
                let on = i64::from(t.throttled_since.is_some());
                gauge(m, &[("tenant", t.tenant.as_str())], on)?;
            }
            Ok(())
        },
    )?;
    family(
        e,
        (
            "reconciled_tenant_cpu_budget_seconds_per_minute",
            "The tenant's CPU budget per minute, compile time included.",
        ),
        MetricType::Gauge,
        tenants.iter().any(|t| t.budget_per_minute.is_some()),
        |m| {
            for t in tenants {
                if let Some(b) = t.budget_per_minute {
                    gauge(m, &[("tenant", t.tenant.as_str())], b.as_secs_f64())?;
                }
            }
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::ops::metrics::{Scrape, encode};

    #[test]
    fn a_throttled_tenant_shows_its_cpu_budget_and_throttling() {
        let tenant = TenantUsage {
            tenant: "team-a".into(),
            weight: 1,
            cpu: Duration::from_millis(2500),
            compile: Duration::from_millis(500),
            used_last_minute: Duration::from_secs(3),
            budget_per_minute: Some(Duration::from_secs(2)),
            throttled_since: Some(SystemTime::now()),
            throttled: Duration::from_secs(4),
            throttles: 2,
            waiting: 1,
            running: 0,
        };
        let text = encode(Scrape {
            tenants: vec![tenant],
            ..Scrape::default()
        });
        for line in [
            "reconciled_tenant_cpu_seconds_total{tenant=\"team-a\"} 2.5\n",
            "reconciled_tenant_compile_seconds_total{tenant=\"team-a\"} 0.5\n",
            "reconciled_tenant_throttled_seconds_total{tenant=\"team-a\"} 4.0\n",
            "reconciled_tenant_throttles_total{tenant=\"team-a\"} 2\n",
            "reconciled_tenant_throttled{tenant=\"team-a\"} 1\n",
            "reconciled_tenant_cpu_budget_seconds_per_minute{tenant=\"team-a\"} 2.0\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        openmetrics_parser::openmetrics::parse_openmetrics(&text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}
