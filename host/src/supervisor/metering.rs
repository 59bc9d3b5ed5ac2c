//! What the supervisor reports about CPU: each tenant's line of `/status`, and the Events a
//! tenant's ConfigMap gets when the tenant goes over its CPU budget and comes back under it.

use std::sync::Weak;

use tokio::sync::watch;

use super::*;
use crate::controller::fair_share::{Spell, Spells};
use crate::ops::status::{GuestCpu, TenantStatus, Throttled};

impl Supervisor {
    /// Each tenant's CPU, budget and throttling, with the CPU of each of its serving guests.
    pub(super) fn tenant_status(&self) -> Vec<TenantStatus> {
        let controllers: Vec<Arc<Controller>> = self
            .guests
            .lock()
            .unwrap()
            .values()
            .filter_map(|e| e.controller.clone())
            .collect();
        self.scheduler
            .usage()
            .into_iter()
            .map(|t| {
                let budget_ms = t.budget_per_minute.map(|b| b.as_secs_f64() * 1000.0);
                let used_ms = t.used_last_minute.as_secs_f64() * 1000.0;
                TenantStatus {
                    throttled: t.throttled_since.map(|since| Throttled {
                        since: crate::text::rfc3339(since),
                        budget_ms_per_minute: budget_ms.unwrap_or_default(),
                        used_ms_last_minute: used_ms,
                    }),
                    guests: controllers
                        .iter()
                        .filter(|c| c.share().tenant() == t.tenant)
                        .map(|c| GuestCpu {
                            name: c.name().to_string(),
                            cpu_seconds: c.counters().cpu().as_secs_f64(),
                        })
                        .collect(),
                    tenant: t.tenant,
                    weight: t.weight,
                    cpu_seconds: t.cpu.as_secs_f64(),
                    compile_seconds: t.compile.as_secs_f64(),
                    used_ms_last_minute: used_ms,
                    cpu_budget_ms_per_minute: budget_ms,
                    throttled_seconds: t.throttled.as_secs_f64(),
                    throttles: t.throttles,
                }
            })
            .collect()
    }
}

/// Posts `CPUThrottled` (Warning) on the ConfigMap of a tenant's guest when that guest's call
/// takes its tenant over the CPU budget, and `CPUThrottleEnded` (Normal) when the tenant is
/// back under it. One Event per spell, on the guest that started it: a tenant with ten guests
/// gets one Warning, not ten. Ends with the controller.
pub(super) async fn report_throttling(
    controller: Weak<Controller>,
    mut spells: watch::Receiver<Spells>,
    events: Poster,
    source: Source,
) {
    let tenant = source.tenant().to_string();
    let Some(c) = controller.upgrade() else {
        return;
    };
    let guest = c.name().to_string();
    drop(c);
    let mut seen = already_reported(spells.borrow().get(&tenant), &guest);
    // What is there now is looked at first: this guest's own compile may have started a spell
    // before this reporter subscribed, and a spell that goes on sends no change.
    spells.mark_changed();
    while spells.changed().await.is_ok() {
        let Some(c) = controller.upgrade() else {
            return;
        };
        let Some(spell) = spells.borrow_and_update().get(&tenant).cloned() else {
            continue;
        };
        if spell.guest != c.name() || (spell.number, spell.ended) == seen {
            continue;
        }
        if spell.number > seen.0 {
            tracing::warn!(%tenant, guest = %c.name(), budget = ?spell.budget, used = ?spell.used, "tenant over its CPU budget: its reconciles are delayed until the budget refills");
            events.post(
                c.name(),
                &source,
                Type::Warning,
                "CPUThrottled",
                format!(
                    "tenant {tenant} is over its CPU budget of {} ms per minute (used {} ms in the last minute; this guest's call went over): reconciles of its guests are delayed, not failed, until the budget refills; make the guests cheaper, or ask the host's operator to raise [tenants] cpu_budget_ms_per_minute",
                    spell.budget.as_millis(),
                    spell.used.as_millis(),
                ),
            );
        }
        if spell.ended {
            tracing::info!(%tenant, guest = %c.name(), "tenant back under its CPU budget");
            events.post(
                c.name(),
                &source,
                Type::Normal,
                "CPUThrottleEnded",
                format!("tenant {tenant} is back under its CPU budget: its guests reconcile again"),
            );
        }
        seen = (spell.number, spell.ended);
    }
}

/// The spell a reporter starting now counts as reported, as `(number, ended)`: a spell another
/// guest started, or one already over, is not this reporter's to report; one this guest started
/// and that goes on (its own compile, charged to the tenant, took it over the budget before the
/// reporter subscribed) is, so nothing of it counts as reported yet.
///
/// Where it may surprise: a guest restarted for new settings during its own spell reports that
/// spell again, on its new start.
fn already_reported(spell: Option<&Spell>, guest: &str) -> (u64, bool) {
    match spell {
        Some(s) if s.guest == guest && !s.ended => (s.number.saturating_sub(1), true),
        Some(s) => (s.number, s.ended),
        None => (0, true),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn spell(guest: &str, number: u64, ended: bool) -> Spell {
        Spell {
            number,
            guest: guest.into(),
            budget: Duration::from_secs(6),
            used: Duration::from_secs(7),
            since: SystemTime::UNIX_EPOCH,
            ended,
        }
    }

    #[test]
    fn a_spell_another_guest_started_is_that_guests_to_report() {
        assert_eq!(
            already_reported(Some(&spell("t/a/rec", 3, false)), "t/b/rec"),
            (3, false)
        );
        assert_eq!(already_reported(None, "t/b/rec"), (0, true));
    }

    #[test]
    fn a_spell_the_guests_own_compile_started_before_its_reporter_is_still_reported() {
        let seen = already_reported(Some(&spell("t/b/rec", 3, false)), "t/b/rec");
        assert!(seen.0 < 3, "spell 3 is new to this reporter: {seen:?}");
        assert_eq!(
            already_reported(Some(&spell("t/b/rec", 3, true)), "t/b/rec"),
            (3, true),
            "a spell already over is not reported late"
        );
    }
}
