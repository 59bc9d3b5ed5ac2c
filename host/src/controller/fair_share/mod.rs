//! Fair share: one scheduler for the whole host that hands out reconcile slots by weighted fair
//! queuing, across tenants first and then across each tenant's guests, and holds back a tenant
//! that has spent its CPU budget.
//!
//! Every controller keeps its own work queue and workers; a worker that has taken a key asks
//! here for a slot before it calls the guest, and gives it back with the CPU the call measured.
//! The number of slots bounds how many guest calls run at once, host-wide (by default one per
//! core, and at least two), so a tenant with 10 000 keys and many workers cannot crowd out one
//! with a single key.
//!
//! A slot is not taken back from a call that holds it: a guest spinning to a 10 s deadline holds
//! its slot for 10 s. So no tenant may hold every slot: each holds at most all but one, and a
//! reconcile of another tenant finds a slot free, or waits for one fairly among the others
//! rather than for the longest call. With the default of one slot per core, a lone busy tenant
//! gets all cores but one: guest code runs on the threads that also carry the host's own I/O
//! and, often, beside the API server, and a tenant that could fill every core would take the
//! CPU another tenant's next reconcile needs even though a slot is free for it (measured in
//! `bench/RESULTS.md`, noisy neighbour: B's p99 beside a flooding tenant was 1.09x alone with
//! one slot per core, 34.7x with one slot more).
//!
//! The order is start-time fair queuing (Goyal et al., 1996) over measured cost:
//! - each tenant has a virtual time, advanced by the CPU each of its reconciles used divided by
//!   its weight; among tenants with a worker waiting, the one with the least virtual time gets
//!   the next free slot, and within it the guest with the least virtual time;
//! - a tenant (or guest) that was idle starts at the virtual time of the latest grant, not where
//!   it left off: idle time is not banked, so a tenant quiet for an hour cannot then hold the
//!   host for a minute;
//! - a call's cost is only known when it ends, so each grant charges the guest's recent average
//!   at once and corrects it at the end; otherwise a tenant could take every free slot while its
//!   virtual time stood still.
//!
//! Where it may surprise:
//! - Fairness is over CPU, not over slot time: a guest waiting on the API server holds its slot
//!   but is charged only for the CPU it used. With few slots, slow writes therefore cost others
//!   latency; raise [`Config::slots`] for guests that mostly wait.
//! - A CPU budget is a token bucket that may go negative: a call is never cut short for the
//!   budget (its deadline bounds it), so a tenant pays for an expensive call afterwards, by
//!   waiting until the bucket is positive again. Throttling delays reconciles; it never fails
//!   one.
//! - A spell of throttling runs from the call that takes a tenant over budget until its budget
//!   has refilled completely (ten seconds' worth), so a tenant hovering at its budget is one
//!   spell, with one Warning Event, not one per call; within a spell its reconciles are held
//!   only while the budget is below zero.
//! - The operator's guests (config file, `--guest`, dev folder) are the tenant [`OPERATOR`],
//!   which is never throttled.

mod config;
mod state;
mod usage;

pub use config::{BANKED_SECONDS, Config, OPERATOR};
pub use usage::{Spell, Spells, TenantUsage};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

use state::{Core, Cost, Grant};

/// The host-wide scheduler. Share it by `Arc`; each guest uses it through a [`Share`].
#[derive(Debug)]
pub struct FairShare {
    core: Mutex<Core>,
    spells: watch::Sender<Spells>,
    /// Wakes every waiter when a tenant goes over budget, so that its waiters arm a timer for
    /// the refill: no later finish may come to grant them otherwise.
    over_budget: Notify,
    low_priority_max_wait: Duration,
}

impl Default for FairShare {
    fn default() -> Self {
        Self::new(Config::default())
    }
}

impl FairShare {
    /// A scheduler with `config`; zero slots count as one.
    pub fn new(config: Config) -> Self {
        Self {
            low_priority_max_wait: Duration::from_millis(config.low_priority_max_wait_ms),
            core: Mutex::new(Core::new(config, Instant::now())),
            spells: watch::Sender::new(Spells::new()),
            over_budget: Notify::new(),
        }
    }

    /// The handle guest `guest` of `tenant` schedules through.
    pub fn share(self: &Arc<Self>, tenant: &str, guest: &str) -> Share {
        Share {
            scheduler: self.clone(),
            tenant: tenant.into(),
            guest: guest.into(),
        }
    }

    /// How long a low-priority key may wait behind high-priority ones.
    pub fn low_priority_max_wait(&self) -> Duration {
        self.low_priority_max_wait
    }

    /// Charges `time` to `tenant`'s budget and totals as compile time (a module of its guest
    /// `guest` was compiled or loaded).
    pub fn charge_compile(&self, tenant: &str, guest: &str, time: Duration) {
        self.with_core(|core, now| core.charge(tenant, guest, time, Cost::Compile, now));
    }

    /// Every tenant's CPU use and throttling, by tenant name.
    pub fn usage(&self) -> Vec<TenantUsage> {
        self.with_core(|core, now| core.usage(now))
    }

    /// Every tenant's latest spell of throttling; the receiver sees each change.
    pub fn watch_spells(&self) -> watch::Receiver<Spells> {
        self.spells.subscribe()
    }

    /// Runs `f` on the core at the current time, then grants what can be granted and publishes
    /// any change of throttling.
    fn with_core<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        let now = Instant::now();
        let mut core = self.core.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut core, now);
        core.dispatch(now);
        if std::mem::take(&mut core.spells_changed) {
            let spells = core.spells();
            self.spells.send_replace(spells);
        }
        if std::mem::take(&mut core.went_over) {
            self.over_budget.notify_waiters();
        }
        r
    }
}

/// One guest's handle on the scheduler. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Share {
    scheduler: Arc<FairShare>,
    tenant: Arc<str>,
    guest: Arc<str>,
}

impl Share {
    /// A handle on a scheduler of its own, with default settings: for a guest run outside a
    /// supervisor (tests, benchmarks), which shares nothing with anyone.
    pub fn alone(guest: &str) -> Self {
        Arc::new(FairShare::default()).share(OPERATOR, guest)
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Arc<FairShare> {
        &self.scheduler
    }

    /// Waits for a slot. Cancel-safe: dropping the future gives up the place in line, or the
    /// slot if it was granted meanwhile.
    pub async fn slot(&self) -> Slot {
        let (tx, rx) = oneshot::channel();
        let id = self
            .scheduler
            .with_core(|core, now| core.enqueue(&self.tenant, &self.guest, tx, now));
        let mut waiting = Waiting {
            share: self,
            id,
            rx,
            granted: false,
        };
        loop {
            // A throttled tenant's turn comes with time, not with another worker's finish, so
            // waiters also wake when the budget refills; and look again when a tenant goes
            // over budget (enabled before looking, so that no such change is missed).
            let went_over = self.scheduler.over_budget.notified();
            let mut went_over = std::pin::pin!(went_over);
            went_over.as_mut().enable();
            let wake = self.scheduler.with_core(|core, _| core.next_refill());
            let granted = match wake {
                Some(at) => tokio::select! {
                    g = &mut waiting.rx => Some(g),
                    _ = tokio::time::sleep_until(at) => None,
                    _ = &mut went_over => None,
                },
                None => tokio::select! {
                    g = &mut waiting.rx => Some(g),
                    _ = &mut went_over => None,
                },
            };
            let Some(granted) = granted else {
                self.scheduler.with_core(|_, _| {});
                continue;
            };
            waiting.granted = true;
            return Slot {
                share: self.clone(),
                grant: granted.expect("the scheduler answers every waiter it keeps"),
                cpu: Duration::ZERO,
            };
        }
    }

    /// Charges CPU a call used outside a slot (`map`, `describe`) to the tenant and guest.
    pub fn charge(&self, cpu: Duration) {
        self.scheduler
            .with_core(|core, now| core.charge(&self.tenant, &self.guest, cpu, Cost::Cpu, now));
    }
}

/// A place in line, given up if dropped before the grant.
struct Waiting<'a> {
    share: &'a Share,
    id: u64,
    rx: oneshot::Receiver<Grant>,
    granted: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        // Grants are sent under the core's lock, so under it this waiter is either still in
        // line or its grant is in the channel.
        let (id, rx) = (self.id, &mut self.rx);
        self.share.scheduler.with_core(|core, now| {
            if !core.cancel(id)
                && let Ok(grant) = rx.try_recv()
            {
                core.finish(&grant, Duration::ZERO, now);
            }
        });
    }
}

/// A granted slot: hold it while the guest runs, [`Slot::charge`] what the call used, and drop
/// it to hand the slot on.
#[derive(Debug)]
pub struct Slot {
    share: Share,
    grant: Grant,
    cpu: Duration,
}

impl Slot {
    /// Records the CPU the call used; charged when the slot is dropped.
    pub fn charge(&mut self, cpu: Duration) {
        self.cpu += cpu;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (grant, cpu) = (&self.grant, self.cpu);
        self.share
            .scheduler
            .with_core(|core, now| core.finish(grant, cpu, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn budgeted(ms_per_minute: u64) -> Config {
        Config {
            slots: 1,
            cpu_budget_ms_per_minute: Some(ms_per_minute),
            ..Config::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_slot_comes_when_the_budget_refills() {
        let scheduler = Arc::new(FairShare::new(budgeted(600)));
        let share = scheduler.share("team-a", "spin");
        let mut slot = share.slot().await;
        slot.charge(ms(300));
        drop(slot);
        let spells = scheduler.watch_spells();
        assert_eq!(spells.borrow()["team-a"].number, 1);
        let started = Instant::now();
        drop(share.slot().await);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(20) && waited < Duration::from_secs(21),
            "owed 200 ms at 10 ms/s, waited {waited:?}"
        );
        assert!(!spells.borrow()["team-a"].ended);
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(scheduler.usage()[0].throttled_since, None);
        assert!(spells.borrow()["team-a"].ended, "the budget is full again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_in_line_when_its_tenant_goes_over_budget_still_gets_the_refill() {
        let scheduler = Arc::new(FairShare::new(budgeted(600)));
        let share = scheduler.share("team-a", "spin");
        let mut first = share.slot().await;
        // In line before its tenant is over budget: it has no refill to wait for yet.
        let second = tokio::spawn({
            let share = share.clone();
            async move {
                let started = Instant::now();
                drop(share.slot().await);
                started.elapsed()
            }
        });
        tokio::task::yield_now().await;
        first.charge(ms(300));
        drop(first);
        let waited = tokio::time::timeout(Duration::from_secs(60), second)
            .await
            .expect("granted once the budget refilled, with nothing else running")
            .unwrap();
        assert!(waited >= Duration::from_secs(20), "waited {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_wait_gives_up_its_place_and_a_dropped_slot_frees_it() {
        let scheduler = Arc::new(FairShare::new(Config {
            slots: 1,
            ..Config::default()
        }));
        let a = scheduler.share("team-a", "a");
        let held = a.slot().await;
        let gave_up = tokio::time::timeout(ms(10), a.slot()).await;
        assert!(gave_up.is_err(), "the only slot is held");
        drop(held);
        let next = tokio::time::timeout(ms(10), scheduler.share("team-b", "b").slot()).await;
        assert!(
            next.is_ok(),
            "the slot was not kept for the waiter that gave up"
        );
        assert_eq!(
            scheduler.usage().iter().map(|t| t.waiting).sum::<usize>(),
            0
        );
    }
}
