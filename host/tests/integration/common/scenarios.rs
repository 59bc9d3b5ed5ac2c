//! Fault scenarios shared by the informer test binaries, so the same checks run against an
//! apiserver with WatchList (the default) and one without (paged LIST).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use reconciled::informer::{Event, Informer, InformerKey, Options, Scope, State, Stats};
use testenv::{ControlPlane, Proxy};

use super::{cm, namespace, wait_cache_equals_list};

fn configmaps(ns: &str) -> InformerKey {
    InformerKey::new("", "v1", "ConfigMap", Scope::namespace(ns))
}

async fn restart_apiserver(cp: &'static ControlPlane) {
    tokio::task::spawn_blocking(move || cp.restart_apiserver())
        .await
        .unwrap()
        .unwrap();
}

/// Cuts the informer off, deletes, updates and creates objects, compacts etcd and restarts the
/// apiserver; the informer must relist and report exactly those changes.
pub async fn relist_after_410_tombstones_gap_deletes(
    cp: &'static ControlPlane,
    ns: &str,
    options: Options,
) -> Stats {
    let admin = cp.admin_client();
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for i in 0..20 {
        api.create(&PostParams::default(), &cm(&format!("c{i:02}"), &[]))
            .await
            .unwrap();
    }

    // The informer reaches the apiserver only through the proxy, so it can be cut off while
    // the cluster changes.
    let proxy = Proxy::start(cp.server_addr()).await.unwrap();
    let client = kube::Client::try_from(proxy.config(&cp.admin_config())).unwrap();
    let informer = Informer::start(client, configmaps(ns), options);
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let mut sub = informer.subscribe(1 << 16);
    for _ in 0..20 {
        assert!(sub.recv().await.unwrap().background);
    }

    proxy.pause();
    // Cut off, the informer keeps serving its cache but must say it may be stale.
    super::wait_state(&informer, State::Degraded, Duration::from_secs(10)).await;
    for i in 0..5 {
        api.delete(&format!("c{i:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in 5..10 {
        let patch = serde_json::json!({"data": {"changed": "yes"}});
        api.patch(
            &format!("c{i:02}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    }
    for i in 20..25 {
        api.create(&PostParams::default(), &cm(&format!("c{i:02}"), &[]))
            .await
            .unwrap();
    }
    let compacted = cp.compact_etcd().unwrap();
    // A fresh watch cache no longer holds the history the informer would resume from.
    restart_apiserver(cp).await;
    proxy.resume();

    wait_cache_equals_list(&informer, &admin, ns, Duration::from_secs(60)).await;
    let stats = informer.stats();
    assert!(
        stats.relists >= 1,
        "the informer must have relisted after 410: {stats:?}"
    );

    let (mut tombstones, mut updated, mut added) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
        match n.event {
            Event::Deleted {
                last_known,
                final_state_unknown,
            } => {
                assert!(
                    final_state_unknown,
                    "a delete the watch never saw is a tombstone"
                );
                tombstones.insert(last_known.name().to_string());
            }
            // A relist re-delivers every object; those it did not change come as background
            // updates (low priority for a controller), real changes as foreground ones.
            Event::Updated { old, new } if old.resource_version() == new.resource_version() => {
                assert!(n.background, "an unchanged object is background: {new:?}");
                // Item 6: a relist reuses the stored object instead of holding a second copy.
                assert!(
                    std::sync::Arc::ptr_eq(&old, &new),
                    "{} was re-allocated by the relist",
                    new.name()
                );
            }
            Event::Updated { new, .. } => {
                assert!(!n.background, "a real change is foreground: {new:?}");
                updated.insert(new.name().to_string());
            }
            Event::Added(o) => {
                assert!(
                    !n.background,
                    "created during the gap: a user-visible change"
                );
                added.insert(o.name().to_string());
            }
            Event::Resync => panic!("no overflow expected"),
        }
    }
    let names = |r: std::ops::Range<usize>| r.map(|i| format!("c{i:02}")).collect::<BTreeSet<_>>();
    assert_eq!(tombstones, names(0..5));
    assert_eq!(updated, names(5..10));
    assert_eq!(added, names(20..25));
    eprintln!("410 recovery: compacted to {compacted}; stats {stats:?}");
    stats
}

/// Item 30: after random writes mixed with restarts, compactions and cut connections, the cache
/// equals a quorum LIST (same keys, same resourceVersions).
pub async fn oracle_after_faults(cp: &'static ControlPlane, ns: &str, options: Options) -> Stats {
    let admin = cp.admin_client();
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);

    let proxy = Proxy::start(cp.server_addr()).await.unwrap();
    let client = kube::Client::try_from(proxy.config(&cp.admin_config())).unwrap();
    let informer = Informer::start(client, configmaps(ns), options);
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();

    let mut exists = [false; 60];
    let (mut restarts, mut compactions, mut cuts) = (0, 0, 0);
    for op in 0..2000u32 {
        match op {
            400 | 900 | 1400 => {
                restart_apiserver(cp).await;
                restarts += 1;
            }
            600 | 1200 => {
                cp.compact_etcd().unwrap();
                compactions += 1;
            }
            _ if op % 250 == 125 => {
                proxy.cut();
                cuts += 1;
            }
            _ => {}
        }
        let i = fastrand::usize(..exists.len());
        let name = format!("k{i}");
        // The admin client talks to the apiserver directly; right after a restart a request
        // may still fail, so each write retries until it lands.
        for attempt in 0.. {
            let result = if !exists[i] {
                api.create(
                    &PostParams::default(),
                    &cm(&name, &[("op", &op.to_string())]),
                )
                .await
                .map(|_| ())
            } else if fastrand::u8(..3) == 0 {
                api.delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ())
            } else {
                let patch = serde_json::json!({"data": {"op": op.to_string()}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            };
            match result {
                Ok(()) => break,
                Err(e) if attempt < 50 => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("op {op} on {name} kept failing: {e}"),
            }
        }
        exists[i] = !exists[i] || api.get_opt(&name).await.unwrap().is_some();
    }
    wait_cache_equals_list(&informer, &admin, ns, Duration::from_secs(60)).await;
    let stats = informer.stats();
    eprintln!(
        "oracle: 2000 ops, {restarts} restarts, {compactions} compactions, {cuts} cuts; stats {stats:?}"
    );
    assert_eq!((restarts, compactions), (3, 2));
    stats
}
