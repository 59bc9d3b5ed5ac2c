//! The Events a tenant's source (a ConfigMap or a Reconciler) gets, posted once for the group of
//! replicas: by the replica that holds the guest's shard, not by every replica that loaded it.
//!
//! Where it may surprise:
//! - An Event about a guest whose shard no replica holds yet (a host starting, a shard changing
//!   hands) waits until one does, up to [`OWNER_WAIT`], and is then posted by that one only; if
//!   none holds it by then it is dropped, and the log still has it.
//! - An Event about a source that delivers no guest (a ConfigMap without a module) is placed by
//!   the source's own name, as if it were a guest's.

use std::sync::Arc;
use std::time::Duration;

use super::source::Source;
use crate::events::Type;
use crate::replicas::Replicas;

/// How long an Event waits for its guest's shard to have a holder.
pub(super) const OWNER_WAIT: Duration = Duration::from_secs(60);

/// Posts Events on tenants' sources, in the background.
#[derive(Clone)]
pub(super) struct Poster {
    client: kube::Client,
    enabled: bool,
    replicas: Option<Arc<Replicas>>,
}

/// Who posts an Event about `guest`: this replica, another, or nobody yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// This replica holds the guest's shard, or runs alone.
    Mine,
    /// Another replica holds it.
    Theirs,
    /// No replica holds it now.
    Unheld,
}

/// Whose turn it is to post about a guest whose shard `owner` holds, for replica `me` (`None`:
/// a host without replicas). Pure.
pub(super) fn turn(me: Option<&str>, owner: Option<&str>) -> Turn {
    match (me, owner) {
        (None, _) => Turn::Mine,
        (Some(_), None) => Turn::Unheld,
        (Some(me), Some(owner)) if me == owner => Turn::Mine,
        (Some(_), Some(_)) => Turn::Theirs,
    }
}

impl std::fmt::Debug for Poster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl Poster {
    pub(super) fn new(
        client: kube::Client,
        enabled: bool,
        replicas: Option<Arc<Replicas>>,
    ) -> Self {
        Self {
            client,
            enabled,
            replicas,
        }
    }

    /// Whether Events are posted at all (`Options::events`).
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Posts an Event about `source` of guest `guest`, in the background: a slow or failing
    /// Event never holds anything up. Sources without an object (an operator's file or
    /// reference) are ignored.
    pub(super) fn post(
        &self,
        guest: &str,
        source: &Source,
        type_: Type,
        reason: &str,
        message: String,
    ) {
        if !self.enabled {
            return;
        }
        let Some(regarding) = source.regarding() else {
            return;
        };
        let event = crate::events::Event {
            regarding,
            type_,
            reason: reason.to_string(),
            message,
            component: "reconciled".into(),
        };
        let (client, replicas, guest) = (
            self.client.clone(),
            self.replicas.clone(),
            guest.to_string(),
        );
        tokio::spawn(async move {
            if !mine(replicas.as_deref(), &guest).await {
                return;
            }
            let req = http::Request::post(event.path())
                .header("content-type", "application/json")
                .body(event.body().to_string().into_bytes());
            let result = match req {
                Ok(req) => client
                    .request::<serde_json::Value>(req)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = result {
                tracing::warn!("could not record an Event (the host needs create on events): {e}");
            }
        });
    }
}

/// Whether this replica posts about `guest`: waits while no replica holds its shard.
async fn mine(replicas: Option<&Replicas>, guest: &str) -> bool {
    let Some(r) = replicas else {
        return true;
    };
    let me = r.config().identity.clone();
    let deadline = tokio::time::Instant::now() + OWNER_WAIT;
    loop {
        let owner = r.placement(guest).owner;
        match turn(Some(&me), owner.as_deref()) {
            Turn::Mine => return true,
            Turn::Theirs => return false,
            Turn::Unheld if tokio::time::Instant::now() >= deadline => {
                tracing::debug!(%guest, "no replica held the guest's shard in time; its Event is not posted");
                return false;
            }
            Turn::Unheld => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_shard_holder_posts_and_a_lone_host_always_does() {
        assert_eq!(turn(None, None), Turn::Mine, "no replicas");
        assert_eq!(turn(Some("a"), Some("a")), Turn::Mine);
        assert_eq!(turn(Some("a"), Some("b")), Turn::Theirs);
        assert_eq!(turn(Some("a"), None), Turn::Unheld, "waits for a holder");
    }
}
