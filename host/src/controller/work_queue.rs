//! Work queue: deduplicated keys, never two runs of one key at once, per-item backoff combined
//! with a global token bucket, requeue-after, and two priorities.
//!
//! The semantics are client-go's `workqueue` (dirty and processing sets, rate-limited
//! requeues, `AddAfter`), plus a priority: keys from the initial list and no-op resyncs wait
//! behind keys a user actually changed, so a restart with 100 000 objects does not put a user's
//! edit at the back of a 100 000-key line. A low-priority key is not held back forever,
//! though: once it has waited [`WorkQueue::low_priority_max_wait`] (30 s by default) it is
//! handed out between high-priority keys, which controller-runtime's priority queue does not
//! do (its users see keys wait for 30 minutes: controller-runtime issue #3496).
//!
//! The queue keeps client-go's metrics ([`Stats`]) with client-go's rules: an add counts when
//! the key was not already waiting; its queue time runs from that add to a worker taking it; its
//! work time from taken to [`done`](WorkQueue::done); every delayed add is a retry.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::controller::reconciles::WORK_QUEUE_BUCKETS;

/// How urgent a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Nothing a user did: the initial list, a resync or relist that changed nothing.
    Low,
    /// A user-visible change, a retry, a requeue-after.
    High,
}

impl Priority {
    /// controller-runtime's label for it: 0 for a normal add, `handler.LowPriority` (-100) for
    /// keys from an initial list, as its priority queue labels `workqueue_depth`.
    pub fn controller_runtime_label(self) -> &'static str {
        match self {
            Priority::High => "0",
            Priority::Low => "-100",
        }
    }
}

/// Rate-limit settings (the defaults are client-go's).
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    /// First per-item retry delay (5 ms); doubles with each failure of that key.
    pub base: Duration,
    /// Per-item delay cap (1000 s).
    pub max: Duration,
    /// Overall retries per second (10).
    pub qps: f64,
    /// Overall burst (100).
    pub burst: f64,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100.0,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

#[derive(Debug)]
struct Inner<K> {
    high: VecDeque<K>,
    low: VecDeque<K>,
    /// Keys waiting in a ready queue, with the priority they wait at. An entry in `high`/`low`
    /// whose priority does not match is stale (the key was promoted) and is skipped.
    queued: HashMap<K, Priority>,
    processing: HashSet<K>,
    /// Added while processing: re-queued at this priority by `done`.
    dirty: HashMap<K, Priority>,
    /// Not ready before the given instant. The heap may hold stale entries; `waiting` is the
    /// truth (the earliest time asked for).
    delayed: BinaryHeap<Reverse<(Instant, u64, K)>>,
    waiting: HashMap<K, (Instant, Priority)>,
    seq: u64,
    failures: HashMap<K, u32>,
    bucket: Bucket,
    /// Whether the last key handed out was a low-priority one that had waited too long: the
    /// next goes to a high-priority key if there is one, so overdue keys take at most half.
    overdue_last: bool,
    shutting_down: bool,
    /// When each key waiting (queued, or dirty while processing) was added: the start of its
    /// queue time (client-go's `addTimes`). A key promoted or added again keeps its first time.
    added_at: HashMap<K, Instant>,
    /// When each key being processed was taken: the start of its work time (client-go's
    /// `processingStartTimes`).
    taken_at: HashMap<K, Instant>,
    adds: u64,
    retries: u64,
    queue_duration: Histogram,
    work_duration: Histogram,
}

/// The queue's client-go metrics at one moment.
///
/// Where it may surprise: the histograms are the live ones, not copies, and go on counting after
/// the other fields were read.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Keys waiting, by priority (high first): ready ones, and ones added again while being
    /// processed, which client-go counts too. Delayed keys not yet due are not counted.
    pub depth: Vec<(Priority, usize)>,
    /// Keys added when not already waiting (a promotion, or a key added twice, is one add).
    pub adds: u64,
    /// Delayed adds ([`WorkQueue::add_after`] and [`WorkQueue::add_rate_limited`]), counted as
    /// client-go counts `AddAfter`: requeue-after included, whether or not the key was waiting.
    pub retries: u64,
    /// Seconds from a key's add to a worker taking it; for a delayed key, from when it was due.
    pub queue_duration: Histogram,
    /// Seconds from a worker taking a key to handing it back.
    pub work_duration: Histogram,
    /// How long the keys being processed now have been held, summed.
    pub unfinished_work: Duration,
    /// How long the longest-held key being processed now has been held.
    pub longest_running: Duration,
}

/// A work queue of keys `K`.
#[derive(Debug)]
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    limit: RateLimit,
    low_max_wait: Duration,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// An empty queue with client-go's rate limits.
    pub fn new() -> Self {
        Self::with_rate_limit(RateLimit::default())
    }

    /// An empty queue with the given rate limits.
    pub fn with_rate_limit(limit: RateLimit) -> Self {
        Self {
            inner: Mutex::new(Inner {
                high: VecDeque::new(),
                low: VecDeque::new(),
                queued: HashMap::new(),
                processing: HashSet::new(),
                dirty: HashMap::new(),
                delayed: BinaryHeap::new(),
                waiting: HashMap::new(),
                seq: 0,
                failures: HashMap::new(),
                bucket: Bucket {
                    tokens: limit.burst,
                    last: Instant::now(),
                },
                overdue_last: false,
                shutting_down: false,
                added_at: HashMap::new(),
                taken_at: HashMap::new(),
                adds: 0,
                retries: 0,
                queue_duration: Histogram::new(WORK_QUEUE_BUCKETS),
                work_duration: Histogram::new(WORK_QUEUE_BUCKETS),
            }),
            notify: Notify::new(),
            limit,
            low_max_wait: Duration::from_secs(30),
        }
    }

    /// Sets how long a low-priority key may wait behind high-priority ones [30 s].
    ///
    /// Where it may surprise: past it a key is handed out between high-priority keys, one for
    /// one, not ahead of them all; so after a restart that queued 100 000 keys at low priority,
    /// user edits still get at least half the workers' turns, and the last of those keys waits
    /// longer than the bound.
    pub fn with_low_priority_max_wait(mut self, max_wait: Duration) -> Self {
        self.low_max_wait = max_wait;
        self
    }

    /// How long a low-priority key may wait behind high-priority ones.
    pub fn low_priority_max_wait(&self) -> Duration {
        self.low_max_wait
    }

    /// Queues `key` now.
    ///
    /// A key already waiting stays where it is (promoted to the front queue if `priority` is
    /// higher). A key being processed is marked dirty and queued again when `done` is called, so
    /// it is never processed twice at once and never loses the change that arrived meanwhile.
    pub fn add(&self, key: K, priority: Priority) {
        let mut inner = self.inner.lock().unwrap();
        if inner.shutting_down {
            return;
        }
        let ready = inner.add(key, priority, Instant::now());
        drop(inner);
        if ready {
            self.notify.notify_one();
        }
    }

    /// Queues `key` after `delay`. A delay of zero means now. When a key is asked for twice,
    /// the earliest ready time wins.
    ///
    /// Every call counts as a retry in [`Stats::retries`], as client-go counts `AddAfter`,
    /// even one that changes nothing.
    pub fn add_after(&self, key: K, delay: Duration, priority: Priority) {
        let now = Instant::now();
        let at = now + delay;
        let mut inner = self.inner.lock().unwrap();
        if inner.shutting_down {
            return;
        }
        inner.retries += 1;
        if delay.is_zero() {
            let ready = inner.add(key, priority, now);
            drop(inner);
            if ready {
                self.notify.notify_one();
            }
            return;
        }
        if inner.queued.contains_key(&key) {
            return;
        }
        if let Some((t, p)) = inner.waiting.get_mut(&key) {
            *p = (*p).max(priority);
            if *t <= at {
                return;
            }
            *t = at;
        } else {
            inner.waiting.insert(key.clone(), (at, priority));
        }
        inner.seq += 1;
        let seq = inner.seq;
        inner.delayed.push(Reverse((at, seq, key)));
        drop(inner);
        // The getter may be sleeping until a later deadline.
        self.notify.notify_one();
    }

    /// Requeues `key` after a failure: after the larger of its own backoff (base·2^failures,
    /// capped) and the global bucket's delay. Returns that delay.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let delay = {
            let mut inner = self.inner.lock().unwrap();
            let n = inner.failures.entry(key.clone()).or_insert(0);
            let exp = *n;
            *n = n.saturating_add(1);
            let per_item = self
                .limit
                .base
                .saturating_mul(2u32.saturating_pow(exp.min(31)))
                .min(self.limit.max);
            // Token bucket: take a token now, owing time if there is none.
            let now = Instant::now();
            let b = &mut inner.bucket;
            b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * self.limit.qps)
                .min(self.limit.burst);
            b.last = now;
            b.tokens -= 1.0;
            let bucket = if b.tokens >= 0.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(-b.tokens / self.limit.qps)
            };
            per_item.max(bucket)
        };
        self.add_after(key, delay, Priority::High);
        delay
    }

    /// Clears `key`'s failure count (call after a success).
    pub fn forget(&self, key: &K) {
        self.inner.lock().unwrap().failures.remove(key);
    }

    /// How many times `key` has failed since it was last forgotten.
    pub fn failures(&self, key: &K) -> u32 {
        self.inner
            .lock()
            .unwrap()
            .failures
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Waits for the next key, high priority first, and marks it processing. Returns `None`
    /// once the queue is shut down.
    ///
    /// Every key returned must be handed back with [`done`](Self::done), or it is never
    /// processed again.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_deadline = {
                let mut inner = self.inner.lock().unwrap();
                if inner.shutting_down {
                    return None;
                }
                let now = Instant::now();
                inner.promote_due(now);
                if let Some(key) = inner.pop_ready(now, self.low_max_wait) {
                    inner.take(&key, now);
                    return Some(key);
                }
                inner.next_deadline()
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` processed; if it was added meanwhile, queues it again.
    pub fn done(&self, key: &K) {
        let mut inner = self.inner.lock().unwrap();
        let now = Instant::now();
        inner.processing.remove(key);
        if let Some(taken) = inner.taken_at.remove(key) {
            inner.work_duration.observe(secs(now - taken));
        }
        let Some(priority) = inner.dirty.remove(key) else {
            return;
        };
        if inner.shutting_down {
            inner.added_at.remove(key);
            return;
        }
        // Counted as an add when it was added while processing: client-go's Done queues it
        // without counting it again.
        inner.enqueue(key.clone(), priority);
        drop(inner);
        self.notify.notify_one();
    }

    /// Stops the queue: `get` returns `None` from now on, and adds are ignored.
    pub fn shutdown(&self) {
        self.inner.lock().unwrap().shutting_down = true;
        self.notify.notify_waiters();
    }

    /// Keys ready to be processed now (not counting delayed or processing ones).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().queued.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys being processed right now.
    pub fn processing(&self) -> usize {
        self.inner.lock().unwrap().processing.len()
    }

    /// The queue's metrics now.
    pub fn stats(&self) -> Stats {
        let inner = self.inner.lock().unwrap();
        let now = Instant::now();
        let depth = [Priority::High, Priority::Low]
            .map(|p| {
                let waiting = inner.queued.values().chain(inner.dirty.values());
                (p, waiting.filter(|q| **q == p).count())
            })
            .to_vec();
        let held = inner.taken_at.values().map(|t| now - *t);
        Stats {
            depth,
            adds: inner.adds,
            retries: inner.retries,
            queue_duration: inner.queue_duration.clone(),
            work_duration: inner.work_duration.clone(),
            unfinished_work: held.clone().sum(),
            longest_running: held.max().unwrap_or_default(),
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl<K: Clone + Eq + Hash + Ord> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Ord> Inner<K> {
    /// Adds `key` at `now`, counting the add if it was not waiting already. Returns whether a
    /// key became ready (to wake a getter).
    fn add(&mut self, key: K, priority: Priority, now: Instant) -> bool {
        if self.processing.contains(&key) {
            match self.dirty.get_mut(&key) {
                Some(p) => *p = (*p).max(priority),
                None => {
                    self.count_add(&key, now);
                    self.dirty.insert(key, priority);
                }
            }
            return false;
        }
        // Added now beats any later time asked for before.
        self.waiting.remove(&key);
        match self.queued.get(&key).copied() {
            Some(p) if p >= priority => return false,
            // A promotion: the key was already waiting, so it is not a new add.
            Some(_) => {}
            None => self.count_add(&key, now),
        }
        self.enqueue(key, priority);
        true
    }

    fn count_add(&mut self, key: &K, now: Instant) {
        self.adds += 1;
        self.added_at.entry(key.clone()).or_insert(now);
    }

    /// Puts `key` in the ready queue of `priority`. Any later time asked for is superseded.
    fn enqueue(&mut self, key: K, priority: Priority) {
        self.waiting.remove(&key);
        self.queued.insert(key.clone(), priority);
        match priority {
            Priority::High => self.high.push_back(key),
            Priority::Low => self.low.push_back(key),
        }
    }

    /// Marks `key` taken by a worker at `now`: its queue time ends, its work time starts.
    fn take(&mut self, key: &K, now: Instant) {
        self.processing.insert(key.clone());
        if let Some(added) = self.added_at.remove(key) {
            self.queue_duration.observe(secs(now - added));
        }
        self.taken_at.insert(key.clone(), now);
    }

    /// Queues the delayed keys due by `now`. Each counts as added when it was due, not when
    /// this runs: a getter that comes late must not hide the wait from the queue time.
    fn promote_due(&mut self, now: Instant) {
        while let Some(Reverse((at, _, key))) = self.delayed.peek().cloned() {
            if at > now {
                break;
            }
            self.delayed.pop();
            // Stale unless it is still the time asked for.
            if self.waiting.get(&key).map(|(t, _)| *t) != Some(at) {
                continue;
            }
            let (_, priority) = self.waiting.remove(&key).expect("checked");
            self.add(key, priority, at);
        }
    }

    fn pop_ready(&mut self, now: Instant, low_max_wait: Duration) -> Option<K> {
        // Stale entries (promoted keys) ahead of the oldest low-priority key go first.
        while let Some(key) = self.low.front() {
            if self.queued.get(key) == Some(&Priority::Low) {
                break;
            }
            self.low.pop_front();
        }
        let overdue = self.low.front().is_some_and(|key| {
            self.added_at
                .get(key)
                .is_some_and(|at| now.saturating_duration_since(*at) >= low_max_wait)
        });
        if overdue && !self.overdue_last {
            self.overdue_last = true;
            let key = self.low.pop_front().expect("checked");
            self.queued.remove(&key);
            return Some(key);
        }
        self.overdue_last = false;
        for priority in [Priority::High, Priority::Low] {
            loop {
                let queue = match priority {
                    Priority::High => &mut self.high,
                    Priority::Low => &mut self.low,
                };
                let Some(key) = queue.pop_front() else { break };
                if self.queued.get(&key) == Some(&priority) {
                    self.queued.remove(&key);
                    return Some(key);
                }
            }
        }
        None
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.waiting.values().map(|(t, _)| *t).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    async fn now_or_never<K: Clone + Eq + Hash + Ord>(q: &WorkQueue<K>) -> Option<K> {
        tokio::time::timeout(Duration::from_millis(1), q.get())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn adding_a_waiting_key_does_nothing() {
        let q = WorkQueue::new();
        q.add("a", Priority::High);
        q.add("a", Priority::High);
        q.add("b", Priority::High);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(now_or_never(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_processing_is_requeued_on_done_never_run_twice_at_once() {
        let q = WorkQueue::new();
        q.add("a", Priority::High);
        assert_eq!(q.get().await, Some("a"));
        q.add("a", Priority::High);
        assert_eq!(
            now_or_never(&q).await,
            None,
            "a is processing: it must not be handed out again"
        );
        assert_eq!(q.processing(), 1);
        q.done(&"a");
        assert_eq!(
            q.get().await,
            Some("a"),
            "the change that arrived meanwhile is not lost"
        );
        q.done(&"a");
        assert_eq!(now_or_never(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_zero_is_now_and_the_earliest_time_wins() {
        let q = WorkQueue::new();
        q.add_after("now", Duration::ZERO, Priority::High);
        assert_eq!(now_or_never(&q).await, Some("now"));
        q.add_after("k", Duration::from_secs(10), Priority::High);
        q.add_after("k", Duration::from_secs(2), Priority::High);
        q.add_after("k", Duration::from_secs(5), Priority::High);
        let started = Instant::now();
        assert_eq!(q.get().await, Some("k"));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        q.done(&"k");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(
            now_or_never(&q).await,
            None,
            "the later requests were superseded, not queued again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn add_now_beats_a_pending_delay() {
        let q = WorkQueue::new();
        q.add_after("k", Duration::from_secs(60), Priority::High);
        q.add("k", Priority::High);
        assert_eq!(now_or_never(&q).await, Some("k"));
        q.done(&"k");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(now_or_never(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn per_item_backoff_doubles_and_forget_resets_it() {
        let q = WorkQueue::new();
        let delays: Vec<Duration> = (0..5).map(|_| q.add_rate_limited("k")).collect();
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [5, 10, 20, 40, 80]);
        assert_eq!(q.failures(&"k"), 5);
        q.forget(&"k");
        assert_eq!(q.add_rate_limited("k"), Duration::from_millis(5));
        let capped = WorkQueue::with_rate_limit(RateLimit {
            max: Duration::from_millis(30),
            ..RateLimit::default()
        });
        let ms: Vec<u128> = (0..4)
            .map(|_| capped.add_rate_limited("k").as_millis())
            .collect();
        assert_eq!(ms, [5, 10, 20, 30]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_global_bucket_limits_retries_across_keys() {
        let q = WorkQueue::new();
        // The burst of 100 retries goes at per-item speed; the 101st waits for a token (0.1 s).
        for i in 0..100 {
            assert_eq!(q.add_rate_limited(i), Duration::from_millis(5));
        }
        assert_eq!(q.add_rate_limited(100), Duration::from_millis(100));
        assert_eq!(q.add_rate_limited(101), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(
            q.add_rate_limited(102),
            Duration::from_millis(5),
            "the bucket refills"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn user_changes_jump_ahead_of_background_work() {
        let q = WorkQueue::new();
        for i in 0..5 {
            q.add(format!("initial-{i}"), Priority::Low);
        }
        q.add("edited".to_string(), Priority::High);
        q.add("initial-3".to_string(), Priority::High);
        assert_eq!(q.get().await.as_deref(), Some("edited"));
        assert_eq!(
            q.get().await.as_deref(),
            Some("initial-3"),
            "promoted by a user-visible change"
        );
        let rest: Vec<String> = [q.get().await, q.get().await, q.get().await, q.get().await]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(
            rest,
            ["initial-0", "initial-1", "initial-2", "initial-4"],
            "initial-3 is not handed out twice"
        );
        assert_eq!(now_or_never(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_low_priority_key_runs_within_the_bound_under_a_constant_stream_of_high_ones() {
        let q = WorkQueue::new();
        assert_eq!(
            q.low_priority_max_wait(),
            Duration::from_secs(30),
            "the default"
        );
        let started = Instant::now();
        q.add("resync".to_string(), Priority::Low);
        // Users edit faster than the one worker reconciles: high-priority keys never run out.
        let mut high_served = 0;
        for i in 0.. {
            q.add(format!("edit-{}", 2 * i), Priority::High);
            q.add(format!("edit-{}", 2 * i + 1), Priority::High);
            let key = q.get().await.expect("not shut down");
            if key == "resync" {
                break;
            }
            high_served += 1;
            tokio::time::advance(Duration::from_millis(10)).await;
            q.done(&key);
        }
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(30) && waited <= Duration::from_millis(30_010),
            "the low-priority key waited {waited:?}"
        );
        assert_eq!(
            high_served, 3000,
            "high-priority keys went first until then"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn overdue_low_priority_keys_take_turns_with_high_ones_not_the_whole_queue() {
        let q = WorkQueue::new().with_low_priority_max_wait(Duration::from_secs(5));
        for i in 0..3 {
            q.add(format!("low-{i}"), Priority::Low);
        }
        tokio::time::advance(Duration::from_secs(6)).await;
        for i in 0..3 {
            q.add(format!("high-{i}"), Priority::High);
        }
        q.add("fresh-low".to_string(), Priority::Low);
        let mut order = Vec::new();
        for _ in 0..7 {
            order.push(q.get().await.expect("not shut down"));
        }
        assert_eq!(
            order,
            [
                "low-0",
                "high-0",
                "low-1",
                "high-1",
                "low-2",
                "high-2",
                "fresh-low"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_promoted_key_is_not_handed_out_again_as_overdue() {
        let q = WorkQueue::new().with_low_priority_max_wait(Duration::from_secs(5));
        q.add("k", Priority::Low);
        q.add("other", Priority::Low);
        q.add("k", Priority::High);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(q.get().await, Some("other"), "overdue; k waits at high now");
        assert_eq!(q.get().await, Some("k"));
        assert_eq!(now_or_never(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn get_waits_for_add_and_shutdown_wakes_it() {
        let q = Arc::new(WorkQueue::new());
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        q.add(1, Priority::Low);
        assert_eq!(waiter.await.unwrap(), Some(1));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
        q.add(2, Priority::High);
        assert_eq!(q.len(), 0, "adds after shutdown are ignored");
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_that_comes_due_while_processing_waits_for_done() {
        let q = WorkQueue::new();
        q.add("k", Priority::High);
        assert_eq!(q.get().await, Some("k"));
        q.add_after("k", Duration::from_secs(1), Priority::High);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(now_or_never(&q).await, None);
        q.done(&"k");
        assert_eq!(now_or_never(&q).await, Some("k"));
    }

    fn depth<K: Clone + Eq + Hash + Ord>(q: &WorkQueue<K>, p: Priority) -> usize {
        q.stats()
            .depth
            .iter()
            .find(|(q, _)| *q == p)
            .map_or(0, |(_, n)| *n)
    }

    #[tokio::test(start_paused = true)]
    async fn queue_time_runs_from_add_to_get_and_work_time_from_get_to_done() {
        let q = WorkQueue::new();
        q.add("k", Priority::High);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(q.get().await, Some("k"));
        tokio::time::advance(Duration::from_secs(2)).await;
        q.done(&"k");
        let s = q.stats();
        assert_eq!((s.queue_duration.count(), s.queue_duration.sum()), (1, 3.0));
        assert_eq!((s.work_duration.count(), s.work_duration.sum()), (1, 2.0));
        assert_eq!(s.adds, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_twice_or_promoted_while_waiting_is_one_add_timed_from_the_first() {
        let q = WorkQueue::new();
        q.add("k", Priority::Low);
        tokio::time::advance(Duration::from_secs(1)).await;
        q.add("k", Priority::Low);
        q.add("k", Priority::High);
        assert_eq!(q.stats().adds, 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.get().await, Some("k"));
        assert_eq!(
            q.stats().queue_duration.sum(),
            2.0,
            "timed from the first add, not the promotion"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_processing_waits_from_that_add_through_done() {
        let q = WorkQueue::new();
        q.add("k", Priority::High);
        assert_eq!(q.get().await, Some("k"));
        tokio::time::advance(Duration::from_secs(1)).await;
        q.add("k", Priority::High);
        q.add("k", Priority::High);
        assert_eq!(
            depth(&q, Priority::High),
            1,
            "client-go counts it as waiting"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        q.done(&"k");
        assert_eq!(
            q.stats().adds,
            2,
            "done queues it again without counting an add"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.get().await, Some("k"));
        let s = q.stats();
        assert_eq!(s.queue_duration.count(), 2);
        assert_eq!(
            s.queue_duration.sum(),
            0.0 + 3.0,
            "the second wait runs from its add, through the first run's done, to the get"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_is_timed_from_when_it_was_due_not_from_a_late_get() {
        let q = WorkQueue::new();
        q.add_after("k", Duration::from_secs(5), Priority::High);
        assert_eq!(q.stats().adds, 0, "not added before it is due");
        tokio::time::advance(Duration::from_secs(12)).await;
        assert_eq!(now_or_never(&q).await, Some("k"));
        let s = q.stats();
        assert_eq!((s.adds, s.retries), (1, 1));
        assert_eq!(s.queue_duration.sum(), 7.0);
    }

    #[tokio::test(start_paused = true)]
    async fn every_delayed_add_is_a_retry_as_client_go_counts_add_after() {
        let q = WorkQueue::new();
        q.add_rate_limited("failed");
        q.add_after("requeued", Duration::from_secs(30), Priority::High);
        q.add_after("now", Duration::ZERO, Priority::High);
        q.add("queued", Priority::High);
        q.add_after("queued", Duration::from_secs(1), Priority::High);
        let s = q.stats();
        assert_eq!(
            s.retries, 4,
            "a plain add is not a retry; a no-op add_after is"
        );
        assert_eq!(
            s.adds, 2,
            "now and queued; the delayed ones are not due yet"
        );
        q.shutdown();
        q.add_rate_limited("late");
        assert_eq!(q.stats().retries, 4, "nothing counts after shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_sums_the_keys_held_and_longest_running_is_the_oldest() {
        let q = WorkQueue::new();
        q.add("a", Priority::High);
        q.add("b", Priority::High);
        assert_eq!(q.get().await, Some("a"));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(q.get().await, Some("b"));
        tokio::time::advance(Duration::from_secs(2)).await;
        let s = q.stats();
        assert_eq!(s.unfinished_work, Duration::from_secs(5 + 2));
        assert_eq!(s.longest_running, Duration::from_secs(5));
        q.done(&"a");
        let s = q.stats();
        assert_eq!(
            (s.unfinished_work, s.longest_running),
            (Duration::from_secs(2), Duration::from_secs(2))
        );
        q.done(&"b");
        let s = q.stats();
        assert_eq!(
            (s.unfinished_work, s.longest_running),
            (Duration::ZERO, Duration::ZERO)
        );
        assert_eq!((s.work_duration.count(), s.work_duration.sum()), (2, 7.0));
    }

    #[tokio::test(start_paused = true)]
    async fn depth_counts_waiting_keys_by_priority_but_not_delayed_or_processing_ones() {
        let q = WorkQueue::new();
        q.add("a", Priority::Low);
        q.add("b", Priority::Low);
        q.add("c", Priority::High);
        q.add_after("later", Duration::from_secs(60), Priority::High);
        assert_eq!(
            (depth(&q, Priority::High), depth(&q, Priority::Low)),
            (1, 2)
        );
        assert_eq!(q.get().await, Some("c"));
        q.add("b", Priority::High);
        assert_eq!(
            (depth(&q, Priority::High), depth(&q, Priority::Low)),
            (1, 1),
            "a promoted key moves to the high count"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn done_after_shutdown_records_the_work_but_queues_nothing() {
        let q = WorkQueue::new();
        q.add("k", Priority::High);
        assert_eq!(q.get().await, Some("k"));
        q.add("k", Priority::High);
        tokio::time::advance(Duration::from_secs(1)).await;
        q.shutdown();
        q.done(&"k");
        let s = q.stats();
        assert_eq!(s.work_duration.count(), 1);
        assert_eq!(q.len(), 0);
        assert_eq!(depth(&q, Priority::High), 0);
    }
}
