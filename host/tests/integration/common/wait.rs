//! Waiting for things the host does in the background: a condition, a Kubernetes Event.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

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
    let deadline = Instant::now() + timeout;
    loop {
        let all = events(client, ns, name).await;
        if all.iter().any(|(r, m)| r == reason && m.contains(says)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {reason} event saying {says:?} on {ns}/{name} within {timeout:?}: {all:#?}"
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
