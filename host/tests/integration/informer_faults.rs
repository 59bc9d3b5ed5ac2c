//! Informer recovery from faults on the real apiserver (WatchList on, the default): 410 Gone
//! after compaction, apiserver restarts, dropped connections. These restart the apiserver, so
//! they run one at a time on a control plane of their own (`common::faulty_control_plane`).

use crate::common;

use common::scenarios;
use reconciled::informer::Options;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_410_the_informer_relists_and_tombstones_what_was_deleted_in_the_gap() {
    let _serial = common::faults_serial().await;
    let cp = common::faulty_control_plane();
    let stats =
        scenarios::relist_after_410_tombstones_gap_deletes(cp, "gone", Options::default()).await;
    assert!(
        stats.watch_list_syncs >= 2,
        "relisted through WatchList: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_cache_equals_a_quorum_list_after_2000_operations_and_faults() {
    let _serial = common::faults_serial().await;
    let cp = common::faulty_control_plane();
    scenarios::oracle_after_faults(cp, "oracle", Options::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_watch_resumes_from_its_resource_version_and_the_informer_is_synced_again() {
    use std::time::Duration;

    use common::{cm, namespace};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::PostParams;
    use reconciled::informer::{Informer, InformerKey, Scope, State};
    use testenv::Proxy;

    let _serial = common::faults_serial().await;
    let cp = common::faulty_control_plane();
    let admin = cp.admin_client();
    let ns = "cut";
    namespace(&admin, ns).await;
    let proxy = Proxy::start(cp.server_addr()).await.unwrap();
    let client = kube::Client::try_from(proxy.config(&cp.admin_config())).unwrap();
    let informer = Informer::start(
        client,
        InformerKey::new("", "v1", "ConfigMap", Scope::namespace(ns)),
        Options::default(),
    );
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let before = informer.stats();

    proxy.cut();
    let cut = tokio::time::Instant::now();
    Api::<ConfigMap>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &cm("after-cut", &[]))
        .await
        .unwrap();
    // The cut turns the informer Degraded (perhaps too briefly to observe); what matters is
    // that it comes back to Synced by itself, holding the write made meanwhile.
    // A bound on a loaded machine: the reflector's backoff and a write of hundreds of ms fit.
    let deadline = cut + Duration::from_secs(15);
    while informer.status().state != State::Synced
        || informer.store().get(&format!("{ns}/after-cut")).is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not Synced with the write 15 s after the cut: {} {:?}",
            informer.status(),
            informer.stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = informer.stats();
    assert_eq!(
        (after.relists, after.lists),
        (before.relists, before.lists),
        "a clean resume, not a relist: {after:?}"
    );
    assert!(after.watches > before.watches, "{after:?}");
    eprintln!(
        "cut: Synced again and holding the write {:?} after the cut; {after:?}",
        cut.elapsed()
    );
}
