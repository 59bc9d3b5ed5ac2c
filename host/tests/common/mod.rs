//! Helpers shared by the host's integration tests (each test binary uses a subset).
#![allow(dead_code, unreachable_pub)]

pub mod controllers;
pub mod guests;
pub mod host;
pub mod scenarios;
pub mod wait;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, ObjectMeta};
use reconciled::informer::{Informer, State};

/// Creates a namespace (tests isolate themselves by namespace on the shared control plane).
pub async fn namespace(client: &kube::Client, name: &str) {
    testenv::fixtures::create_namespace(client, name)
        .await
        .unwrap();
}

/// A ConfigMap named `name` with `data`.
pub fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// name → resourceVersion of every ConfigMap in `ns`, from a quorum LIST.
pub async fn fresh_list(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap(),
                c.metadata.resource_version.unwrap(),
            )
        })
        .collect()
}

/// name → resourceVersion of every object in the informer's store.
pub fn cached(informer: &Informer) -> BTreeMap<String, String> {
    informer
        .store()
        .all()
        .iter()
        .map(|o| (o.name().to_string(), o.resource_version().to_string()))
        .collect()
}

/// Waits until the informer's cache equals a quorum LIST of `ns` (same names, same RVs).
pub async fn wait_cache_equals_list(
    informer: &Informer,
    client: &kube::Client,
    ns: &str,
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let want = fresh_list(client, ns).await;
        let have = cached(informer);
        if want == have {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| have.get(*k) != Some(v))
                .collect();
            let extra: Vec<_> = have
                .iter()
                .filter(|(k, v)| want.get(*k) != Some(v))
                .collect();
            panic!(
                "cache != LIST after {timeout:?} (status {}, stats {:?}): missing/stale {missing:?}, extra/stale {extra:?}",
                informer.status(),
                informer.stats()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the informer reaches `state`, returning how long it took.
pub async fn wait_state(informer: &Informer, state: State, timeout: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    let mut rx = informer.watch_status();
    loop {
        if rx.borrow_and_update().state == state {
            return started.elapsed();
        }
        if tokio::time::timeout_at(started + timeout, rx.changed())
            .await
            .is_err()
        {
            panic!(
                "informer not {state:?} after {timeout:?}: {}",
                informer.status()
            );
        }
    }
}

/// The `[tenants]` policy with these kinds allowed (tenants may declare none by default).
pub fn tenants(kinds: &[&str]) -> reconciled::sources::configmap::TenantPolicy {
    reconciled::sources::configmap::TenantPolicy {
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        ..Default::default()
    }
}
