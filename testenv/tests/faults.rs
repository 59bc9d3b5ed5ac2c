//! Fault hooks: apiserver restart and etcd compaction behave as they do in a real cluster, and
//! kube-controller-manager survives an apiserver restart.
//!
//! These tests restart the shared apiserver, so they live in their own test binary and take
//! a lock: nothing else may be using the apiserver while it is down.

use std::time::{Duration, Instant};

use futures::AsyncBufReadExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use testenv::ControlPlane;
use testenv::fixtures::wait_gone;

// A tokio mutex: each test runs on its own runtime, and this lock works across them.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn namespace(client: &kube::Client, name: &str) {
    testenv::fixtures::create_namespace(client, name)
        .await
        .unwrap();
}

#[tokio::test]
async fn objects_survive_an_apiserver_restart_and_clients_keep_working() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    namespace(&client, "restart").await;
    let cms = Api::<ConfigMap>::namespaced(client, "restart");
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("before-{i}")))
            .await
            .unwrap();
    }
    let pid_before = cp.pids();

    tokio::task::spawn_blocking(|| ControlPlane::shared().restart_apiserver())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        cp.pids(),
        pid_before,
        "the apiserver process must really have been replaced"
    );

    // The same ControlPlane value hands out a client that works against the new process.
    let cms = Api::<ConfigMap>::namespaced(cp.admin_client(), "restart");
    let names: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    for i in 0..5 {
        assert!(
            names.contains(&format!("before-{i}")),
            "before-{i} lost across the restart: {names:?}"
        );
    }
    cms.create(&PostParams::default(), &cm("after"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_gets_410_gone() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    namespace(&client, "compaction").await;
    let cms = Api::<ConfigMap>::namespaced(client, "compaction");
    let created = cms
        .create(&PostParams::default(), &cm("churn"))
        .await
        .unwrap();
    let old_rv = created.metadata.resource_version.unwrap();
    for i in 0..20 {
        let patch = serde_json::json!({ "data": { "i": i.to_string() } });
        cms.patch("churn", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    let revision = cp.compact_etcd().unwrap();
    assert!(
        revision > old_rv.parse::<i64>().unwrap(),
        "compacted to {revision}, not past {old_rv}"
    );
    // The watch cache would otherwise serve the old history from memory (see compact_etcd).
    tokio::task::spawn_blocking(|| ControlPlane::shared().restart_apiserver())
        .await
        .unwrap()
        .unwrap();

    let client = cp.admin_client();
    let path = format!(
        "/api/v1/namespaces/compaction/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={old_rv}&timeoutSeconds=10"
    );
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let seen = match client.request_stream(req).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 410, "{status:?}");
            "the HTTP status of the watch request"
        }
        Err(e) => panic!("watch from a compacted RV failed in an unexpected way: {e}"),
        Ok(stream) => {
            let mut lines = stream.lines();
            let first = futures::StreamExt::next(&mut lines)
                .await
                .expect("one event")
                .unwrap();
            let event: serde_json::Value = serde_json::from_str(&first).unwrap();
            assert_eq!(
                event["type"], "ERROR",
                "first event from a compacted RV: {event}"
            );
            assert_eq!(event["object"]["code"], 410, "{event}");
            "an ERROR event in the watch stream"
        }
    };
    eprintln!("410 Gone for resourceVersion {old_rv} (compacted to {revision}) arrived as {seen}");
}

#[test]
fn etcd_stop_and_start_keep_the_data() {
    let _serial = SERIAL.blocking_lock();
    let cp = ControlPlane::shared();
    let before = cp.etcd_revision().unwrap();
    cp.stop_etcd();
    assert!(
        cp.etcd_revision().is_err(),
        "etcd still answers after stop_etcd"
    );
    cp.start_etcd().unwrap();
    assert!(
        cp.etcd_revision().unwrap() >= before,
        "etcd lost its data across a restart"
    );
}

/// A ConfigMap `dependent` owned (as controller, blocking deletion) by `owner`.
fn dependent_of(name: &str, owner: &ConfigMap) -> ConfigMap {
    let mut cm = cm(name);
    cm.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    cm
}

#[tokio::test]
async fn garbage_collection_keeps_working_across_an_apiserver_restart() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::shared();
    let ns = "gc-restart";
    namespace(&cp.admin_client(), ns).await;
    let cms = Api::<ConfigMap>::namespaced(cp.admin_client(), ns);
    let pp = PostParams::default();
    // One pair the garbage collector learns about before the restart, one after.
    let owner = cms.create(&pp, &cm("owner-before")).await.unwrap();
    cms.create(&pp, &dependent_of("dependent-before", &owner))
        .await
        .unwrap();
    let pids_before = cp.pids();

    tokio::task::spawn_blocking(|| ControlPlane::shared().restart_apiserver())
        .await
        .unwrap()
        .unwrap();
    let pids_after = cp.pids();
    let kept = pids_after
        .iter()
        .filter(|p| pids_before.contains(p))
        .count();
    assert_eq!(
        (pids_after.len(), kept),
        (3, 2),
        "only the apiserver may be replaced: before {pids_before:?}, after {pids_after:?}"
    );

    let cms = Api::<ConfigMap>::namespaced(cp.admin_client(), ns);
    let owner = cms.create(&pp, &cm("owner-after")).await.unwrap();
    cms.create(&pp, &dependent_of("dependent-after", &owner))
        .await
        .unwrap();
    let deleted = Instant::now();
    for owner in ["owner-before", "owner-after"] {
        cms.delete(owner, &DeleteParams::default()).await.unwrap();
    }
    for dependent in ["dependent-before", "dependent-after"] {
        let what = format!(
            "{dependent}, whose owner was deleted, (the controller manager did not reconnect? see {})",
            cp.dir().join("controller-manager.log").display()
        );
        let left = Duration::from_secs(30).saturating_sub(deleted.elapsed());
        wait_gone(&what, left, || cms.get_opt(dependent)).await;
    }
    eprintln!(
        "after an apiserver restart, the garbage collector removed both dependents within {:?}",
        deleted.elapsed()
    );
}
