//! Host imports: what a guest may call, one file per WIT interface, and the per-call state they
//! share (limits, accounting, the guest's declared kinds and grant).
//!
//! Decided per failure: a broken *limit* (too many host calls) traps the guest, because it is
//! abuse and the reconcile must stop; everything the guest can reasonably handle (not found,
//! conflict, forbidden, too large, undeclared kind, timeout) is a WIT `error` it receives.
//!
//! Every argument is guest-controlled and the guest is hostile: names and namespaces are checked
//! as Kubernetes checks them ([`crate::names`]), path segments are percent-encoded, and nothing built
//! from guest data is unwrapped. Bad input is `invalid` or `too-large`, never `other`, never a
//! panic. Every API request goes through [`HostState::send`], which measures it.

pub mod api;
pub mod cache;
pub mod client;
pub mod errors;
mod limiter;
pub mod log;
mod notes;

pub use limiter::Limiter;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::guest::bindings::{GuestError, Gvk, Request};
use crate::guest::grant::Grant;
use crate::guest::identity::Rule;
use crate::guest::read_your_writes::Floors;
use crate::informer::discovery::Resource;
use crate::informer::{Informer, Namespaces};
use crate::names;
use crate::object::object_key;
pub use errors::api_error;
use errors::is_cluster_failure;

/// Limits for one reconcile (or describe, or map) call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline, enforced by epoch interruption [10 s].
    #[serde(with = "millis", rename = "deadline_ms")]
    pub deadline: Duration,
    /// Linear memory cap [64 MiB].
    pub memory_bytes: usize,
    /// Host calls per reconcile [10 000]; one more traps.
    pub host_calls: u32,
    /// Bytes the host may return to the guest per reconcile [64 MiB]; past it, reads answer
    /// `too-large`.
    pub bytes_out: u64,
    /// Largest list page [500]; a guest asking for more gets this many.
    pub max_page: u32,
    /// How long a read waits for the cache to reach this guest's own write [5 s].
    #[serde(with = "millis", rename = "read_your_writes_timeout_ms")]
    pub read_your_writes_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            host_calls: 10_000,
            bytes_out: 64 << 20,
            max_page: 500,
            read_your_writes_timeout: Duration::from_secs(5),
        }
    }
}

mod millis {
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        let ms: u64 = serde::Deserialize::deserialize(d)?;
        Ok(Duration::from_millis(ms))
    }
}

/// Counters per guest, for status and metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Reconciles that returned `Ok`.
    pub reconciles_ok: AtomicU64,
    /// Reconciles that returned a WIT error.
    pub reconciles_failed: AtomicU64,
    /// Reconciles that trapped (panic, deadline, memory, host-call limit).
    pub traps: AtomicU64,
    /// Uncached API reads (the `api` interface).
    pub uncached_reads: AtomicU64,
    /// Writes sent to the API server.
    pub writes: AtomicU64,
    /// The most linear memory one call (a reconcile or a `map`) reached, over all its memories:
    /// see [`Limiter::peak`].
    pub peak_memory_bytes: AtomicU64,
}

/// A kind the guest declared, with its informer and resolved resource.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The shared informer serving cache reads of this kind.
    pub informer: Arc<Informer>,
    /// This guest's read-your-writes floors for this kind.
    pub floors: Arc<Floors>,
    /// Field indexes this guest declared for this kind. The informer's store is shared and may
    /// hold other guests' indexes too; a guest may match only on its own.
    pub indexes: Vec<String>,
}

/// What every call of one guest shares: its identity, client, grant and declared kinds.
pub struct GuestContext {
    /// The guest's name (from the host config).
    pub name: String,
    /// The client writes and uncached reads go through: the host's, or one impersonating
    /// `identity`.
    pub client: kube::Client,
    /// The ServiceAccount the guest acts as, if not the host: a 403 then names it and the rule
    /// to add.
    pub identity: Option<crate::guest::identity::ServiceAccount>,
    /// What the operator granted.
    pub grant: Grant,
    /// Kinds from `describe`.
    pub declared: HashMap<Gvk, Declared>,
    /// Whether cache reads honour read-your-writes (the guest's choice, unless the host
    /// config turns it off).
    pub read_your_writes: bool,
    /// Per-call limits.
    pub limits: Limits,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The guest's clocks and randomness: the host's, or fixed for a repeatable call.
    pub world: crate::guest::world::World,
    /// Where this guest's reconciles are recorded, if they are (`reconciled run --record`).
    pub recorder: Option<Arc<crate::guest::tape::Recorder>>,
    /// Whether each reconcile returns its recording even without a recorder (a guest with a
    /// shadow version, whose writes are compared with the shadow's).
    pub taped: bool,
}

impl std::fmt::Debug for GuestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestContext")
            .field("name", &self.name)
            .field("grant", &self.grant)
            .field(
                "declared",
                &self
                    .declared
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl GuestContext {
    /// The declared kind, or the `not-declared` error the guest should see.
    ///
    /// Every import calls this: it hashes the guest's `Gvk` as it is, building nothing.
    pub fn declared(&self, kind: &Gvk) -> Result<&Declared, GuestError> {
        self.declared.get(kind).ok_or_else(|| {
            GuestError::NotDeclared(format!(
                "kind {kind} is not declared by guest {:?}: add it to `for`, `owns` or `watches` in describe()",
                self.name
            ))
        })
    }

    /// The resolved resource of a declared kind, borrowed from its informer (it never changes
    /// once resolved).
    pub fn resource(&self, kind: &Gvk) -> Result<(&Resource, &Declared), GuestError> {
        let d = self.declared(kind)?;
        match d.informer.resource() {
            Some(r) => Ok((r, d)),
            None => Err(GuestError::Other(format!(
                "kind {kind} is not resolved yet: {}",
                d.informer.status()
            ))),
        }
    }

    /// Authorizes one call on `kind` in `namespace` (and on object `name`, if any): the kind
    /// is declared, the namespace and name are well-formed, and the grant allows them for this
    /// resource's scope. Every import goes through here.
    pub fn authorize(
        &self,
        kind: &Gvk,
        namespace: &str,
        name: Option<&str>,
        access: Access,
    ) -> Result<(&Resource, &Declared), GuestError> {
        let (resource, declared) = self.resource(kind)?;
        check_access(&self.name, &self.grant, resource, namespace, name, access)?;
        Ok((resource, declared))
    }

    /// The work-queue keys of what the guest's `map` answered for kind `for_kind`: each request
    /// that could name a primary, once, and a count of the rest with why the first was dropped.
    ///
    /// `requests` is guest-controlled. A request is dropped when no reconcile of it could ever
    /// read its primary: a name or namespace Kubernetes refuses, a namespace on a
    /// cluster-scoped kind (or none on a namespaced one), a namespace outside the grant or
    /// outside the namespaces the `for` informer covers. While the `for` kind is not resolved
    /// yet, only the names' form is checked.
    pub fn map_keys(&self, for_kind: &Gvk, requests: &[Request]) -> Mapped {
        let declared = self.declared(for_kind).ok();
        let target = Target {
            guest: &self.name,
            grant: &self.grant,
            kind: for_kind,
            resource: declared.and_then(|d| d.informer.resource()),
            namespaces: declared.map(|d| &d.informer.key().scope.namespaces),
        };
        let mut mapped = Mapped::default();
        let mut seen = BTreeSet::new();
        for r in requests {
            match target.key(r) {
                Ok(key) => {
                    if seen.insert(key.clone()) {
                        mapped.keys.push(key);
                    }
                }
                Err(reason) => {
                    let dropped = mapped.dropped.get_or_insert_with(|| Dropped {
                        count: 0,
                        first: format!(
                            "{}/{}: {reason}",
                            names::shown(&r.namespace),
                            names::shown(&r.name)
                        ),
                    });
                    dropped.count += 1;
                }
            }
        }
        mapped
    }
}

/// The primaries a `map` answer may name, for [`GuestContext::map_keys`].
struct Target<'a> {
    guest: &'a str,
    grant: &'a Grant,
    kind: &'a Gvk,
    /// `None` while the `for` kind is not resolved.
    resource: Option<&'a Resource>,
    /// The namespaces the `for` informer covers.
    namespaces: Option<&'a Namespaces>,
}

impl Target<'_> {
    /// The work-queue key of `r`, or why no reconcile of it could ever read its primary.
    fn key(&self, r: &Request) -> Result<String, String> {
        match self.resource {
            Some(resource) => check_access(
                self.guest,
                self.grant,
                resource,
                &r.namespace,
                Some(&r.name),
                Access::CacheRead,
            )
            .map_err(|e| guest_error_message(&e).to_string())?,
            None => {
                names::object_name(&self.kind.group, &self.kind.kind, &r.name)
                    .map_err(|e| e.to_string())?;
                if !r.namespace.is_empty() {
                    names::namespace(&r.namespace).map_err(|e| e.to_string())?;
                }
            }
        }
        if let Some(Namespaces::Only(set)) = self.namespaces
            && !r.namespace.is_empty()
            && !set.contains(&r.namespace)
        {
            return Err(format!(
                "namespace {} is outside the namespaces this guest watches",
                names::shown(&r.namespace)
            ));
        }
        Ok(object_key(Some(&r.namespace), &r.name))
    }
}

/// What a guest's `map` answered, sorted by [`GuestContext::map_keys`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mapped {
    /// Keys to queue, each once, in the order answered.
    pub keys: Vec<String>,
    /// The requests dropped, if any.
    pub dropped: Option<Dropped>,
}

/// Requests from `map` that could never be reconciled: how many, and the first, so that one
/// warning per call says enough without repeating a hostile answer.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "map() answered {count} request(s) that can never be reconciled, dropped; the first, {first}; answer namespace/name pairs of the `for` kind in namespaces the guest watches"
)]
pub struct Dropped {
    /// How many were dropped.
    pub count: usize,
    /// The first dropped, shown shortened, and why.
    pub first: String,
}

/// The message a [`GuestError`] carries.
fn guest_error_message(e: &GuestError) -> &str {
    match e {
        GuestError::NotFound(m)
        | GuestError::Conflict(m)
        | GuestError::Forbidden(m)
        | GuestError::Invalid(m)
        | GuestError::TooLarge(m)
        | GuestError::NotDeclared(m)
        | GuestError::UnindexedField(m)
        | GuestError::Timeout(m)
        | GuestError::Other(m) => m,
    }
}

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

/// What a call does, for [`check_access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A cache read: namespace "" (a list) means every namespace the informers cover.
    CacheRead,
    /// An uncached read: namespace "" (a list) would be cluster-wide on the server, so only an
    /// unconfined guest may pass it.
    ServerRead,
    /// A write: a namespaced kind always needs its namespace.
    Write,
}

/// The grant and well-formedness checks of [`GuestContext::authorize`], without the context.
///
/// `namespace` and `name` are guest-controlled and end up in URLs and keys: both are validated
/// here as Kubernetes validates them (see [`names`]), so that no guest string can change which
/// resource a request addresses, and a name that can never exist is `invalid`, not not-found.
pub fn check_access(
    guest: &str,
    grant: &Grant,
    resource: &Resource,
    namespace: &str,
    name: Option<&str>,
    access: Access,
) -> Result<(), GuestError> {
    if let Some(name) = name {
        names::object_name(&resource.group, &resource.kind, name)
            .map_err(|e| GuestError::Invalid(e.to_string()))?;
    }
    if !resource.namespaced {
        // A cluster-scoped kind has no namespace to confine it: only an unconfined guest may
        // touch it, and a namespace argument would be silently ignored by the URL.
        if !namespace.is_empty() {
            return Err(GuestError::Invalid(format!(
                "{} is cluster-scoped: pass namespace \"\"",
                resource.kind
            )));
        }
        if grant.namespaces.is_some() {
            return Err(GuestError::Forbidden(format!(
                "guest {guest:?} is confined to namespaces {} and may not use cluster-scoped {}; grant it all namespaces in the host config",
                grant.describe_namespaces(),
                resource.plural
            )));
        }
        return Ok(());
    }
    if namespace.is_empty() {
        // Only a list may span namespaces: from the cache (limited to the informers' scope), or
        // from the server for an unconfined guest.
        return match (access, &grant.namespaces) {
            (Access::CacheRead, _) | (Access::ServerRead, None) if name.is_none() => Ok(()),
            _ => Err(GuestError::Invalid(format!(
                "{} is namespaced: name a namespace",
                resource.kind
            ))),
        };
    }
    names::namespace(namespace).map_err(|e| GuestError::Invalid(e.to_string()))?;
    if !grant.allows_namespace(namespace) {
        return Err(GuestError::Forbidden(format!(
            "guest {guest:?} is not granted namespace {namespace:?} (granted: {}); widen its grant in the host config",
            grant.describe_namespaces()
        )));
    }
    Ok(())
}

/// The store data of one call: WASI (no files, no sockets, no environment), limits and
/// accounting.
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
    /// What this call did, when its guest is recorded (see [`notes`]).
    pub(crate) tape: Option<crate::guest::tape::Tape>,
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

/// Environment variables every guest call sees, set once per process (see [`set_environment`]).
static ENVIRONMENT: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Sets the environment variables every guest call of this process sees, such as
/// `RECONCILED_REPLICA` (the replica's identity, which a guest may log or record); returns
/// `false` if it was set already, which leaves it as it was.
///
/// Where it may surprise: it is process-wide and set once, because it describes the process;
/// guests otherwise see an empty environment.
pub fn set_environment(vars: Vec<(String, String)>) -> bool {
    ENVIRONMENT.set(vars).is_ok()
}

/// Most of a guest's stderr kept per call (a panic message, a few log lines).
const STDERR_CAPTURE: usize = 16 << 10;

impl HostState {
    /// State for one call of a guest.
    pub fn new(ctx: Option<Arc<GuestContext>>, limits: Limits) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let mut wasi = wasmtime_wasi::WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
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
        for (k, v) in ENVIRONMENT.get().map_or(&[][..], Vec::as_slice) {
            wasi.env(k, v);
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
        let answer = {
            let _waiting = Stopwatch::start(&mut self.api_wait);
            ctx.client.request_text(request).await
        };
        self.cluster_failed = answer.as_ref().is_err_and(is_cluster_failure);
        answer.map_err(|e| errors::guest_error(ctx.identity.as_ref(), needed.as_ref(), e))
    }

    /// Runs one of the host's own waits (read-your-writes) and counts its time in
    /// [`HostState::host_wait`].
    pub async fn wait_on_host<T>(&mut self, wait: impl Future<Output = T>) -> T {
        let _waiting = Stopwatch::start(&mut self.host_wait);
        wait.await
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

    /// Counts `bytes` of an answer to a write that already happened: reported, never refused
    /// (refusing would tell the guest a completed write failed).
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

impl Metrics {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(namespaced: bool) -> Resource {
        Resource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Thing".into(),
            plural: "things".into(),
            namespaced,
        }
    }

    fn check(
        grant: &Grant,
        namespaced: bool,
        ns: &str,
        name: Option<&str>,
        access: Access,
    ) -> Result<(), GuestError> {
        check_access("g", grant, &res(namespaced), ns, name, access)
    }

    #[test]
    fn a_confined_guest_may_not_touch_cluster_scoped_kinds() {
        let confined = Grant::namespaces(["team-a"]);
        let err = check(&confined, false, "", Some("x"), Access::Write).unwrap_err();
        assert!(matches!(err, GuestError::Forbidden(_)), "{err:?}");
        // Passing a namespace for a cluster-scoped kind is refused, not silently ignored.
        let err = check(&confined, false, "team-a", Some("x"), Access::Write).unwrap_err();
        assert!(matches!(err, GuestError::Invalid(_)), "{err:?}");
        assert!(check(&Grant::default(), false, "", Some("x"), Access::Write).is_ok());
    }

    #[test]
    fn guest_strings_cannot_change_the_url() {
        let all = Grant::default();
        for ns in [
            "x/secrets/y?",
            "../kube-system",
            "A",
            "has space",
            "a%2Fb",
            "",
        ] {
            assert!(
                check(&all, true, ns, Some("z"), Access::Write).is_err(),
                "namespace {ns:?} accepted"
            );
        }
        for name in [
            "a/b", "..", ".", "a?b", "a#b", "a%2Fb", "", "a\\b", "a b", "a<b", "a>b", "a`b",
            "a\"b", "a\0b", "a\nb",
        ] {
            let err = check(&all, true, "ok", Some(name), Access::Write).unwrap_err();
            assert!(
                matches!(err, GuestError::Invalid(_)),
                "name {name:?}: {err:?}"
            );
        }
        let mut role = res(false);
        role.group = "rbac.authorization.k8s.io".into();
        role.kind = "ClusterRole".into();
        assert!(
            check_access("g", &all, &role, "", Some("system:node"), Access::Write).is_ok(),
            "RBAC names may hold ':'"
        );
    }

    #[test]
    fn an_invalid_name_says_what_a_valid_one_looks_like() {
        let all = Grant::default();
        let err = check(&all, true, "team-a/../team-b", Some("x"), Access::Write).unwrap_err();
        assert!(
            matches!(&err, GuestError::Invalid(m) if m.contains("DNS-1123 label") && m.contains("team-a")),
            "{err:?}"
        );
        let err = check(&all, true, "ok", Some("a<b"), Access::Write).unwrap_err();
        assert!(
            matches!(&err, GuestError::Invalid(m) if m.contains("DNS-1123 subdomain") && m.contains("\"a<b\"")),
            "{err:?}"
        );
    }

    fn request(namespace: &str, name: &str) -> Request {
        Request {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn map_answers_that_could_never_be_reconciled_are_dropped() {
        let grant = Grant::namespaces(["team-a", "team-b"]);
        let kind = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Thing".into(),
        };
        let resource = res(true);
        let watched = Namespaces::Only(["team-a".to_string()].into());
        let target = Target {
            guest: "g",
            grant: &grant,
            kind: &kind,
            resource: Some(&resource),
            namespaces: Some(&watched),
        };
        assert_eq!(target.key(&request("team-a", "x")), Ok("team-a/x".into()));
        for (ns, name) in [
            ("team-a", "a<b"),
            ("team-a", ""),
            ("team-a", ".."),
            ("", "x"),
            ("..", "x"),
            ("team-a/x", "y"),
            ("kube-system", "x"),
            ("team-b", "x"),
        ] {
            assert!(target.key(&request(ns, name)).is_err(), "{ns:?}/{name:?}");
        }
        // Not resolved yet: only the form is checked.
        let unresolved = Target {
            resource: None,
            namespaces: None,
            ..target
        };
        assert!(unresolved.key(&request("kube-system", "x")).is_ok());
        assert!(unresolved.key(&request("a\0", "x")).is_err());
    }

    #[test]
    fn a_dropped_map_answer_is_one_short_message() {
        let d = Dropped {
            count: 9_999,
            first: format!(
                "{}/{}: bad",
                names::shown("x"),
                names::shown(&"y".repeat(100_000))
            ),
        };
        let message = d.to_string();
        assert!(message.contains("9999 request(s)"), "{message}");
        assert!(message.len() < 400, "{message}");
    }

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
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let ctx = GuestContext {
            name: "g".into(),
            client: kube::Client::try_from(config).unwrap(),
            identity: None,
            grant: Grant::default(),
            declared: HashMap::new(),
            read_your_writes: false,
            limits: Limits::default(),
            metrics: Arc::default(),
            world: Default::default(),
            recorder: None,
            taped: false,
        };
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

    #[test]
    fn only_lists_span_namespaces_and_only_unconfined_guests_on_the_server() {
        let confined = Grant::namespaces(["team-a"]);
        assert!(
            check(&confined, true, "", None, Access::CacheRead).is_ok(),
            "the informers' scope bounds a cache list"
        );
        assert!(
            check(&confined, true, "", None, Access::ServerRead).is_err(),
            "a server list would be cluster-wide"
        );
        assert!(check(&Grant::default(), true, "", None, Access::ServerRead).is_ok());
        assert!(
            check(&Grant::default(), true, "", None, Access::Write).is_err(),
            "a write names its namespace"
        );
        assert!(
            check(&confined, true, "", Some("x"), Access::CacheRead).is_err(),
            "a get names its namespace"
        );
        let err = check(&confined, true, "team-b", Some("x"), Access::CacheRead).unwrap_err();
        assert!(
            matches!(&err, GuestError::Forbidden(m) if m.contains("team-b")),
            "{err:?}"
        );
    }
}
