//! A shadow version: a second module that runs beside the live one on the same requests and
//! the same cache, whose writes reach the API server with `dryRun=All` (validated, admitted,
//! never stored), and whose writes, Events and outcome are compared with the live version's
//! after every reconcile. Divergences are counted in `/metrics` and the latest is shown in
//! `/status`.
//!
//! Where it may surprise:
//! - the shadow runs just before the live reconcile, in the same worker slot, so that both see
//!   the same cache (its writes change nothing); each request costs two reconciles, both
//!   charged to the guest, and the live one waits for the shadow's;
//! - it reads the cache without read-your-writes: its writes are never stored, so there is
//!   nothing to wait for, and it sees the live version's writes only once the watch delivers
//!   them;
//! - it may read only kinds the live version reads (it shares the live version's informers),
//!   and a shadow that cannot run is reported, never a reason to stop the live version.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::guest::bindings::Request;
use crate::guest::divergence;
use crate::guest::imports::GuestContext;
use crate::guest::{Module, Reconciled};

/// Why a shadow version cannot run beside the live one (shown in `/status` as the shadow's
/// problem); the live version is unaffected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Its module could not be read.
    #[error("cannot read the shadow module {path}: {reason}")]
    Unreadable {
        /// The module's file.
        path: String,
        /// What the OS said.
        reason: String,
    },
    /// Its module could not be compiled.
    #[error("the shadow module {path}: {reason}")]
    Invalid {
        /// The module's file.
        path: String,
        /// What the runtime said.
        reason: String,
    },
    /// Its `describe()` failed.
    #[error("describe() failed: {0}")]
    Describe(String),
    /// Its declaration cannot run under the guest's grant.
    #[error("{0}")]
    Plan(String),
    /// It reconciles another kind than the live version.
    #[error("it reconciles {shadow} but the live version reconciles {live}")]
    OtherKind {
        /// The shadow's `for` kind.
        shadow: String,
        /// The live version's.
        live: String,
    },
    /// It reads a kind the live version does not.
    #[error(
        "it reads {0}, which the live version does not: a shadow shares the live version's informers"
    )]
    OtherRead(String),
    /// It reads a kind in another scope than the live version.
    #[error("it reads {0} in another scope (namespaces or label selector) than the live version")]
    OtherScope(String),
}

/// The shadow module of a guest's settings, or why it could not be loaded. Equal when their
/// digests (or problems) are.
#[derive(Clone)]
pub struct ShadowModule(pub Result<Module, Problem>);

impl ShadowModule {
    /// The module's sha256, or "" when it could not be loaded.
    pub fn digest(&self) -> &str {
        self.0.as_ref().map_or("", |m| m.digest())
    }
}

impl std::fmt::Debug for ShadowModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(m) => write!(f, "ShadowModule({})", m.digest()),
            Err(e) => write!(f, "ShadowModule(unusable: {e})"),
        }
    }
}

impl PartialEq for ShadowModule {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Ok(a), Ok(b)) => a.digest() == b.digest(),
            (Err(a), Err(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for ShadowModule {}

/// Counts kept across reloads of the live version.
#[derive(Debug, Default)]
pub struct Counts {
    reconciles: AtomicU64,
    divergent: AtomicU64,
    last: Mutex<Option<String>>,
    first_difference: Mutex<Option<String>>,
    problem: Mutex<Option<String>>,
}

/// A shadow as `/status` and `/metrics` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowSnapshot {
    /// sha256 of the shadow module.
    pub digest: String,
    /// Requests the shadow reconciled beside the live version.
    pub reconciles: u64,
    /// Of those, the ones where its writes, Events or outcome differed from the live version's.
    pub divergent: u64,
    /// The latest divergence: the request and what differed first.
    pub last_divergence: Option<String>,
    /// Where the latest write that both runs made differently first differed: a JSON pointer
    /// into the write, with both values.
    pub first_difference: Option<String>,
    /// Why the shadow is not running, if it is not.
    pub problem: Option<String>,
}

/// A shadow ready to run beside one live version.
pub(super) struct Shadow {
    module: Module,
    ctx: Arc<GuestContext>,
}

/// A client whose writes are all sent with `dryRun=All`: the API server validates and admits
/// them (webhooks included) and stores nothing.
pub fn dry_run(client: kube::Client) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |mut req: http::Request<kube::client::Body>| {
        let client = client.clone();
        async move {
            if req.method() != http::Method::GET {
                let uri = req.uri().to_string();
                let sep = if uri.contains('?') { '&' } else { '?' };
                if let Ok(u) = format!("{uri}{sep}dryRun=All").parse() {
                    *req.uri_mut() = u;
                }
            }
            client.send(req).await
        }
    });
    kube::Client::new(service, namespace)
}

impl Shadow {
    /// A shadow of `module` that runs with `ctx` (its client must be a [`dry_run`] one).
    pub(super) fn new(module: Module, ctx: Arc<GuestContext>) -> Self {
        Self { module, ctx }
    }

    /// Reconciles `request` with the shadow, before the live version does.
    pub(crate) async fn reconcile(&self, request: Request) -> Reconciled {
        self.module.reconcile(self.ctx.clone(), request).await
    }

    /// Compares the shadow's run of `key` with the live version's, leaving the parts of
    /// written objects at `ignore` (JSON pointers) out, and counts it.
    pub(crate) fn compare(
        &self,
        guest: &str,
        key: &str,
        (shadowed, live): (&Reconciled, &Reconciled),
        ignore: &[String],
        counts: &Counts,
    ) {
        let (Some(live), Some(shadow)) = (&live.recording, &shadowed.recording) else {
            return;
        };
        counts.reconciles.fetch_add(1, Ordering::Relaxed);
        // Reads may differ freely: only what the shadow would have done counts.
        let changes: Vec<_> = divergence::compare_ignoring(live, shadow, &shadow.outcome, ignore)
            .into_iter()
            .filter(|c| !matches!(c, divergence::Change::NewRead(_)))
            .collect();
        if let Some(first) = changes.first() {
            counts.divergent.fetch_add(1, Ordering::Relaxed);
            // The latest write that differed in its content (a write only one run made has no
            // path to name).
            let path = changes.iter().find_map(|c| match c {
                divergence::Change::WriteChanged { key, first, .. } => {
                    Some(format!("{key}: {first}"))
                }
                _ => None,
            });
            if path.is_some() {
                *counts.first_difference.lock().unwrap() = path;
            }
            let first = first.to_string();
            let first = first.lines().next().unwrap_or("");
            let more = changes.len() - 1;
            let summary = if more > 0 {
                format!("{key}: {first} (and {more} more)")
            } else {
                format!("{key}: {first}")
            };
            tracing::info!(%guest, shadow = %self.module.digest(), "shadow diverged: {summary}");
            *counts.last.lock().unwrap() = Some(summary);
        }
    }
}

impl Counts {
    /// Records why the shadow cannot run (or, with `None`, that it can).
    pub(crate) fn set_problem(&self, guest: &str, problem: Option<String>) {
        if let Some(p) = &problem {
            tracing::warn!(%guest, "the shadow version cannot run (the live version is unaffected): {p}");
        }
        *self.problem.lock().unwrap() = problem;
    }

    /// What `/status` and `/metrics` show, for shadow module `digest`.
    pub(crate) fn snapshot(&self, digest: &str) -> ShadowSnapshot {
        ShadowSnapshot {
            digest: digest.to_string(),
            reconciles: self.reconciles.load(Ordering::Relaxed),
            divergent: self.divergent.load(Ordering::Relaxed),
            last_divergence: self.last.lock().unwrap().clone(),
            first_difference: self.first_difference.lock().unwrap().clone(),
            problem: self.problem.lock().unwrap().clone(),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A client that answers every request with `{}` and the log of what it was sent:
    /// `METHOD uri`, in order.
    pub(in crate::controller) fn logging_client() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        let inner = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            log.lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri()));
            async {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(b"{}"),
                )))
            }
        });
        (kube::Client::new(inner, "default"), seen)
    }

    #[tokio::test]
    async fn a_dry_run_client_marks_every_write_and_no_read() {
        let (client, seen) = logging_client();
        let client = dry_run(client);
        for (method, uri) in [
            (http::Method::GET, "/api/v1/namespaces/a/configmaps/x"),
            (
                http::Method::PATCH,
                "/api/v1/namespaces/a/configmaps/x?fieldManager=m",
            ),
            (http::Method::POST, "/api/v1/namespaces/a/events"),
            (http::Method::DELETE, "/api/v1/namespaces/a/configmaps/x"),
        ] {
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .body(Vec::new())
                .unwrap();
            client.request_text(req).await.unwrap();
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "GET /api/v1/namespaces/a/configmaps/x",
                "PATCH /api/v1/namespaces/a/configmaps/x?fieldManager=m&dryRun=All",
                "POST /api/v1/namespaces/a/events?dryRun=All",
                "DELETE /api/v1/namespaces/a/configmaps/x?dryRun=All",
            ]
        );
    }
}
