//! Work queue: deduplicated keys, never two runs of one key at once, per-item backoff combined
//! with a global token bucket, requeue-after, and two priorities.
//!
//! The semantics are client-go's `workqueue` (dirty and processing sets, rate-limited
//! requeues, `AddAfter`), plus a priority: keys from the initial list and no-op resyncs wait
//! behind keys a user actually changed, so a restart with 100 000 objects does not put a user's
//! edit at the back of a 100 000-key line.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How urgent a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Nothing a user did: the initial list, a resync or relist that changed nothing.
    Low,
    /// A user-visible change, a retry, a requeue-after.
    High,
}

/// Rate-limit settings [client-go defaults].
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    /// First per-item retry delay [5 ms]; doubles with each failure of that key.
    pub base: Duration,
    /// Per-item delay cap [1000 s].
    pub max: Duration,
    /// Overall retries per second [10].
    pub qps: f64,
    /// Overall burst [100].
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
    shutting_down: bool,
}

/// A work queue of keys `K`.
#[derive(Debug)]
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    limit: RateLimit,
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
                shutting_down: false,
            }),
            notify: Notify::new(),
            limit,
        }
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
        if inner.processing.contains(&key) {
            let p = inner.dirty.entry(key).or_insert(priority);
            *p = (*p).max(priority);
            return;
        }
        // Added now beats any later time asked for before.
        inner.waiting.remove(&key);
        match inner.queued.get(&key).copied() {
            Some(p) if p >= priority => return,
            _ => {}
        }
        inner.queued.insert(key.clone(), priority);
        match priority {
            Priority::High => inner.high.push_back(key),
            Priority::Low => inner.low.push_back(key),
        }
        drop(inner);
        self.notify.notify_one();
    }

    /// Queues `key` after `delay`. A delay of zero means now. When a key is asked for twice,
    /// the earliest ready time wins.
    pub fn add_after(&self, key: K, delay: Duration, priority: Priority) {
        if delay.is_zero() {
            return self.add(key, priority);
        }
        let at = Instant::now() + delay;
        let mut inner = self.inner.lock().unwrap();
        if inner.shutting_down || inner.queued.contains_key(&key) {
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
                inner.promote_due(Instant::now());
                if let Some(key) = inner.pop_ready() {
                    inner.processing.insert(key.clone());
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
        inner.processing.remove(key);
        if let Some(priority) = inner.dirty.remove(key) {
            drop(inner);
            self.add(key.clone(), priority);
        }
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
}

impl<K: Clone + Eq + Hash + Ord> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Ord> Inner<K> {
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
            if self.processing.contains(&key) {
                let p = self.dirty.entry(key).or_insert(priority);
                *p = (*p).max(priority);
                continue;
            }
            if self.queued.get(&key).is_some_and(|p| *p >= priority) {
                continue;
            }
            self.queued.insert(key.clone(), priority);
            match priority {
                Priority::High => self.high.push_back(key),
                Priority::Low => self.low.push_back(key),
            }
        }
    }

    fn pop_ready(&mut self) -> Option<K> {
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
}
