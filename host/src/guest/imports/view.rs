//! The store data of one call (wasmtime-wasi's view): WASI, the memory limiter, the call's
//! budgets and its time accounting, borrowing the guest's [`GuestContext`]. Every API request
//! an import makes goes through [`HostState::send`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument as _;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::ctx::GuestContext;
use super::errors::{self, is_cluster_failure};
use super::limiter::Limiter;
use super::limits::Limits;
use crate::guest::bindings::GuestError;
use crate::guest::identity::Rule;

/// A request to the API server, or `invalid` if it cannot be built.
///
/// Every part built from guest data (names, namespaces, query values) is validated or encoded
/// before it gets here, so a failure should be impossible; one that happens anyway (a URL past
/// the `http` crate's 64 KiB, from a huge selector or continue token) is the guest's bad input,
/// answered as such, never a panic.
pub fn request(
    method: http::Method,
    uri: String,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, GuestError> {
    let length = uri.len();
    let mut builder = http::Request::builder().method(method).uri(uri);
    if let Some(content_type) = content_type {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    builder.body(body).map_err(|e| {
        GuestError::Invalid(format!(
            "the request cannot be built ({e}; its URL is {length} bytes): shorten the selector, field matches or continue token"
        ))
    })
}

/// The store data of one call: WASI (no files, no sockets, and no environment but what the
/// guest's [`World`](crate::guest::world::World) gives), limits and accounting.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// Memory and table limiter, installed with `Store::limiter`.
    pub limits: Limiter,
    /// The guest's shared context; `None` while running `describe` (before any kind exists).
    pub ctx: Option<Arc<GuestContext>>,
    calls: u32,
    bytes_out: u64,
    call_limits: Limits,
    stderr: MemoryOutputPipe,
    /// Time this call's imports spent waiting on the API server (see [`HostState::send`]).
    api_wait: Duration,
    /// Time this call's imports spent in the host's own waits (see [`HostState::wait_on_host`]).
    host_wait: Duration,
    /// Whether the last API request of this call failed because of the cluster.
    cluster_failed: bool,
    /// What this call did, when its guest is recorded (see `notes`).
    pub(crate) tape: Option<crate::guest::tape::Tape>,
    /// The guest's own spans still open in this call (see `trace`).
    pub(crate) spans: super::trace::Spans,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("calls", &self.calls)
            .field("bytes_out", &self.bytes_out)
            .field("api_wait", &self.api_wait)
            .field("host_wait", &self.host_wait)
            .field("cluster_failed", &self.cluster_failed)
            .finish_non_exhaustive()
    }
}

/// Adds the time from its start to its drop to a total. Dropped, not awaited, so that a wait
/// cut short (the call's future dropped at its deadline, in the middle of an import) still
/// counts up to that moment.
struct Stopwatch<'a> {
    total: &'a mut Duration,
    started: Instant,
}

impl<'a> Stopwatch<'a> {
    fn start(total: &'a mut Duration) -> Self {
        Self {
            total,
            started: Instant::now(),
        }
    }
}

impl Drop for Stopwatch<'_> {
    fn drop(&mut self) {
        *self.total += self.started.elapsed();
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Most of a guest's stderr kept per call (a panic message, a few log lines).
const STDERR_CAPTURE: usize = 16 << 10;

impl HostState {
    /// State for one call of a guest.
    pub fn new(ctx: Option<Arc<GuestContext>>, limits: Limits) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let mut wasi = wasmtime_wasi::WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        // Programs assume an argv[0]: Go's klog (imported by k8s.io/apimachinery) reads
        // os.Args[0] at init, in `describe` too, and panics on an empty list. One name for every
        // guest, so that nothing of the deployment leaks in and replays see what recordings saw.
        wasi.arg("reconciler");
        let mut tape = None;
        if let Some(ctx) = &ctx {
            ctx.world.apply(&mut wasi);
            // A recorded guest's random bytes come from a recorded seed; a guest taped only to be
            // compared with its shadow keeps the operating system's.
            let recording = ctx.recorder.as_ref().is_some_and(|r| r.active());
            if recording || ctx.taped {
                let seed = match recording {
                    true => ctx.world.recording_seed(&mut wasi),
                    false => 0,
                };
                tape = Some(crate::guest::tape::Tape {
                    seed,
                    ..Default::default()
                });
            }
        }
        Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: Limiter::new(limits.memory_bytes),
            ctx,
            calls: 0,
            bytes_out: 0,
            call_limits: limits,
            stderr,
            api_wait: Duration::ZERO,
            host_wait: Duration::ZERO,
            cluster_failed: false,
            tape,
            spans: super::trace::Spans::default(),
        }
    }

    /// What the guest wrote to stderr during this call (a panic message, for instance).
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).into_owned()
    }

    /// Counts one host call; past the limit, traps.
    pub fn count_call(&mut self) -> wasmtime::Result<()> {
        self.calls += 1;
        if self.calls > self.call_limits.host_calls {
            wasmtime::bail!(
                "guest exceeded its limit of {} host calls in one reconcile",
                self.call_limits.host_calls
            );
        }
        Ok(())
    }

    /// Charges `bytes` against the per-call budget, or answers `too-large` and charges nothing.
    ///
    /// Call it once per answer, with the size of everything the answer delivers: an answer
    /// refused as a whole must not spend the budget of the reads after it.
    pub fn charge(&mut self, bytes: usize) -> Result<(), GuestError> {
        let after = self.bytes_out + bytes as u64;
        if after > self.call_limits.bytes_out {
            return Err(GuestError::TooLarge(format!(
                "this reconcile has received {} bytes and the next answer ({bytes} bytes) would pass its budget of {}; read less (smaller pages, a selector, a field index)",
                self.bytes_out, self.call_limits.bytes_out
            )));
        }
        self.bytes_out = after;
        Ok(())
    }

    /// Starts the host-call and byte budgets, and the time accounting, over (a reused
    /// instance's next call).
    pub fn reset_budgets(&mut self) {
        self.calls = 0;
        self.bytes_out = 0;
        self.api_wait = Duration::ZERO;
        self.host_wait = Duration::ZERO;
        self.cluster_failed = false;
        self.spans.clear();
    }

    /// Sends one request to the API server and returns the answer's body, or the error the
    /// guest should see. Every import's API request goes through here, so that the time spent
    /// waiting on the server ([`HostState::api_wait`]) and whether the cluster failed
    /// ([`HostState::cluster_failed`]) are measured in one place.
    ///
    /// A 403 to a guest acting as a ServiceAccount names it and the rule to add (see
    /// [`identity::forbidden`](crate::guest::identity::forbidden)).
    pub async fn send(
        &mut self,
        ctx: &GuestContext,
        request: http::Request<Vec<u8>>,
    ) -> Result<String, GuestError> {
        let needed = ctx
            .identity
            .as_ref()
            .and_then(|_| Rule::of_request(request.method(), request.uri().path()));
        // Until an answer comes, the request counts as failed by the cluster: one still waiting
        // when the call is cut off at its deadline was the server's slowness.
        self.cluster_failed = true;
        // A child of the reconcile's span, for traces: what was asked and what came of it.
        let span = tracing::info_span!(
            "api",
            method = %request.method(),
            path = %request.uri().path(),
            status = tracing::field::Empty,
        );
        let answer = {
            let _waiting = Stopwatch::start(&mut self.api_wait);
            ctx.client
                .request_text(request)
                .instrument(span.clone())
                .await
        };
        span.record(
            "status",
            match &answer {
                Ok(_) => "ok".to_string(),
                Err(kube::Error::Api(s)) => s.code.to_string(),
                Err(e) => format!("failed: {e}"),
            },
        );
        self.cluster_failed = answer.as_ref().is_err_and(is_cluster_failure);
        answer.map_err(|e| errors::guest_error(ctx.identity.as_ref(), needed.as_ref(), e))
    }

    /// Runs one of the host's own waits (read-your-writes) and counts its time in
    /// [`HostState::host_wait`].
    pub async fn wait_on_host<T>(&mut self, wait: impl Future<Output = T>) -> T {
        let _waiting = Stopwatch::start(&mut self.host_wait);
        wait.instrument(tracing::info_span!("wait", on = "read-your-writes"))
            .await
    }

    /// Time this call's imports have spent waiting on the API server: every request from send
    /// to answer, including one cut short by the call's deadline.
    pub fn api_wait(&self) -> std::time::Duration {
        self.api_wait
    }

    /// Time this call's imports have spent in the host's own waits: read-your-writes waits for
    /// the cache to reach the guest's writes.
    pub fn host_wait(&self) -> std::time::Duration {
        self.host_wait
    }

    /// Whether the last API request of this call failed because of the cluster: no connection,
    /// a 5xx (504 included) or a 429, or no answer before the call was cut off. `false` when
    /// the call made no API request, or its last one succeeded or failed for the guest's own
    /// reasons (not found, conflict, forbidden, invalid).
    pub fn cluster_failed(&self) -> bool {
        self.cluster_failed
    }

    /// Counts `bytes` of an answer that must not be refused: reported, never refused. The answer
    /// to a write that already happened (refusing would tell the guest a completed write
    /// failed), or the settings (bounded by their own limit, and with no error to answer).
    pub fn note_bytes(&mut self, bytes: usize) {
        self.bytes_out = self.bytes_out.saturating_add(bytes as u64);
    }

    /// Every import's first step: counts the call against the limit and returns the guest
    /// context (both trap when they fail).
    pub fn enter(&mut self) -> wasmtime::Result<Arc<GuestContext>> {
        self.count_call()?;
        self.context()
    }

    /// The guest context, or a trap if called while describing (describe must not call out).
    pub fn context(&self) -> wasmtime::Result<Arc<GuestContext>> {
        self.ctx
            .clone()
            .ok_or_else(|| wasmtime::format_err!("describe() must not call host imports"))
    }

    /// The limits of this call.
    pub fn call_limits(&self) -> &Limits {
        &self.call_limits
    }
}

// `types` and `declaration` hold only types, but bindgen still generates a `Host` trait for
// every imported interface.
impl crate::guest::bindings::reconciled::runtime::types::Host for HostState {}
impl crate::guest::bindings::reconciled::runtime::declaration::Host for HostState {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::imports::api_error;

    fn state() -> HostState {
        HostState::new(None, Limits::default())
    }

    #[tokio::test(start_paused = true)]
    async fn host_waits_are_counted_even_when_cut_short() {
        let mut s = state();
        s.wait_on_host(tokio::time::sleep(Duration::from_secs(2)))
            .await;
        assert_eq!(s.host_wait(), Duration::from_secs(2));
        // The call's deadline drops the import's future in the middle of its wait.
        let cut = tokio::time::timeout(
            Duration::from_secs(1),
            s.wait_on_host(tokio::time::sleep(Duration::from_secs(60))),
        )
        .await;
        assert!(cut.is_err());
        assert_eq!(s.host_wait(), Duration::from_secs(3));
        assert_eq!(s.api_wait(), Duration::ZERO);
        s.reset_budgets();
        assert_eq!(s.host_wait(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_request_that_cannot_connect_is_the_clusters_failure() {
        let mut s = state();
        // Nothing listens on port 1 of loopback: the connection is refused.
        let ctx = GuestContext::unconnected(false);
        let req = request_to("/api/v1/namespaces");
        let err = s.send(&ctx, req).await.unwrap_err();
        assert!(matches!(err, GuestError::Other(_)), "{err:?}");
        assert!(s.cluster_failed());
        assert!(s.api_wait() > Duration::ZERO);
    }

    fn request_to(path: &str) -> http::Request<Vec<u8>> {
        super::request(http::Method::GET, path.into(), None, Vec::new()).unwrap()
    }

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn cluster_failures_are_5xx_429_and_transport_errors_only() {
        for code in [500, 503, 504, 429] {
            assert!(is_cluster_failure(&status(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 413, 422] {
            assert!(!is_cluster_failure(&status(code)), "{code}");
        }
        assert!(matches!(api_error(status(414)), GuestError::TooLarge(_)));
    }

    #[test]
    fn a_url_the_http_crate_refuses_is_invalid() {
        let err = super::request(
            http::Method::GET,
            format!("/api/v1/things?continue={}", "x".repeat(70_000)),
            None,
            Vec::new(),
        )
        .unwrap_err();
        assert!(matches!(err, GuestError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn a_refused_answer_charges_nothing() {
        let mut s = HostState::new(
            None,
            Limits {
                bytes_out: 1000,
                ..Limits::default()
            },
        );
        assert!(matches!(s.charge(1001), Err(GuestError::TooLarge(_))));
        assert!(s.charge(950).is_ok(), "the refusal spent nothing");
        assert!(s.charge(51).is_err());
    }
}
