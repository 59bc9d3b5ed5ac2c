//! Waiting for things the host does in the background: a condition, a Kubernetes Event, a
//! guest's state in a host process's `/status`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use reconciled::ops::status::GuestStatus;

/// How long to wait for what a host does only once a module is compiled (its refusal for what
/// `describe` declares, its first serving): a cold compile on a loaded machine (two busy cores,
/// four tests at a time) takes tens of seconds. Each wait ends as soon as its condition holds.
pub const COLD_LOAD: Duration = Duration::from_secs(90);

/// Polls `f` every 10 ms until it holds; panics naming `what` after `timeout`. Returns how long
/// it took.
pub async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !f() {
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

/// `(reason, message)` of every Event about the object named `name` in `ns`.
pub async fn events(client: &kube::Client, ns: &str, name: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Waits up to `timeout` for an Event with `reason` about `ns/name` whose message contains
/// `says`.
pub async fn wait_event(
    client: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
    says: &str,
    timeout: Duration,
) {
    wait_event_explained(client, (ns, name), reason, says, timeout, String::new).await;
}

/// [`wait_event`], whose panic adds what `explain` says then (the host's view of the object).
pub async fn wait_event_explained(
    client: &kube::Client,
    (ns, name): (&str, &str),
    reason: &str,
    says: &str,
    timeout: Duration,
    explain: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let all = events(client, ns, name).await;
        if all.iter().any(|(r, m)| r == reason && m.contains(says)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} event saying {says:?} on {ns}/{name} within {timeout:?}: {all:#?}{}",
            explain()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`wait_until`] for a condition that must ask the API server: polls `f` every 100 ms.
pub async fn wait_until_async<F, Fut>(what: &str, timeout: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !f().await {
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// Guest `name` in `/status`; `None` while the host is not answering (still starting).
pub async fn guest(addr: SocketAddr, name: &str) -> Option<GuestStatus> {
    match reconciled::ops::http::get_status(addr).await {
        Ok(doc) => doc.guest(name).cloned(),
        // Waiting would only hide a schema the test and the host disagree on.
        Err(e @ reconciled::ops::http::Error::Document { .. }) => panic!("{e}"),
        Err(_) => None,
    }
}

/// Polls the `/status` of the host process at `addr` until guest `name` satisfies `ok`, and
/// returns it; panics with what it last showed after `timeout`.
pub async fn wait_guest(
    addr: SocketAddr,
    name: &str,
    timeout: Duration,
    ok: impl Fn(&GuestStatus) -> bool,
) -> GuestStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(g) = guest(addr, name).await
            && ok(&g)
        {
            return g;
        }
        assert!(
            Instant::now() < deadline,
            "guest {name} not as expected within {timeout:?}: {:?}",
            guest(addr, name).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
