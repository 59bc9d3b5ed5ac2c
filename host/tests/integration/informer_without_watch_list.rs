//! The same informer guarantees on an apiserver that refuses WatchList: the reflector falls back
//! to paged LISTs, and 410 recovery and the oracle hold on that path too.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{cm, namespace, scenarios};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use reconciled::informer::{Informer, InformerKey, Options, Scope};
use testenv::ControlPlane;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// These tests' own control plane, with WatchList switched off.
fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    ControlPlane::own(&CP, &["--feature-gates=WatchList=false"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_watch_list_falls_back_to_a_paged_list() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane();
    let admin = cp.admin_client();
    let ns = "paged";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for i in 0..30 {
        api.create(&PostParams::default(), &cm(&format!("c{i:02}"), &[]))
            .await
            .unwrap();
    }
    let options = Options {
        page_size: 7,
        ..Options::default()
    };
    let informer = Informer::start(
        admin.clone(),
        InformerKey::new("", "v1", "ConfigMap", Scope::namespace(ns)),
        options,
    );
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let stats = informer.stats();
    assert_eq!(stats.watch_list_syncs, 0, "{stats:?}");
    assert!(
        stats.protobuf_reads >= 5 && stats.protobuf_fallbacks == 0,
        "ConfigMap pages come as protobuf: {stats:?}"
    );
    assert_eq!(
        stats.lists, 5,
        "30 objects in pages of 7 take 5 LIST requests: {stats:?}"
    );
    assert_eq!(informer.store().len(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_410_a_paged_relist_tombstones_what_was_deleted_in_the_gap() {
    let _serial = SERIAL.lock().await;
    let options = Options {
        page_size: 7,
        ..Options::default()
    };
    let stats =
        scenarios::relist_after_410_tombstones_gap_deletes(control_plane(), "gone-paged", options)
            .await;
    assert_eq!(stats.watch_list_syncs, 0, "{stats:?}");
    assert!(
        stats.lists >= 6,
        "an initial and at least one paged relist: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_holds_on_the_paged_list_path() {
    let _serial = SERIAL.lock().await;
    let stats =
        scenarios::oracle_after_faults(control_plane(), "oracle-paged", Options::default()).await;
    assert_eq!(stats.watch_list_syncs, 0, "{stats:?}");
}
