//! The scheduler's state, pure: virtual times, lines of waiters, CPU budgets. Every method is
//! given the time, so tests drive it without a clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::config::{BANKED_SECONDS, Config, FIRST_ESTIMATE, OPERATOR};
use super::usage::{Spell, Spells, TenantUsage};

/// What a grant charged in advance, to correct when the call ends.
#[derive(Debug, Clone)]
pub(super) struct Grant {
    tenant: Arc<str>,
    guest: Arc<str>,
    estimate: Duration,
}

/// What a charge was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cost {
    /// A call's CPU.
    Cpu,
    /// Compiling a module.
    Compile,
}

/// The scheduler's state: pure, driven by the times it is given.
///
/// Invariant: `busy` is the number of grants not yet finished, and each waiter id is in exactly
/// one guest's `line` and in `senders`.
#[derive(Debug)]
pub(super) struct Core {
    config: Config,
    busy: usize,
    /// The virtual time of the latest grant: where an idle tenant starts again.
    clock: f64,
    tenants: BTreeMap<Arc<str>, Tenant>,
    senders: HashMap<u64, oneshot::Sender<Grant>>,
    next_id: u64,
    started: Instant,
    pub(super) spells_changed: bool,
    /// Set when a tenant goes over budget: its waiters must arm a timer for the refill.
    pub(super) went_over: bool,
}

#[derive(Debug)]
struct Tenant {
    weight: u32,
    vtime: f64,
    /// Virtual time of this tenant's latest grant: where an idle guest of it starts again.
    clock: f64,
    guests: BTreeMap<Arc<str>, Guest>,
    waiting: usize,
    running: usize,
    cpu: Duration,
    compile: Duration,
    bucket: Option<Bucket>,
    window: Window,
    /// The current spell, or the latest one.
    spell: Option<Spell>,
    /// Since when it is over budget (its reconciles held), if it is.
    held: Option<Instant>,
    /// Time held so far, the current stretch aside.
    throttled: Duration,
}

#[derive(Debug, Default)]
struct Guest {
    vtime: f64,
    line: VecDeque<u64>,
    running: usize,
    /// Recent average cost of a call: what a grant charges in advance.
    estimate: Option<Duration>,
}

/// CPU seconds a tenant may still spend; negative when it owes.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    /// Seconds of budget per second.
    rate: f64,
    budget: Duration,
    last: Instant,
}

impl Bucket {
    fn new(budget: Duration, now: Instant) -> Self {
        let rate = budget.as_secs_f64() / 60.0;
        Self {
            tokens: rate * BANKED_SECONDS,
            capacity: rate * BANKED_SECONDS,
            rate,
            budget,
            last: now,
        }
    }

    /// Adds what accrued since the last refill; returns when it crossed back above zero, if it
    /// did.
    fn refill(&mut self, now: Instant) -> Option<Instant> {
        let (before, last) = (self.tokens, self.last);
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.last = now;
        (before <= 0.0 && self.tokens > 0.0)
            .then(|| last + Duration::from_secs_f64(-before / self.rate))
    }

    fn full(&self) -> bool {
        self.tokens >= self.capacity
    }

    fn over(&self) -> bool {
        self.tokens <= 0.0
    }

    /// When it will be positive again.
    fn positive_at(&self) -> Instant {
        // A nanosecond late rather than exactly at zero, which is still over budget.
        self.last + Duration::from_secs_f64(-self.tokens / self.rate) + Duration::from_nanos(1)
    }
}

/// What was spent in each of the last 60 seconds.
#[derive(Debug)]
struct Window {
    seconds: [(u64, Duration); 60],
}

impl Default for Window {
    fn default() -> Self {
        Self {
            seconds: [(0, Duration::ZERO); 60],
        }
    }
}

impl Window {
    fn add(&mut self, second: u64, d: Duration) {
        let slot = &mut self.seconds[(second % 60) as usize];
        if slot.0 != second {
            *slot = (second, Duration::ZERO);
        }
        slot.1 += d;
    }

    fn sum(&self, second: u64) -> Duration {
        self.seconds
            .iter()
            .filter(|(s, _)| *s + 60 > second && *s <= second)
            .map(|(_, d)| *d)
            .sum()
    }
}

impl Core {
    pub(super) fn new(mut config: Config, now: Instant) -> Self {
        config.slots = config.slots.max(1);
        Self {
            config,
            busy: 0,
            clock: 0.0,
            tenants: BTreeMap::new(),
            senders: HashMap::new(),
            next_id: 0,
            started: now,
            spells_changed: false,
            went_over: false,
        }
    }

    fn tenant(&mut self, name: &str, now: Instant) -> &mut Tenant {
        if !self.tenants.contains_key(name) {
            let budget = self
                .config
                .cpu_budget_ms_per_minute
                .filter(|_| name != OPERATOR)
                .map(|ms| Bucket::new(Duration::from_millis(ms), now));
            let tenant = Tenant {
                weight: self.config.weights.get(name).copied().unwrap_or(1).max(1),
                vtime: self.clock,
                clock: 0.0,
                guests: BTreeMap::new(),
                waiting: 0,
                running: 0,
                cpu: Duration::ZERO,
                compile: Duration::ZERO,
                bucket: budget,
                window: Window::default(),
                spell: None,
                held: None,
                throttled: Duration::ZERO,
            };
            self.tenants.insert(name.into(), tenant);
        }
        self.tenants.get_mut(name).expect("inserted above")
    }

    /// Puts a waiter of `guest` in line; returns its id.
    pub(super) fn enqueue(
        &mut self,
        tenant: &Arc<str>,
        guest: &Arc<str>,
        tx: oneshot::Sender<Grant>,
        now: Instant,
    ) -> u64 {
        let (id, clock) = (self.next_id, self.clock);
        self.next_id += 1;
        self.senders.insert(id, tx);
        let t = self.tenant(tenant, now);
        if t.waiting + t.running == 0 {
            // Start-time fair queuing: an idle tenant starts at the current virtual time.
            t.vtime = t.vtime.max(clock);
        }
        let tenant_clock = t.clock;
        t.waiting += 1;
        let g = t.guests.entry(guest.clone()).or_default();
        if g.line.is_empty() && g.running == 0 {
            g.vtime = g.vtime.max(tenant_clock);
        }
        g.line.push_back(id);
        id
    }

    /// Takes waiter `id` out of line; false if it is not in line (already granted).
    pub(super) fn cancel(&mut self, id: u64) -> bool {
        if self.senders.remove(&id).is_none() {
            return false;
        }
        for t in self.tenants.values_mut() {
            for g in t.guests.values_mut() {
                if let Some(i) = g.line.iter().position(|w| *w == id) {
                    g.line.remove(i);
                    t.waiting -= 1;
                    return true;
                }
            }
        }
        unreachable!("a waiter with a sender is in some line")
    }

    /// Grants free slots to waiters in fair order.
    pub(super) fn dispatch(&mut self, now: Instant) {
        self.refill(now);
        // A slot is never taken back from a running call, so one is always kept from the
        // tenant holding the others: the next tenant to come never waits for a long call.
        let most = self.config.slots.saturating_sub(1).max(1);
        while self.busy < self.config.slots {
            let Some(name) = self
                .tenants
                .iter()
                .filter(|(_, t)| t.waiting > 0 && t.running < most)
                .filter(|(_, t)| !t.bucket.as_ref().is_some_and(Bucket::over))
                .min_by(|a, b| a.1.vtime.total_cmp(&b.1.vtime))
                .map(|(n, _)| n.clone())
            else {
                return;
            };
            let t = self.tenants.get_mut(&name).expect("just found");
            let (guest, g) = t
                .guests
                .iter_mut()
                .filter(|(_, g)| !g.line.is_empty())
                .min_by(|a, b| a.1.vtime.total_cmp(&b.1.vtime))
                .expect("a waiting tenant has a guest in line");
            let id = g.line.pop_front().expect("filtered on a non-empty line");
            let estimate = g.estimate.unwrap_or(FIRST_ESTIMATE);
            t.clock = g.vtime;
            g.vtime += estimate.as_secs_f64();
            g.running += 1;
            let guest = guest.clone();
            self.clock = t.vtime;
            t.vtime += estimate.as_secs_f64() / f64::from(t.weight);
            t.waiting -= 1;
            t.running += 1;
            self.busy += 1;
            let grant = Grant {
                tenant: name,
                guest,
                estimate,
            };
            let tx = self
                .senders
                .remove(&id)
                .expect("every waiter in line has a sender");
            if let Err(grant) = tx.send(grant) {
                // Its future is gone (a stopped controller): the slot goes to the next.
                self.release(&grant, Duration::ZERO, now);
            }
        }
    }

    /// A granted call ended, having used `cpu`.
    pub(super) fn finish(&mut self, grant: &Grant, cpu: Duration, now: Instant) {
        self.release(grant, cpu, now);
        self.charge(&grant.tenant, &grant.guest, cpu, Cost::Cpu, now);
    }

    /// Gives the slot back and corrects the virtual times from the estimate to `cpu`.
    fn release(&mut self, grant: &Grant, cpu: Duration, now: Instant) {
        self.busy -= 1;
        let t = self.tenant(&grant.tenant, now);
        t.running -= 1;
        let error = cpu.as_secs_f64() - grant.estimate.as_secs_f64();
        t.vtime += error / f64::from(t.weight);
        let g = t.guests.entry(grant.guest.clone()).or_default();
        g.running -= 1;
        g.vtime += error;
        // A stopped call (cpu zero) says nothing about what calls cost.
        if !cpu.is_zero() {
            g.estimate = Some(match g.estimate {
                Some(e) => (e * 7 + cpu) / 8,
                None => cpu,
            });
        }
    }

    /// Adds `d` to the tenant's totals and budget; starts a spell of throttling if that took it
    /// over budget.
    pub(super) fn charge(
        &mut self,
        tenant: &str,
        guest: &str,
        d: Duration,
        cost: Cost,
        now: Instant,
    ) {
        let second = now.saturating_duration_since(self.started).as_secs();
        let t = self.tenant(tenant, now);
        match cost {
            Cost::Cpu => t.cpu += d,
            Cost::Compile => t.compile += d,
        }
        t.window.add(second, d);
        let Some(bucket) = &mut t.bucket else {
            return;
        };
        bucket.refill(now);
        let was_over = bucket.over();
        bucket.tokens -= d.as_secs_f64();
        if was_over || !bucket.over() {
            return;
        }
        t.held = Some(now);
        if t.spell.as_ref().is_some_and(|s| !s.ended) {
            self.went_over = true;
            return;
        }
        let number = t.spell.as_ref().map_or(1, |s| s.number + 1);
        t.spell = Some(Spell {
            number,
            guest: guest.to_string(),
            budget: bucket.budget,
            used: t.window.sum(second),
            since: SystemTime::now(),
            ended: false,
        });
        self.went_over = true;
        self.spells_changed = true;
    }

    /// Refills every budget: a tenant back above zero is no longer held, and one whose budget
    /// is full again ends its spell.
    pub(super) fn refill(&mut self, now: Instant) {
        for t in self.tenants.values_mut() {
            let Some(bucket) = &mut t.bucket else {
                continue;
            };
            if let Some(back) = bucket.refill(now)
                && let Some(since) = t.held.take()
            {
                t.throttled += back.saturating_duration_since(since);
            }
            if let Some(spell) = t.spell.as_mut().filter(|s| !s.ended)
                && bucket.full()
            {
                spell.ended = true;
                self.spells_changed = true;
            }
        }
    }

    /// When the earliest throttled tenant with a waiter may run again.
    pub(super) fn next_refill(&self) -> Option<Instant> {
        self.tenants
            .values()
            .filter(|t| t.waiting > 0)
            .filter_map(|t| t.bucket.as_ref().filter(|b| b.over()))
            .map(Bucket::positive_at)
            .min()
    }

    pub(super) fn spells(&self) -> Spells {
        self.tenants
            .iter()
            .filter_map(|(n, t)| Some((n.to_string(), t.spell.clone()?)))
            .collect()
    }

    pub(super) fn usage(&mut self, now: Instant) -> Vec<TenantUsage> {
        self.refill(now);
        let second = now.saturating_duration_since(self.started).as_secs();
        self.tenants
            .iter()
            .map(|(name, t)| {
                let held = t.held.map(|s| now.saturating_duration_since(s));
                TenantUsage {
                    tenant: name.to_string(),
                    weight: t.weight,
                    cpu: t.cpu,
                    compile: t.compile,
                    used_last_minute: t.window.sum(second),
                    budget_per_minute: t.bucket.as_ref().map(|b| b.budget),
                    throttled_since: t.spell.as_ref().filter(|s| !s.ended).map(|s| s.since),
                    throttled: t.throttled + held.unwrap_or_default(),
                    throttles: t.spell.as_ref().map_or(0, |s| s.number),
                    waiting: t.waiting,
                    running: t.running,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Workers that always have another key: each, once its call ends, waits in line again.
    struct Sim {
        core: Core,
        now: Instant,
        lines: Vec<(String, String, oneshot::Receiver<Grant>)>,
    }

    impl Sim {
        fn new(config: Config) -> Self {
            let now = Instant::now();
            Self {
                core: Core::new(config, now),
                now,
                lines: Vec::new(),
            }
        }

        fn wait(&mut self, tenant: &str, guest: &str) {
            let (tx, rx) = oneshot::channel();
            self.core
                .enqueue(&tenant.into(), &guest.into(), tx, self.now);
            self.lines.push((tenant.into(), guest.into(), rx));
        }

        /// Grants what can be granted; returns the grants, oldest waiter first.
        fn granted(&mut self) -> Vec<(String, String, Grant)> {
            self.core.dispatch(self.now);
            let mut out = Vec::new();
            self.lines.retain_mut(|(t, g, rx)| match rx.try_recv() {
                Ok(grant) => {
                    out.push((t.clone(), g.clone(), grant));
                    false
                }
                Err(_) => true,
            });
            out
        }

        /// One slot: the next call runs for `cost` of CPU (and of time), then its worker waits
        /// again. Returns whose call it was.
        fn step(&mut self, cost: impl Fn(&str) -> Duration) -> String {
            let mut granted = self.granted();
            assert_eq!(granted.len(), 1, "one slot, one grant");
            let (tenant, guest, grant) = granted.pop().expect("checked");
            self.now += cost(&guest);
            self.core.finish(&grant, cost(&guest), self.now);
            self.wait(&tenant, &guest);
            guest
        }

        fn count(
            &mut self,
            steps: usize,
            cost: impl Fn(&str) -> Duration,
        ) -> BTreeMap<String, usize> {
            let mut counts = BTreeMap::new();
            for _ in 0..steps {
                *counts.entry(self.step(&cost)).or_default() += 1;
            }
            counts
        }
    }

    #[test]
    fn a_tenant_with_one_key_runs_next_however_many_the_other_has_waiting() {
        let mut sim = Sim::new(Config {
            slots: 1,
            ..Config::default()
        });
        for _ in 0..50 {
            sim.wait("team-a", "flood");
        }
        for _ in 0..10 {
            sim.step(|_| ms(5));
        }
        sim.wait("team-b", "edit");
        assert_eq!(
            sim.step(|_| ms(5)),
            "edit",
            "b waits for no more than the call running"
        );
    }

    #[test]
    fn cpu_is_shared_by_weight_when_both_tenants_always_have_work() {
        let mut sim = Sim::new(Config {
            slots: 1,
            weights: [("team-a".into(), 2)].into(),
            ..Config::default()
        });
        sim.wait("team-a", "a");
        sim.wait("team-b", "b");
        let counts = sim.count(300, |_| ms(10));
        assert_eq!((counts["a"], counts["b"]), (200, 100));
    }

    #[test]
    fn fairness_is_over_measured_cost_not_over_calls() {
        let mut sim = Sim::new(Config {
            slots: 1,
            ..Config::default()
        });
        sim.wait("team-a", "heavy");
        sim.wait("team-b", "light");
        let counts = sim.count(220, |g| if g == "heavy" { ms(10) } else { ms(1) });
        // Equal CPU: 20 heavy calls (200 ms) against 200 light ones (200 ms).
        assert!(
            (19..=21).contains(&counts["heavy"]),
            "heavy ran {} times of 220",
            counts["heavy"]
        );
    }

    #[test]
    fn idle_time_is_not_banked() {
        let mut sim = Sim::new(Config {
            slots: 1,
            ..Config::default()
        });
        sim.wait("team-a", "a");
        sim.count(100, |_| ms(10));
        sim.wait("team-b", "b");
        let order: Vec<String> = (0..6).map(|_| sim.step(|_| ms(10))).collect();
        assert_eq!(
            order,
            ["b", "a", "b", "a", "b", "a"],
            "b, idle while a ran 100 calls, gets its share from now on, not 100 calls in a row"
        );
    }

    #[test]
    fn a_tenants_guests_share_its_part_fairly() {
        let mut sim = Sim::new(Config {
            slots: 1,
            ..Config::default()
        });
        sim.wait("team-a", "a1");
        sim.wait("team-a", "a1");
        sim.wait("team-a", "a1");
        sim.wait("team-a", "a2");
        sim.wait("team-b", "b");
        let counts = sim.count(400, |_| ms(1));
        assert_eq!((counts["a1"], counts["a2"], counts["b"]), (100, 100, 200));
    }

    #[test]
    fn no_more_grants_than_slots_and_a_finish_hands_its_slot_on() {
        let mut sim = Sim::new(Config {
            slots: 3,
            ..Config::default()
        });
        for _ in 0..5 {
            sim.wait("team-a", "a");
            sim.wait("team-b", "b");
        }
        let first = sim.granted();
        assert_eq!(first.len(), 3);
        assert!(sim.granted().is_empty(), "every slot is held");
        sim.core.finish(&first[0].2, ms(1), sim.now);
        assert_eq!(sim.granted().len(), 1);
        assert_eq!(sim.core.busy, 3);
    }

    #[test]
    fn a_tenant_never_holds_the_last_slot_so_the_next_tenant_never_waits_for_a_long_call() {
        let mut sim = Sim::new(Config {
            slots: 3,
            ..Config::default()
        });
        for _ in 0..5 {
            sim.wait("team-a", "spin");
        }
        assert_eq!(sim.granted().len(), 2, "all but one slot");
        sim.wait("team-b", "edit");
        let next = sim.granted();
        assert_eq!(next.len(), 1);
        assert_eq!(
            next[0].1, "edit",
            "granted at once, while team-a's calls run"
        );
        let mut alone = Sim::new(Config {
            slots: 1,
            ..Config::default()
        });
        alone.wait("team-a", "a");
        assert_eq!(
            alone.granted().len(),
            1,
            "one slot is all a tenant can have"
        );
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_the_line() {
        let mut sim = Sim::new(Config {
            slots: 1,
            ..Config::default()
        });
        sim.wait("team-a", "a");
        let held = sim.granted();
        sim.wait("team-b", "b");
        let id = sim.core.next_id - 1;
        assert!(sim.core.cancel(id));
        assert!(!sim.core.cancel(id), "only once");
        sim.core.finish(&held[0].2, ms(1), sim.now);
        assert!(sim.granted().is_empty());
        assert_eq!(sim.core.busy, 0);
    }

    fn budgeted(ms_per_minute: u64) -> Config {
        Config {
            slots: 1,
            cpu_budget_ms_per_minute: Some(ms_per_minute),
            ..Config::default()
        }
    }

    #[test]
    fn a_tenant_over_budget_waits_for_the_refill_and_others_go_on() {
        // 600 ms a minute: 10 ms a second, at most 100 ms banked.
        let mut sim = Sim::new(budgeted(600));
        sim.wait("team-a", "spin");
        sim.step(|_| ms(300));
        // The operator has no budget, so its share shows plainly.
        sim.wait(OPERATOR, "b");
        assert_eq!(sim.step(|_| ms(1)), "b");
        assert_eq!(
            sim.step(|_| ms(1)),
            "b",
            "team-a owes 200 ms: 20 s of budget"
        );
        let usage = sim.core.usage(sim.now);
        assert_eq!(usage[1].tenant, "team-a");
        assert!(usage[1].throttled_since.is_some());
        assert_eq!(usage[1].throttles, 1);
        assert_eq!(usage[1].used_last_minute, ms(300));
        // Past the refill, team-a runs again once b has had the CPU team-a had before:
        // throttling delays, and the fair order still holds.
        sim.now += Duration::from_secs(20);
        let b_first = (0..400).take_while(|_| sim.step(|_| ms(1)) == "b").count();
        assert!(
            (290..=300).contains(&b_first),
            "b ran {b_first} calls first"
        );
        let usage = sim.core.usage(sim.now);
        let held = usage[1].throttled.as_secs_f64();
        assert!((19.9..20.1).contains(&held), "held {held} s");
        assert!(
            usage[1].throttled_since.is_some(),
            "the spell lasts until the budget is full again"
        );
        sim.now += Duration::from_secs(11);
        assert_eq!(sim.core.usage(sim.now)[1].throttled_since, None);
    }

    #[test]
    fn a_spell_names_the_guest_that_went_over_and_is_counted_once() {
        let mut sim = Sim::new(budgeted(600));
        sim.wait("team-a", "spin");
        sim.step(|_| ms(300));
        let spells = sim.core.spells();
        let spell = &spells["team-a"];
        assert_eq!(
            (spell.number, spell.guest.as_str(), spell.ended),
            (1, "spin", false)
        );
        assert_eq!(spell.budget, ms(600));
        assert!(std::mem::take(&mut sim.core.spells_changed));
        sim.core
            .charge("team-a", "spin", ms(50), Cost::Cpu, sim.now);
        assert!(
            !sim.core.spells_changed,
            "more cost while throttled is the same spell"
        );
        // Back above zero, then over again: still the same spell until the budget is full.
        sim.now += Duration::from_secs(26);
        sim.core.refill(sim.now);
        sim.core
            .charge("team-a", "spin", ms(50), Cost::Cpu, sim.now);
        assert!(
            !sim.core.spells_changed,
            "one Warning for a tenant hovering at its budget"
        );
        sim.now += Duration::from_secs(60);
        sim.core.refill(sim.now);
        assert!(sim.core.spells()["team-a"].ended);
        sim.core
            .charge("team-a", "other", ms(500), Cost::Compile, sim.now);
        assert_eq!(sim.core.spells()["team-a"].number, 2);
        assert_eq!(sim.core.spells()["team-a"].guest, "other");
    }

    #[test]
    fn the_operator_is_never_throttled() {
        let mut sim = Sim::new(budgeted(600));
        sim.wait(OPERATOR, "op");
        let counts = sim.count(10, |_| Duration::from_secs(1));
        assert_eq!(counts["op"], 10);
        assert!(sim.core.spells().is_empty());
    }
}
