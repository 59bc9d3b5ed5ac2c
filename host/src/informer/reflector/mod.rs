//! Reflector: list (or WatchList), then watch from that resourceVersion, feeding the delta FIFO.
//!
//! Recovery follows client-go, which took a decade of production to get right:
//! - a watch that closes cleanly is re-opened from the last resourceVersion, with no relist;
//! - `410 Gone` (in the stream or as the HTTP status) relists: first at the last
//!   resourceVersion, then, if that is gone too, with a quorum read;
//! - 429 and 5xx back off (800 ms doubling to 30 s, with jitter);
//! - a 403 sends the reflector back to the RBAC preflight, which names the missing rule.
//!
//! One departure: an unreachable server (connection refused or cut) is waited for through the
//! shared [`Connectivity`], not on the backoff alone, so the reflector retries within about a
//! second of the server answering again, however long its backoff had grown; client-go would
//! sleep on, serving a stale cache (see [`crate::backoff`]).
//!
//! Bookmarks only move the resourceVersion forward; they never reach the FIFO.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::watch as state;
use tokio::time::Instant;

use crate::backoff::{Backoff, Connectivity, Failure};
use crate::informer::delta_fifo::{DeltaFifo, KnownObjects};
use crate::informer::discovery::Resource;
use crate::informer::preflight;
use crate::informer::protobuf;
use crate::object::{Object, ObjectRef, Transform, object_key};

mod list;
mod watch;

/// Why a list or watch attempt ended badly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resourceVersion (or continue token) is too old: relist.
    #[error("resource version expired (410 Gone): {0}")]
    Gone(String),
    /// RBAC denies the request.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The server answered a WatchList request with 400 or 422, as servers that do not serve
    /// WatchList (or not for this resource) do: the reflector lists in pages instead.
    #[error("watch-list refused by the server ({code} {reason}): {message}")]
    WatchListRefused {
        /// The HTTP status.
        code: u16,
        /// The Status's reason, such as `Invalid` or `BadRequest`.
        reason: String,
        /// The Status's message.
        message: String,
    },
    /// The server could not be reached (connection refused or cut). Retried as soon as the
    /// server answers again.
    #[error("cannot reach the API server: {0}")]
    Unreachable(#[source] kube::Error),
    /// A watch was silent for much longer than the timeout it asked for: a dead connection
    /// nobody announced.
    #[error("cannot reach the API server: the watch was silent past its timeout")]
    Stalled,
    /// A WatchList stream ended before its initial events did.
    #[error("cannot reach the API server: the watch-list stream ended before its initial events")]
    EndedEarly,
    /// The watch stream broke mid-way.
    #[error("cannot reach the API server: the watch stream broke: {0}")]
    StreamBroke(#[source] std::io::Error),
    /// Any other failed request: 429, 5xx, an answer that does not decode. Retried on the
    /// backoff.
    #[error("{0}")]
    Request(#[source] kube::Error),
    /// The review of list/watch access could not be made.
    #[error(transparent)]
    Preflight(preflight::Error),
    /// A request could not be built (a namespace that makes no valid URI, say).
    #[error("cannot build the {what} request: {source}")]
    Build {
        /// `LIST` or `watch`.
        what: &'static str,
        /// Why.
        #[source]
        source: http::Error,
    },
    /// A LIST answered with something that is not a list.
    #[error("LIST returned something that is not a list")]
    NotAList,
    /// A watch line that is not a watch event.
    #[error("malformed watch event: {0}")]
    Malformed(#[source] serde_json::Error),
    /// An `ERROR` event other than 410 and 403.
    #[error("watch error {code}: {message}")]
    WatchError {
        /// The Status's code.
        code: u64,
        /// The Status's message.
        message: String,
    },
    /// The server ignored the shard selector: it would send every object, which is what
    /// sharding exists to avoid, so the informer caches none until it is fixed.
    #[error(
        "the API server ignored shardSelector={selector:?}: sharded list and watch needs Kubernetes 1.36 or later with the ShardedListAndWatch feature gate on (kube-apiserver --feature-gates=ShardedListAndWatch=true); this informer caches nothing until then"
    )]
    ShardingUnsupported {
        /// The selector sent.
        selector: String,
    },
    /// A protobuf answer this host cannot read (a field a newer server added, say): the
    /// reflector reads this informer as JSON from a fresh sync on.
    #[error("cannot read the server's protobuf: {0}")]
    Protobuf(#[source] protobuf::Error),
    /// An event type the reflector does not know.
    #[error("unknown watch event type {0:?}")]
    UnknownEvent(String),
    /// A watch that ended at once with no events, which, repeated, would be a busy loop.
    #[error("watch closed immediately with no events")]
    ClosedAtOnce,
}

impl Error {
    /// What this failure says about the server, for [`Connectivity::failed`].
    fn failure(&self) -> Failure {
        match self {
            Error::Unreachable(_) | Error::Stalled | Error::EndedEarly | Error::StreamBroke(_) => {
                Failure::Unreachable
            }
            Error::Preflight(e) => e.failure(),
            _ => Failure::Refused,
        }
    }
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.code == 410 => Error::Gone(s.message.clone()),
            kube::Error::Api(s) if s.code == 403 => Error::Forbidden(s.message.clone()),
            other if Failure::of(&other) == Failure::Unreachable => Error::Unreachable(other),
            other => Error::Request(other),
        }
    }
}

/// What to reflect.
#[derive(Debug, Clone)]
pub struct Config {
    /// The resolved resource.
    pub resource: Resource,
    /// One namespace, or `None` for all namespaces (or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// A label selector in API syntax, passed to the server.
    pub label_selector: Option<String>,
    /// A field selector in API syntax, passed to the server.
    pub field_selector: Option<String>,
    /// Applied to every object once, before it enters the FIFO.
    pub transform: Transform,
    /// LIST page size (500 by default, as in client-go).
    pub page_size: u32,
    /// Try WatchList (`sendInitialEvents=true`) for the initial sync, falling back to a paged
    /// LIST when the server refuses it.
    pub watch_list: bool,
    /// Read the kinds [`protobuf`] has a table for as protobuf, falling back to JSON for good
    /// if an answer cannot be read. Other kinds are read as JSON whatever this says.
    pub protobuf: bool,
    /// A `shardSelector` (see [`crate::informer::shard`]): only the objects of one hash range.
    /// The server is checked to apply it before the first sync.
    pub shard_selector: Option<String>,
}

impl Config {
    /// Defaults for `resource` in `namespace`: no selectors, the default transform, pages of
    /// 500, WatchList and protobuf on.
    pub fn new(resource: Resource, namespace: Option<String>) -> Self {
        Self {
            resource,
            namespace,
            label_selector: None,
            field_selector: None,
            transform: Transform::default(),
            page_size: 500,
            watch_list: true,
            protobuf: true,
            shard_selector: None,
        }
    }
}

/// Counters for one reflector. `lists` counts LIST *requests* (pages), so "no relist happened"
/// is `lists` staying put.
#[derive(Debug, Default)]
pub struct Stats {
    /// LIST requests sent (one per page).
    pub lists: AtomicU64,
    /// Full re-synchronisations after the first one (each a relist or a WatchList).
    pub relists: AtomicU64,
    /// Watch requests opened.
    pub watches: AtomicU64,
    /// Initial syncs done through WatchList rather than LIST.
    pub watch_list_syncs: AtomicU64,
    /// Watch events received (bookmarks included).
    pub events: AtomicU64,
    /// Objects dropped because they could not be parsed.
    pub bad_objects: AtomicU64,
    /// LIST pages and watch events read as protobuf.
    pub protobuf_reads: AtomicU64,
    /// Times a protobuf answer could not be read and the reflector switched to JSON (at most
    /// one per reflector).
    pub protobuf_fallbacks: AtomicU64,
    /// The resourceVersion the first sync ended at (0 until then): every event after it is a
    /// watch event, everything at or before it came from the initial list.
    pub initial_sync_rv: AtomicU64,
    /// When the server last showed this reflector a sign of life; see [`Stats::last_heard`].
    last_heard: Mutex<Option<Instant>>,
}

impl Stats {
    /// When the API server last answered this reflector: a watch opened, a watch event or
    /// bookmark arrived, or a sync completed. `None` before the first.
    ///
    /// Where it may surprise: a healthy watch on a quiet kind is silent between bookmarks, which
    /// the API server sends about once a minute, so an age of tens of seconds is normal.
    pub fn last_heard(&self) -> Option<Instant> {
        *self.last_heard.lock().unwrap()
    }

    fn heard(&self) {
        *self.last_heard.lock().unwrap() = Some(Instant::now());
    }
}

/// What a reflector is doing, for health reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Not yet synced: preflight, list or initial events under way.
    Syncing,
    /// Synced and watching.
    Watching,
    /// RBAC denies list or watch; the message names the rule to add.
    Forbidden(String),
    /// Requests are failing; the cache (if synced) is serving but may be stale.
    Failing(String),
}

enum WatchEnd {
    /// The server ended the watch normally.
    Closed { events: u64, elapsed: Duration },
    /// A paged LIST completed (no stream involved).
    Listed,
}

/// Lists and watches one (resource, namespace, selectors) into a delta FIFO, forever.
pub struct Reflector {
    client: kube::Client,
    cfg: Config,
    fifo: Arc<DeltaFifo>,
    known: Arc<dyn KnownObjects>,
    stats: Arc<Stats>,
    condition: state::Sender<Condition>,
    backoff: Backoff,
    connectivity: Connectivity,
    last_rv: String,
    watch_list_refused: bool,
    /// Whether the server was seen to apply `cfg.shard_selector`.
    sharding_checked: bool,
    /// The kind's protobuf table while it is read as protobuf; `None` for JSON.
    protobuf: Option<protobuf::Kind>,
    /// Completed syncs; the first is the initial one.
    syncs: u64,
}

impl std::fmt::Debug for Reflector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reflector")
            .field("resource", &self.cfg.resource.plural)
            .field("namespace", &self.cfg.namespace)
            .field("last_rv", &self.last_rv)
            .finish_non_exhaustive()
    }
}

fn rv_of(v: &Value) -> Option<&str> {
    v.get("metadata")?.get("resourceVersion")?.as_str()
}

impl Reflector {
    /// A reflector feeding `fifo`. `known` is the store behind the FIFO, used to reuse
    /// unchanged objects during a relist instead of holding a second copy of the cache.
    /// `connectivity` is shared with everything else using `client`: its successes end this
    /// reflector's waits for an unreachable server, and this reflector's end theirs.
    pub fn new(
        client: kube::Client,
        cfg: Config,
        fifo: Arc<DeltaFifo>,
        known: Arc<dyn KnownObjects>,
        stats: Arc<Stats>,
        condition: state::Sender<Condition>,
        connectivity: Connectivity,
    ) -> Self {
        let protobuf = cfg
            .protobuf
            .then(|| protobuf::Kind::of(&cfg.resource))
            .flatten();
        Self {
            protobuf,
            client,
            cfg,
            fifo,
            known,
            stats,
            condition,
            backoff: Backoff::default(),
            connectivity,
            last_rv: String::new(),
            watch_list_refused: false,
            sharding_checked: false,
            syncs: 0,
        }
    }

    /// The last resourceVersion this reflector has seen (empty before the first sync).
    pub fn last_resource_version(&self) -> &str {
        &self.last_rv
    }

    fn report(&self, c: Condition) {
        self.condition.send_if_modified(|cur| {
            let changed = *cur != c;
            *cur = c;
            changed
        });
    }

    fn scope(&self) -> String {
        match &self.cfg.namespace {
            Some(ns) => format!("{} in {ns:?}", self.cfg.resource.plural),
            None => format!("{} (all namespaces)", self.cfg.resource.plural),
        }
    }

    /// Runs until the task is aborted: the reflector never gives up, it backs off.
    pub async fn run(mut self) {
        // `Some(rv)`: a sync is needed, preferring data at least as new as `rv` (empty: a
        // quorum read). `None`: synced; keep watching from `last_rv`.
        let mut need_sync: Option<String> = Some(String::new());
        loop {
            let result = match need_sync.take() {
                Some(hint) => {
                    // A relist after 410 is routine: the cache keeps serving, so health stays as is.
                    if self.syncs == 0 {
                        self.report(Condition::Syncing);
                    }
                    self.preflight_until_allowed().await;
                    if let Err(e) = self.check_sharding().await {
                        need_sync = Some(hint);
                        self.fail(e).await;
                        continue;
                    }
                    let before = self.syncs;
                    let result = if self.cfg.watch_list && !self.watch_list_refused {
                        // Returns only when the stream ends, which is long after the sync if
                        // the initial events arrived: the same stream carries on as the watch.
                        self.watch_stream(true, &hint).await
                    } else {
                        self.list_sync(&hint).await
                    };
                    if self.syncs == before {
                        match result {
                            Err(refused @ Error::WatchListRefused { .. }) => {
                                tracing::info!(scope = %self.scope(), %refused, "falling back to a paged LIST");
                                self.watch_list_refused = true;
                                need_sync = Some(hint);
                            }
                            Err(Error::Protobuf(e)) => {
                                self.fall_back_to_json(e);
                                need_sync = Some(hint);
                            }
                            Err(e) => {
                                // An expired hint falls back to a quorum read.
                                need_sync = Some(if matches!(e, Error::Gone(_)) {
                                    String::new()
                                } else {
                                    hint
                                });
                                self.fail(e).await;
                            }
                            Ok(_) => need_sync = Some(hint),
                        }
                        continue;
                    }
                    result
                }
                None => self.watch_stream(false, &self.last_rv.clone()).await,
            };
            match result {
                Ok(WatchEnd::Closed { events, elapsed }) => {
                    if events == 0 && elapsed < Duration::from_secs(1) {
                        self.fail(Error::ClosedAtOnce).await;
                    }
                }
                Ok(WatchEnd::Listed) => {}
                Err(Error::Gone(msg)) => {
                    tracing::info!(scope = %self.scope(), %msg, rv = %self.last_rv, "watch expired; relisting");
                    need_sync = Some(self.last_rv.clone());
                }
                Err(e @ Error::Forbidden(_)) => {
                    need_sync = Some(self.last_rv.clone());
                    self.fail(e).await;
                }
                Err(Error::Protobuf(e)) => {
                    self.fall_back_to_json(e);
                    need_sync = Some(self.last_rv.clone());
                }
                Err(e) => self.fail(e).await,
            }
        }
    }

    /// Reads this informer as JSON from now on, after a protobuf answer it could not read. The
    /// caller syncs afresh: the events since the last good one are read again, as JSON.
    fn fall_back_to_json(&mut self, e: protobuf::Error) {
        let kind = self.protobuf.take().map_or("", |k| k.name());
        tracing::warn!(
            scope = %self.scope(),
            error = %e,
            "cannot read {kind} as protobuf; reading it as JSON from a fresh sync (the informer keeps serving)"
        );
        self.stats
            .protobuf_fallbacks
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Completes a sync (LIST or WatchList) at `last_rv`: records it, then hands the FIFO its
    /// Replace of `items`. In that order: the Replace is what turns the informer Synced, and
    /// whoever sees that must find the sync's figures (its resourceVersion) recorded.
    fn complete_sync(&mut self, items: Vec<ObjectRef>) {
        self.syncs += 1;
        if self.syncs == 1 {
            let rv = self.last_rv.parse().unwrap_or(0);
            self.stats.initial_sync_rv.store(rv, Ordering::Relaxed);
        }
        if self.syncs > 1 {
            self.stats.relists.fetch_add(1, Ordering::Relaxed);
        }
        self.fifo.replace(items, self.cfg.namespace.as_deref());
        self.backoff.reset();
        self.stats.heard();
        self.report(Condition::Watching);
    }

    /// Reports `e` and waits before the next try: the backoff, cut short once the server answers
    /// again if `e` says it could not be reached.
    async fn fail(&mut self, e: Error) {
        let delay = self.backoff.failure();
        let ticket = self.connectivity.failed(e.failure());
        tracing::warn!(scope = %self.scope(), error = %e, retry_in = ?delay, "reflector error");
        match &e {
            Error::Forbidden(m) => self.report(Condition::Forbidden(m.clone())),
            _ => self.report(Condition::Failing(e.to_string())),
        }
        self.connectivity.wait(ticket, delay).await;
    }

    /// Checks list/watch access until it is granted, reporting the missing rule meanwhile.
    ///
    /// Polls once a second while denied: there is nothing to watch for a grant that applies to
    /// us, and a second is what "syncs within seconds of the grant" needs.
    async fn preflight_until_allowed(&mut self) {
        loop {
            match preflight::check_list_watch(
                &self.client,
                &self.cfg.resource,
                self.cfg.namespace.as_deref(),
            )
            .await
            {
                Ok(()) => {
                    self.connectivity.reached();
                    return;
                }
                Err(preflight::Error::Denied(d)) => {
                    self.connectivity.reached();
                    let msg = d.to_string();
                    if *self.condition.borrow() != Condition::Forbidden(msg.clone()) {
                        tracing::error!(scope = %self.scope(), "{msg}");
                    }
                    self.report(Condition::Forbidden(msg));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e @ preflight::Error::Request { .. }) => {
                    self.fail(Error::Preflight(e)).await;
                }
            }
        }
    }

    /// Before the first sync of a sharded informer: one LIST of at most one object, whose
    /// `shardInfo` says whether the server applied the selector. A WatchList carries no list
    /// metadata to tell by, and a server without the gate answers with everything.
    async fn check_sharding(&mut self) -> Result<()> {
        let Some(selector) = self.cfg.shard_selector.clone() else {
            return Ok(());
        };
        if self.sharding_checked {
            return Ok(());
        }
        let req = http::Request::get(self.query(&[("limit", "1")]))
            .body(Vec::new())
            .map_err(|source| Error::Build {
                what: "LIST",
                source,
            })?;
        let page: Value = self.client.request(req).await?;
        self.connectivity.reached();
        let echoed = page["metadata"]["shardInfo"]["selector"].as_str();
        if echoed.is_none_or(str::is_empty) {
            return Err(Error::ShardingUnsupported { selector });
        }
        self.sharding_checked = true;
        Ok(())
    }

    fn query(&self, extra: &[(&str, &str)]) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(l) = &self.cfg.label_selector {
            q.append_pair("labelSelector", l);
        }
        if let Some(f) = &self.cfg.field_selector {
            q.append_pair("fieldSelector", f);
        }
        if let Some(s) = &self.cfg.shard_selector {
            q.append_pair("shardSelector", s);
        }
        for (k, v) in extra {
            q.append_pair(k, v);
        }
        format!(
            "{}?{}",
            self.cfg.resource.url_path(self.cfg.namespace.as_deref()),
            q.finish()
        )
    }

    /// Converts one API item, reusing the stored object when its resourceVersion is unchanged.
    fn to_object(&self, item: Value, type_meta: Option<(&str, &str)>) -> Option<ObjectRef> {
        let meta = item.get("metadata");
        let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
        let ns = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str);
        if let (Some(name), Some(rv)) = (name, rv_of(&item))
            && let Some(existing) = self.known.get(&object_key(ns, name))
            && existing.resource_version() == rv
        {
            return Some(existing);
        }
        match Object::from_value(item, &self.cfg.transform, type_meta) {
            Ok(o) => Some(Arc::new(o)),
            Err(e) => {
                self.stats.bad_objects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(scope = %self.scope(), error = %e, "dropping an object that cannot be cached");
                None
            }
        }
    }

    /// Sends `req` as it is, with the API server's error (protobuf or JSON) as a `kube::Error`
    /// for anything but 2xx, as kube's own requests report it.
    async fn send(
        &self,
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<kube::client::Body>, kube::Error> {
        let res = self.client.send(req.map(kube::client::Body::from)).await?;
        let code = res.status();
        if code.is_success() {
            return Ok(res);
        }
        let is_protobuf = protobuf::is_protobuf(res.headers().get(http::header::CONTENT_TYPE));
        let body = res.into_body().collect().await?.to_bytes();
        let err = if is_protobuf {
            protobuf::api_error(code, &body)
        } else {
            match serde_json::from_slice::<kube::core::Status>(&body) {
                Ok(status) => kube::Error::Api(status.boxed()),
                Err(_) => protobuf::api_error(code, &body),
            }
        };
        Err(err)
    }

    /// Converts one protobuf object, reusing the stored object when its resourceVersion is
    /// unchanged. `Ok(None)`: an object the store cannot key, dropped and counted as the JSON
    /// path drops one.
    fn protobuf_object(&self, kind: protobuf::Kind, item: &[u8]) -> Result<Option<ObjectRef>> {
        let id = protobuf::identity(item).map_err(Error::Protobuf)?;
        let ns = Some(id.namespace).filter(|ns| !ns.is_empty());
        if !id.name.is_empty()
            && let Some(existing) = self.known.get(&object_key(ns, id.name))
            && existing.resource_version() == id.resource_version
        {
            return Ok(Some(existing));
        }
        match kind.decode(item, &self.cfg.transform) {
            Ok(o) => Ok(Some(Arc::new(o))),
            Err(protobuf::Error::Object(e)) => {
                self.stats.bad_objects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(scope = %self.scope(), error = %e, "dropping an object that cannot be cached");
                Ok(None)
            }
            Err(e) => Err(Error::Protobuf(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;
    use crate::informer::protobuf::encode::bytes;
    use crate::informer::store::Writer;

    /// A watch frame, as a server newer than this host would send it: an ADDED ConfigMap with a
    /// field (9) the tables do not know.
    fn frame_with_a_new_field() -> Vec<u8> {
        let mut meta = Vec::new();
        bytes(&mut meta, 1, b"a");
        bytes(&mut meta, 3, b"default");
        bytes(&mut meta, 6, b"5");
        let mut cm = Vec::new();
        bytes(&mut cm, 1, &meta);
        bytes(&mut cm, 9, b"a field from a newer server");
        let mut type_meta = Vec::new();
        bytes(&mut type_meta, 1, b"v1");
        bytes(&mut type_meta, 2, b"ConfigMap");
        let mut unknown = b"k8s\0".to_vec();
        bytes(&mut unknown, 1, &type_meta);
        bytes(&mut unknown, 2, &cm);
        let mut raw = Vec::new();
        bytes(&mut raw, 1, &unknown);
        let mut event = Vec::new();
        bytes(&mut event, 1, b"ADDED");
        bytes(&mut event, 2, &raw);
        let mut framed = (event.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&event);
        framed
    }

    /// The transport of a server that answers RBAC reviews with yes, protobuf watches with
    /// [`frame_with_a_new_field`], the initial JSON watch with the object and the bookmark that
    /// ends the initial events, and any later watch with nothing.
    fn newer_server(protobuf_watches: Arc<AtomicU64>) -> kube::Client {
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let protobuf_watches = protobuf_watches.clone();
            async move {
                let accept = req
                    .headers()
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let query = req.uri().query().unwrap_or_default();
                let (content_type, body) = if req.uri().path().contains("selfsubjectaccessreviews")
                {
                    ("application/json", br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{},"status":{"allowed":true}}"#.to_vec())
                } else if protobuf::is_protobuf(Some(&http::HeaderValue::from_str(accept).unwrap()))
                {
                    protobuf_watches.fetch_add(1, Ordering::Relaxed);
                    (
                        "application/vnd.kubernetes.protobuf;stream=watch",
                        frame_with_a_new_field(),
                    )
                } else if query.contains("sendInitialEvents=true") {
                    ("application/json", concat!(
                        r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"default","resourceVersion":"5"}}}"#, "\n",
                        r#"{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}"#, "\n",
                    ).as_bytes().to_vec())
                } else {
                    ("application/json", Vec::new())
                };
                let response = http::Response::builder()
                    .header(http::header::CONTENT_TYPE, content_type)
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    /// A reflector of ConfigMaps in `default` through `client`, running; its FIFO and stats.
    fn run_reflector(
        client: kube::Client,
    ) -> (tokio::task::JoinHandle<()>, Arc<DeltaFifo>, Arc<Stats>) {
        let resource = Resource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        };
        let store: Arc<dyn KnownObjects> = Arc::new(Writer::new().reader());
        let fifo = Arc::new(DeltaFifo::new(store.clone(), 1));
        let stats = Arc::new(Stats::default());
        let (condition, _conditions) = state::channel(Condition::Syncing);
        let reflector = Reflector::new(
            client.clone(),
            Config::new(resource, Some("default".into())),
            fifo.clone(),
            store,
            stats.clone(),
            condition,
            Connectivity::new(client),
        );
        (tokio::spawn(reflector.run()), fifo, stats)
    }

    #[tokio::test]
    async fn a_protobuf_answer_it_cannot_read_sends_the_reflector_to_json_and_it_still_syncs() {
        let protobuf_watches = Arc::new(AtomicU64::new(0));
        let (task, fifo, stats) = run_reflector(newer_server(protobuf_watches.clone()));
        // The scripted server ends every later watch at once, so the condition does not stay
        // Watching: the sync is read from the counters.
        let deadline = Instant::now() + Duration::from_secs(10);
        while stats.watch_list_syncs.load(Ordering::Relaxed) == 0 {
            assert!(
                Instant::now() < deadline,
                "not synced within 10 s: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
        assert_eq!(
            protobuf_watches.load(Ordering::Relaxed),
            1,
            "protobuf tried once"
        );
        assert_eq!(stats.protobuf_fallbacks.load(Ordering::Relaxed), 1);
        assert_eq!(stats.watch_list_syncs.load(Ordering::Relaxed), 1);
        assert_eq!(fifo.len(), 1, "the object came through JSON");
    }

    /// The informer turns Synced when the FIFO has its Replace; a test read the first sync's
    /// resourceVersion at that moment and found 0, recorded a moment later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_syncs_resource_version_is_recorded_before_the_fifo_says_synced() {
        for _ in 0..20 {
            let (task, fifo, stats) = run_reflector(newer_server(Arc::new(AtomicU64::new(0))));
            // What the informer's processor does: pop what the Replace queued.
            let popper = tokio::spawn({
                let fifo = fifo.clone();
                async move { while fifo.pop(|_, _| ()).await.is_some() {} }
            });
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !fifo.has_synced() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "not synced: {stats:?}"
                );
                std::hint::spin_loop();
            }
            let rv = stats.initial_sync_rv.load(Ordering::Relaxed);
            task.abort();
            popper.abort();
            assert_eq!(rv, 6, "the bookmark that ended the initial events");
        }
    }
}
