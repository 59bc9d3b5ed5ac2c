//! Keeping a guest at what its reference names: pull it, and poll a tag for moves.
//!
//! One task per guest reference. It pulls at once, hands the outcome to its caller (which
//! offers it to the supervisor), then, for a tag, asks the registry every poll interval which
//! manifest the tag names now, pulling again only when that changed. A reference pinned by
//! digest cannot move, so its task ends after the first good pull. A failed pull is retried
//! with backoff, from one second up to the poll interval, and reported each time (the
//! supervisor reports the same failure once); the first good answer after a failure offers
//! the module again, even unchanged, since the failure's offer may have displaced it.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use super::credentials::{Login, Logins};
use super::{Error, Fetched, ModuleRef, Pulled, Registry};
use crate::backoff::Backoff;

/// Where the login for a pull comes from.
#[derive(Clone)]
pub enum LoginSource {
    /// No login: anonymous pulls.
    Anonymous,
    /// A dockerconfigjson Secret, read with `client` (whose identity must be allowed to get it)
    /// at every pull, so a rotated password is used without a restart.
    Secret {
        /// Who reads it.
        client: kube::Client,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl LoginSource {
    /// The login for `registry`, if the Secret has one.
    pub async fn login(&self, registry: &str) -> Result<Option<Login>, Error> {
        match self {
            LoginSource::Anonymous => Ok(None),
            LoginSource::Secret {
                client,
                namespace,
                name,
            } => Ok(Logins::from_secret(client, namespace, name)
                .await?
                .for_registry(registry)
                .cloned()),
        }
    }

    /// A name for it in logs and comparisons.
    pub fn describe(&self) -> String {
        match self {
            LoginSource::Anonymous => "anonymous".into(),
            LoginSource::Secret {
                namespace, name, ..
            } => format!("secret {namespace}/{name}"),
        }
    }
}

impl std::fmt::Debug for LoginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// What a watch keeps a guest at.
#[derive(Debug, Clone)]
pub struct Target {
    /// The client.
    pub registry: Arc<Registry>,
    /// The module.
    pub reference: ModuleRef,
    /// Its login.
    pub login: LoginSource,
    /// The most module bytes accepted.
    pub max_bytes: usize,
}

/// A running watch; dropping it stops the polling (the guest stays as it is).
#[derive(Debug)]
pub struct Watch {
    task: AbortHandle,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// Starts pulling `target`; `on` hears each new module and each failure. Must be called
    /// inside a tokio runtime.
    pub fn start(
        target: Target,
        on: impl Fn(Result<Pulled, Error>) + Send + Sync + 'static,
    ) -> Self {
        let task = tokio::spawn(run(target, on)).abort_handle();
        Watch { task }
    }
}

async fn run(target: Target, on: impl Fn(Result<Pulled, Error>)) {
    let interval = target.registry.settings().poll_interval();
    // Reset only by a success: a registry that keeps failing is retried every interval.
    let first = Duration::from_secs(1).min(interval);
    let mut backoff = Backoff::new(first, interval, Duration::MAX, 0.1);
    let mut last: Option<Pulled> = None;
    let mut failed = false;
    loop {
        let outcome = match target.login.login(target.reference.registry()).await {
            Ok(login) => {
                let known = last.as_ref().map(|p| p.manifest.as_str());
                target
                    .registry
                    .pull(&target.reference, login.as_ref(), known, target.max_bytes)
                    .await
            }
            Err(e) => Err(e),
        };
        let wait = match outcome {
            Ok(Fetched::Unchanged) => {
                backoff.reset();
                if std::mem::take(&mut failed)
                    && let Some(p) = &last
                {
                    on(Ok(p.clone()));
                }
                interval
            }
            Ok(Fetched::New(pulled)) => {
                backoff.reset();
                failed = false;
                match &last {
                    None => {
                        tracing::info!(reference = %target.reference, manifest = %pulled.manifest, bytes = pulled.bytes.len(), "pulled module")
                    }
                    Some(before) => {
                        tracing::info!(reference = %target.reference, from = %before.manifest, to = %pulled.manifest, "the tag moved; pulled the module it names now")
                    }
                }
                last = Some(pulled.clone());
                on(Ok(pulled));
                if target.reference.pinned().is_some() {
                    return;
                }
                interval
            }
            Err(e) => {
                failed = true;
                let wait = backoff.failure();
                tracing::warn!(reference = %target.reference, retry_in = ?wait, "pull failed: {e}");
                on(Err(e));
                wait
            }
        };
        tokio::time::sleep(wait).await;
    }
}
