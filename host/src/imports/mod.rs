//! Host imports: what a guest may call, one file per WIT interface, and the per-call state they
//! share (limits, accounting, the guest's declared kinds and grant).
//!
//! Decided per failure: a broken *limit* (too many host calls) traps the guest, because it is
//! abuse and the reconcile must stop; everything the guest can reasonably handle (not found,
//! conflict, forbidden, too large, undeclared kind, timeout) is a WIT `error` it receives.

pub mod api;
pub mod cache;
pub mod client;
pub mod log;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{GuestError, Gvk};
use crate::discovery::Resource;
use crate::grant::Grant;
use crate::informer::Informer;
use crate::read_your_writes::Floors;

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
    /// The host's client: writes and uncached reads go through it.
    pub client: kube::Client,
    /// What the operator granted.
    pub grant: Grant,
    /// Kinds from `describe`, keyed by `group/version/kind`.
    pub declared: HashMap<String, Declared>,
    /// Whether cache reads honour read-your-writes (the guest's choice, unless the host
    /// config turns it off).
    pub read_your_writes: bool,
    /// Per-call limits.
    pub limits: Limits,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for GuestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestContext")
            .field("name", &self.name)
            .field("grant", &self.grant)
            .field("declared", &self.declared.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// `group/version/kind`, the key of [`GuestContext::declared`].
pub fn gvk_key(g: &Gvk) -> String {
    format!("{}/{}/{}", g.group, g.version, g.kind)
}

impl GuestContext {
    /// The declared kind, or the `not-declared` error the guest should see.
    pub fn declared(&self, kind: &Gvk) -> Result<&Declared, GuestError> {
        self.declared.get(&gvk_key(kind)).ok_or_else(|| {
            GuestError::NotDeclared(format!(
                "kind {} is not declared by guest {:?}: add it to `for`, `owns` or `watches` in describe()",
                gvk_key(kind),
                self.name
            ))
        })
    }

    /// The resolved resource of a declared kind.
    pub fn resource(&self, kind: &Gvk) -> Result<(Resource, &Declared), GuestError> {
        let d = self.declared(kind)?;
        match d.informer.resource() {
            Some(r) => Ok((r.clone(), d)),
            None => Err(GuestError::Other(format!(
                "kind {} is not resolved yet: {}",
                gvk_key(kind),
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
    ) -> Result<(Resource, &Declared), GuestError> {
        let (resource, declared) = self.resource(kind)?;
        check_access(&self.name, &self.grant, &resource, namespace, name, access)?;
        Ok((resource, declared))
    }
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

/// Whether `s` is a namespace name (a DNS-1123 label).
pub fn valid_namespace(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` can be an object name in a URL path. Kinds differ in what they accept (RBAC
/// names may hold `:`), so this refuses only what would change the URL's meaning.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && !s.bytes().any(|b| {
            matches!(b, b'/' | b'%' | b'?' | b'#' | b'\\')
                || b.is_ascii_whitespace()
                || b.is_ascii_control()
        })
}

/// The grant and well-formedness checks of [`GuestContext::authorize`], without the context.
///
/// `namespace` and `name` are guest-controlled and end up in URLs: both are validated here so
/// that no guest string can change which resource a request addresses.
pub fn check_access(
    guest: &str,
    grant: &Grant,
    resource: &Resource,
    namespace: &str,
    name: Option<&str>,
    access: Access,
) -> Result<(), GuestError> {
    if let Some(name) = name
        && !valid_name(name)
    {
        return Err(GuestError::Invalid(format!(
            "{name:?} is not a valid object name"
        )));
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
    if !valid_namespace(namespace) {
        return Err(GuestError::Invalid(format!(
            "{namespace:?} is not a valid namespace name"
        )));
    }
    if !grant.allows_namespace(namespace) {
        return Err(GuestError::Forbidden(format!(
            "guest {guest:?} is not granted namespace {namespace:?} (granted: {}); widen its grant in the host config",
            grant.describe_namespaces()
        )));
    }
    Ok(())
}

/// Caps one call's memory across *all* its linear memories (a component may have several;
/// `StoreLimits` would cap each one separately), and its tables.
#[derive(Debug)]
pub struct Limiter {
    memory_used: usize,
    memory_max: usize,
}

/// Largest table a guest may grow (function references; a Rust guest needs a few thousand).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.memory_used - current.min(self.memory_used) + desired;
        if after > self.memory_max {
            return Ok(false);
        }
        self.memory_used = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        64
    }
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
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState")
            .field("calls", &self.calls)
            .field("bytes_out", &self.bytes_out)
            .finish_non_exhaustive()
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
        Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits: Limiter {
                memory_used: 0,
                memory_max: limits.memory_bytes,
            },
            ctx,
            calls: 0,
            bytes_out: 0,
            call_limits: limits,
            stderr,
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

    /// Charges `bytes` against the per-call budget, or answers `too-large`.
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

    /// Starts the host-call and byte budgets over (a reused instance's next call).
    pub fn reset_budgets(&mut self) {
        self.calls = 0;
        self.bytes_out = 0;
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

/// `text` with every control character (newlines included) replaced by a space: guest-made
/// text goes into the host's log lines, Events and status one line each, never forging more.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Maps an API server error to the WIT variant the guest matches on.
pub fn api_error(e: kube::Error) -> GuestError {
    match e {
        kube::Error::Api(s) => {
            let msg = format!("{} ({})", s.message, s.reason);
            match s.code {
                404 => GuestError::NotFound(msg),
                409 => GuestError::Conflict(msg),
                403 => GuestError::Forbidden(msg),
                400 | 422 => GuestError::Invalid(msg),
                413 => GuestError::TooLarge(msg),
                504 => GuestError::Timeout(msg),
                _ => GuestError::Other(format!("HTTP {}: {msg}", s.code)),
            }
        }
        other => GuestError::Other(other.to_string()),
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
        for name in ["a/b", "..", ".", "a?b", "a#b", "a%2Fb", "", "a\\b", "a b"] {
            assert!(
                check(&all, true, "ok", Some(name), Access::Write).is_err(),
                "name {name:?} accepted"
            );
        }
        assert!(
            check(&all, true, "ok", Some("system:node"), Access::Write).is_ok(),
            "RBAC-style names are fine"
        );
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
