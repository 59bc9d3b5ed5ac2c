//! When to retry: exponential backoff for a server that refuses, and a shared connectivity signal
//! that cuts the wait short the moment an unreachable server answers again.
//!
//! client-go retries an unreachable API server on the same growing backoff as one that refuses
//! (800 ms doubling to 30 s, forgotten only after 2 minutes of health), so a few connection cuts
//! followed by an outage leave its reflectors asleep for many seconds after the server is back,
//! serving a stale cache meanwhile. Here the two cases part ways:
//! - **refused** (the server answered 429, 5xx or nonsense): the [`Backoff`] decides, as in
//!   client-go, because retrying sooner would only add load to a server that is struggling;
//! - **unreachable** (connection refused or cut, a stream that broke): the wait also ends, with a
//!   little jitter, as soon as [`Connectivity`] learns that the server answers again, from any
//!   request or from its own cheap probe of `/readyz`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// Exponential backoff: each failure doubles the delay up to a cap; a stretch of health without
/// failures resets it.
///
/// Defaults are client-go's reflector values: 800 ms initial, ×2, capped at 30 s, jitter up to
/// +100 %, reset after 2 minutes without a failure. Jitter matters: a restarted apiserver would
/// otherwise see every client come back in the same millisecond.
///
/// Where it may surprise: on its own it knows nothing about *why* requests failed; callers that
/// can tell an unreachable server from a refusing one wait through [`Connectivity::wait`], which
/// ends the delay early once the server is reachable again.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    reset_after: Duration,
    jitter: f64,
    next: Duration,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            1.0,
        )
    }
}

impl Backoff {
    /// A backoff from `initial` doubling to `cap`, with up to `jitter × delay` added at random,
    /// that forgets past failures after `reset_after` without one.
    pub fn new(initial: Duration, cap: Duration, reset_after: Duration, jitter: f64) -> Self {
        Self {
            initial,
            cap,
            reset_after,
            jitter,
            next: initial,
            last_failure: None,
        }
    }

    /// Records a failure and returns how long to wait before retrying.
    ///
    /// The result never exceeds the cap, jitter included.
    pub fn failure(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|t| now.duration_since(t) >= self.reset_after)
        {
            self.next = self.initial;
        }
        self.last_failure = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.cap);
        base.mul_f64(1.0 + self.jitter * fastrand::f64())
            .min(self.cap)
    }

    /// Forgets all failures at once (for example after a successful sync).
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.last_failure = None;
    }
}

/// What a failed request says about the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer: connection refused, reset or cut, TLS failure, a response stream that broke
    /// or went silent. Retried as soon as the server is known to answer again.
    Unreachable,
    /// The server answered, but with a refusal (429, 5xx) or something unusable. Retried on the
    /// backoff alone, unless the server was unreachable at the time (then it was probably still
    /// starting, and its return ends the wait too).
    Refused,
}

impl Failure {
    /// Classifies a client error: only an answer from the server (an API status, a body that
    /// does not parse) proves it reachable.
    pub fn of(e: &kube::Error) -> Self {
        match e {
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                Failure::Unreachable
            }
            _ => Failure::Refused,
        }
    }
}

/// Where one waiter stands against the connectivity signal: handed out by
/// [`Connectivity::failed`], consumed by [`Connectivity::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// `Some(g)`: the wait ends early once the recovery count exceeds `g`. `None`: backoff only.
    recovered_after: Option<u64>,
}

/// How often the probe runs while the server is unreachable (1 s), ±25 % so that many hosts
/// probing one server do not fall into step.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// A probe that has not answered by then counts as failed; the next one starts on schedule.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Waiters woken by a recovery retry spread over this long, so that a process with many
/// informers does not send all its requests in the same millisecond.
const RECOVERY_SPREAD: Duration = Duration::from_millis(400);

type Probe = dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync;

/// The connectivity state every waiter watches.
#[derive(Debug, Clone, Copy, Default)]
struct Signal {
    /// The last word on the server is that it could not be reached.
    down: bool,
    /// How many times the server went from unreachable to answering.
    recoveries: u64,
}

struct Shared {
    signal: watch::Sender<Signal>,
    /// A copy of `signal.down`, so the success path costs one atomic load while all is well.
    down: AtomicBool,
    probe: Box<Probe>,
    prober: Mutex<Option<AbortHandle>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(p) = self.prober.get_mut().unwrap().take() {
            p.abort();
        }
    }
}

/// Whether the API server can be reached, shared by everything that talks to it through one
/// client (an [`InformerFactory`](crate::informer::factory::InformerFactory) holds one for all its
/// informers), so that one success wakes every waiter.
///
/// Requests report [`failed`](Self::failed) or [`reached`](Self::reached); waiters sleep in
/// [`wait`](Self::wait). While the last word is "unreachable", a background task probes the
/// server's `/readyz` about once a second: when every reflector is asleep in its backoff,
/// nobody else would notice that the server is back. A probe or any reported success ends the
/// outage and wakes every waiter holding an unreachable ticket, spread over about 0.4 s.
///
/// Where it may surprise: a server that answers `/readyz` is "reachable" even if it then
/// refuses the request a waiter makes; that waiter fails again and, the server now being
/// reachable, falls back on its backoff. It only shortens waits after requests that *failed*:
/// a request hanging on a black-holed connection is not helped until it times out. The probe is
/// spawned on the tokio runtime of the first unreachable failure; reported outside a runtime,
/// none runs, and waits end on another request's success or on the backoff.
#[derive(Clone)]
pub struct Connectivity {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Connectivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = *self.shared.signal.borrow();
        f.debug_struct("Connectivity")
            .field("down", &s.down)
            .field("recoveries", &s.recoveries)
            .finish_non_exhaustive()
    }
}

impl Connectivity {
    /// Connectivity to the API server behind `client`, probed through `GET /readyz`.
    ///
    /// The probe succeeds on `200 ok`, and also on 401, 403 or 404: the server answered, and a
    /// cluster that hides `/readyz` from us leaves no better sign. A 5xx (not ready, etcd down)
    /// or 429 is no success: a waiter woken then would only be refused.
    pub fn new(client: kube::Client) -> Self {
        Self::with_probe(move || {
            let client = client.clone();
            async move {
                let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
                    return false;
                };
                match client.request_text(req).await {
                    Ok(body) => body.trim() == "ok",
                    Err(kube::Error::Api(s)) => matches!(s.code, 401 | 403 | 404),
                    Err(_) => false,
                }
            }
        })
    }

    /// Connectivity checked by `probe`, which answers whether the server is reachable. For
    /// tests, and for servers reached some other way.
    pub fn with_probe<F, Fut>(probe: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let (signal, _) = watch::channel(Signal::default());
        Self {
            shared: Arc::new(Shared {
                signal,
                down: AtomicBool::new(false),
                probe: Box::new(move || Box::pin(probe())),
                prober: Mutex::new(None),
            }),
        }
    }

    /// Records a failed request and returns the ticket to [`wait`](Self::wait) with.
    ///
    /// An unreachable failure marks the server down (starting the probe); a refusal does not
    /// change what is known, and its ticket ends early only if the server was already down.
    pub fn failed(&self, failure: Failure) -> Ticket {
        let recoveries = match failure {
            Failure::Unreachable => {
                let mut recoveries = 0;
                self.shared.signal.send_if_modified(|s| {
                    // Under the signal's lock, so the copy never disagrees with it for long.
                    self.shared.down.store(true, Ordering::SeqCst);
                    recoveries = s.recoveries;
                    let changed = !s.down;
                    s.down = true;
                    changed
                });
                self.start_probe();
                Some(recoveries)
            }
            Failure::Refused => {
                let s = *self.shared.signal.borrow();
                s.down.then_some(s.recoveries)
            }
        };
        Ticket {
            recovered_after: recoveries,
        }
    }

    /// Records that a request reached the server. Ends an outage, waking its waiters; costs one
    /// atomic load otherwise, so call it after every success that is cheap to notice.
    pub fn reached(&self) {
        if !self.shared.down.load(Ordering::SeqCst) {
            return;
        }
        self.shared.signal.send_if_modified(|s| {
            self.shared.down.store(false, Ordering::SeqCst);
            if !s.down {
                return false;
            }
            s.down = false;
            s.recoveries += 1;
            true
        });
    }

    /// Whether the last word on the server is that it could not be reached.
    pub fn is_down(&self) -> bool {
        self.shared.signal.borrow().down
    }

    /// How many outages have ended since this was created.
    pub fn recoveries(&self) -> u64 {
        self.shared.signal.borrow().recoveries
    }

    /// Sleeps `delay` (a backoff), or less: a wait on an early-ending `ticket` returns a random
    /// moment within about 0.4 s after the server answers again, never after `delay`.
    pub async fn wait(&self, ticket: Ticket, delay: Duration) {
        let deadline = Instant::now() + delay;
        let Some(seen) = ticket.recovered_after else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        let mut rx = self.shared.signal.subscribe();
        let recovered = async move { rx.wait_for(|s| s.recoveries > seen).await.is_ok() };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            true = recovered => {
                let spread = RECOVERY_SPREAD.mul_f64(fastrand::f64());
                tokio::time::sleep_until(deadline.min(Instant::now() + spread)).await;
            }
        }
    }

    fn start_probe(&self) {
        let mut prober = self.shared.prober.lock().unwrap();
        if prober.as_ref().is_some_and(|p| !p.is_finished()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = runtime.spawn(probe_while_down(
            Arc::downgrade(&self.shared),
            self.shared.signal.subscribe(),
        ));
        *prober = Some(task.abort_handle());
    }
}

/// Probes while the server is down, at most about once per [`PROBE_INTERVAL`], until the last
/// handle to the connectivity is dropped. Holds only a weak reference between probes, so that it
/// never keeps a dropped factory's state alive.
async fn probe_while_down(shared: Weak<Shared>, mut rx: watch::Receiver<Signal>) {
    let mut last_probe: Option<Instant> = None;
    loop {
        if rx.wait_for(|s| s.down).await.is_err() {
            return;
        }
        // The first probe of an outage goes at once: a lone cut connection to a healthy server
        // then costs its waiters only the spread. Later ones keep the interval, so a server that
        // accepts connections and drops them is not hammered.
        if let Some(last) = last_probe {
            let interval = PROBE_INTERVAL.mul_f64(0.75 + 0.5 * fastrand::f64());
            tokio::time::sleep_until(last + interval).await;
            if !rx.borrow().down {
                continue;
            }
        }
        last_probe = Some(Instant::now());
        let probe = match shared.upgrade() {
            Some(s) => (s.probe)(),
            None => return,
        };
        let ok = tokio::time::timeout(PROBE_TIMEOUT, probe)
            .await
            .unwrap_or(false);
        if ok {
            match shared.upgrade() {
                Some(s) => Connectivity { shared: s }.reached(),
                None => return,
            }
            // The next outage starts with a prompt probe again.
            last_probe = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_the_cap_and_resets_after_a_healthy_stretch() {
        let mut b = Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            0.0,
        );
        let delays: Vec<u64> = (0..8).map(|_| b.failure().as_millis() as u64).collect();
        assert_eq!(
            delays,
            [800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000]
        );
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(
            b.failure(),
            Duration::from_secs(30),
            "119 s is not yet healthy long enough"
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.failure(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_within_bounds() {
        let mut b = Backoff::default();
        for _ in 0..50 {
            let first = b.failure();
            assert!(
                first >= Duration::from_millis(800) && first <= Duration::from_millis(1600),
                "{first:?}"
            );
            b.reset();
        }
        for _ in 0..20 {
            assert!(b.failure() <= Duration::from_secs(30));
        }
    }

    /// A fake server: reachable or not, counting the probes it receives.
    #[derive(Clone, Default)]
    struct Server {
        up: Arc<AtomicBool>,
        probes: Arc<AtomicU64>,
    }

    impl Server {
        fn connectivity(&self) -> Connectivity {
            let s = self.clone();
            Connectivity::with_probe(move || {
                s.probes.fetch_add(1, Ordering::SeqCst);
                let up = s.up.load(Ordering::SeqCst);
                async move { up }
            })
        }

        fn set_up(&self, up: bool) {
            self.up.store(up, Ordering::SeqCst);
        }

        fn probes(&self) -> u64 {
            self.probes.load(Ordering::SeqCst)
        }
    }

    /// Spawns a waiter and returns when it woke, measured from now.
    fn waiter(
        conn: &Connectivity,
        ticket: Ticket,
        delay: Duration,
    ) -> tokio::task::JoinHandle<Duration> {
        let conn = conn.clone();
        let start = Instant::now();
        tokio::spawn(async move {
            conn.wait(ticket, delay).await;
            start.elapsed()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_waiter_retries_within_about_a_second_of_the_server_returning() {
        let server = Server::default();
        let conn = server.connectivity();
        let ticket = conn.failed(Failure::Unreachable);
        let woke = waiter(&conn, ticket, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(!woke.is_finished(), "the server is still down");
        server.set_up(true);
        let woke = woke.await.unwrap();
        let after_return = woke - Duration::from_secs(15);
        assert!(
            after_return <= PROBE_INTERVAL.mul_f64(1.25) + RECOVERY_SPREAD,
            "woke {after_return:?} after the server returned"
        );
        assert!(!conn.is_down());
        assert_eq!(conn.recoveries(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_probe_runs_about_once_a_second_only_while_the_server_is_down() {
        let server = Server::default();
        let conn = server.connectivity();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(server.probes(), 0, "nobody failed: nothing to probe");
        let _ticket = conn.failed(Failure::Unreachable);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let while_down = server.probes();
        assert!(
            (8..=14).contains(&while_down),
            "{while_down} probes in 10 s of outage"
        );
        server.set_up(true);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let at_recovery = server.probes();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(server.probes(), at_recovery, "no probing once it answers");
    }

    #[tokio::test(start_paused = true)]
    async fn any_success_ends_the_outage_without_waiting_for_the_probe() {
        let server = Server::default();
        let conn = server.connectivity();
        let ticket = conn.failed(Failure::Unreachable);
        let woke = waiter(&conn, ticket, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Another request got through before the next probe is due.
        conn.reached();
        let woke = woke.await.unwrap();
        assert!(
            woke <= Duration::from_millis(1500) + RECOVERY_SPREAD,
            "{woke:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_by_a_reachable_server_keeps_its_backoff() {
        let server = Server::default();
        server.set_up(true);
        let conn = server.connectivity();
        let refused = conn.failed(Failure::Refused);
        let woke = waiter(&conn, refused, Duration::from_secs(8));
        // Meanwhile another request is cut off and the server answers again: that recovery
        // says nothing about the refusal.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _cut = conn.failed(Failure::Unreachable);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(conn.recoveries(), 1);
        assert_eq!(woke.await.unwrap(), Duration::from_secs(8));
        assert_eq!(server.probes(), 1, "refusals alone never probe");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_while_the_server_is_down_ends_when_it_is_back() {
        // A starting apiserver refuses (503) before /readyz says ok.
        let server = Server::default();
        let conn = server.connectivity();
        let _first = conn.failed(Failure::Unreachable);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let refused = conn.failed(Failure::Refused);
        let woke = waiter(&conn, refused, Duration::from_secs(25));
        tokio::time::sleep(Duration::from_secs(2)).await;
        server.set_up(true);
        let woke = woke.await.unwrap();
        assert!(
            woke <= Duration::from_secs(2) + PROBE_INTERVAL.mul_f64(1.25) + RECOVERY_SPREAD,
            "{woke:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn woken_waiters_spread_out_instead_of_stampeding() {
        let server = Server::default();
        let conn = server.connectivity();
        let waiters: Vec<_> = (0..40)
            .map(|_| {
                let t = conn.failed(Failure::Unreachable);
                waiter(&conn, t, Duration::from_secs(30))
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(3)).await;
        server.set_up(true);
        let mut woke = Vec::new();
        for w in waiters {
            woke.push(w.await.unwrap());
        }
        let (first, last) = (woke.iter().min().unwrap(), woke.iter().max().unwrap());
        assert!(
            *last - *first >= RECOVERY_SPREAD / 2,
            "40 waiters woke within {:?} of each other",
            *last - *first
        );
        assert!(*last - *first <= RECOVERY_SPREAD, "{first:?}..{last:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_early_wake_never_outlasts_the_backoff() {
        let server = Server::default();
        server.set_up(true);
        let conn = server.connectivity();
        let t = conn.failed(Failure::Unreachable);
        let woke = waiter(&conn, t, Duration::from_millis(50));
        assert!(woke.await.unwrap() <= Duration::from_millis(50));
    }

    #[test]
    fn only_an_answer_from_the_server_proves_it_reachable() {
        let status = kube::core::Status::failure("overloaded", "TooManyRequests").with_code(429);
        assert_eq!(
            Failure::of(&kube::Error::Api(Box::new(status))),
            Failure::Refused
        );
        let refused: Box<dyn std::error::Error + Send + Sync> =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            Failure::of(&kube::Error::Service(refused)),
            Failure::Unreachable
        );
        assert_eq!(
            Failure::of(&kube::Error::ReadEvents(std::io::Error::from(
                std::io::ErrorKind::UnexpectedEof
            ))),
            Failure::Unreachable
        );
    }
}
