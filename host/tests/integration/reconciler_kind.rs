//! The `Reconciler` and `ReconcilerRevision` kinds of `deploy/reconcilers.yaml`, installed in
//! the real API server: what it defaults, what its schema and CEL rules refuse (with the message
//! a tenant sees at `kubectl apply`), that a revision is immutable, and the columns `kubectl get`
//! shows.

use crate::common;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testenv::ControlPlane;

const NS: &str = "reconciler-kind";

/// Installs the two CRDs once per test binary and waits until both are served.
async fn install(cp: &ControlPlane) {
    static CRDS: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    CRDS.get_or_init(|| async {
        common::reconciler_crds(cp);
        common::namespace(&cp.admin_client(), NS).await;
    })
    .await;
}

fn api(client: kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("reconciled.dev", "v1alpha1", kind);
    Api::namespaced_with(client, NS, &ApiResource::from_gvk(&gvk))
}

fn reconciler(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "reconciled.dev/v1alpha1",
        "kind": "Reconciler",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_gets_its_defaults_and_keeps_its_settings() {
    let cp = ControlPlane::shared();
    install(cp).await;
    let reconcilers = api(cp.admin_client(), "Reconciler");
    let spec = json!({
        "module": { "configMapRef": { "name": "rec", "key": "stamp.wasm" } },
        "settings": { "version": "blue", "nested": { "list": [1, 2] } },
    });
    let created = reconcilers
        .create(&PostParams::default(), &reconciler("blue", spec))
        .await
        .unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["serviceAccountName"], "reconciled-guest");
    assert_eq!(spec["workers"], 1);
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["revisionHistoryLimit"], 5);
    assert_eq!(
        spec["settings"],
        json!({ "version": "blue", "nested": { "list": [1, 2] } }),
        "settings keep every field"
    );

    // `kubectl get` shows the columns a platform team reads, DIGEST with -o wide.
    let get = |wide: bool| {
        let mut kubectl = cp.kubectl();
        kubectl.args(["get", "reconcilers", "-n", NS]);
        if wide {
            kubectl.args(["-o", "wide"]);
        }
        let out = kubectl.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let header = get(false).lines().next().unwrap().to_string();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        ["NAME", "READY", "REVISION", "OWNER", "ROLLOUT", "AGE"]
    );
    let wide = get(true);
    assert!(wide.lines().next().unwrap().ends_with("DIGEST"), "{wide}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_reconciler_is_refused_at_apply_saying_what_to_fix() {
    let cp = ControlPlane::shared();
    install(cp).await;
    let reconcilers = api(cp.admin_client(), "Reconciler");
    let from_configmap = json!({ "configMapRef": { "name": "rec", "key": "stamp.wasm" } });
    let cases = [
        (
            "both sources",
            json!({ "module": { "image": "r.example/rec:1", "configMapRef": { "name": "rec", "key": "stamp.wasm" } } }),
            "set exactly one of module.image (an OCI reference) and module.configMapRef",
        ),
        (
            "no source",
            json!({ "module": {} }),
            "set exactly one of module.image",
        ),
        (
            "settings not an object",
            json!({ "module": from_configmap, "settings": [1, 2] }),
            "spec.settings: Invalid value: \"array\"",
        ),
        (
            "no workers",
            json!({ "module": from_configmap, "workers": 0 }),
            "spec.workers: Invalid value: 0: spec.workers in body should be greater than or equal to 1",
        ),
        (
            "revision 0",
            json!({ "module": from_configmap, "revision": 0 }),
            "spec.revision in body should be greater than or equal to 1",
        ),
        (
            "a key that holds no module",
            json!({ "module": { "configMapRef": { "name": "rec", "key": "settings.json" } } }),
            "spec.module.configMapRef.key in body should match",
        ),
        (
            "not a ServiceAccount name",
            json!({ "module": from_configmap, "serviceAccountName": "Not_A_Name" }),
            "spec.serviceAccountName in body should match",
        ),
    ];
    for (i, (what, spec, says)) in cases.into_iter().enumerate() {
        let refused = reconcilers
            .create(
                &PostParams::default(),
                &reconciler(&format!("bad-{i}"), spec),
            )
            .await
            .expect_err(what);
        let kube::Error::Api(status) = &refused else {
            panic!("{what}: not an API refusal: {refused}");
        };
        assert_eq!(status.code, 422, "{what}: {status:?}");
        assert!(status.message.contains(says), "{what}: {}", status.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_is_immutable_but_its_status_is_not() {
    let cp = ControlPlane::shared();
    install(cp).await;
    let revisions = api(cp.admin_client(), "ReconcilerRevision");
    let digest = "a".repeat(64);
    let revision: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "reconciled.dev/v1alpha1",
        "kind": "ReconcilerRevision",
        "metadata": { "name": "blue-1" },
        "spec": {
            "revision": 1,
            "digest": digest,
            "source": "configmap reconciler-kind/rec key stamp.wasm",
            "settings": { "version": "blue" },
            "declared": { "for": "v1/ConfigMap", "kinds": ["v1/ConfigMap"], "namespaces": [] },
        },
    }))
    .unwrap();
    revisions
        .create(&PostParams::default(), &revision)
        .await
        .unwrap();
    let params = PatchParams::default();
    let edit = Patch::Merge(json!({ "spec": { "settings": { "version": "green" } } }));
    let refused = revisions.patch("blue-1", &params, &edit).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a ReconcilerRevision is immutable"),
        "{refused}"
    );
    let served = Patch::Merge(json!({ "status": { "servedFrom": "2026-12-03T12:00:00Z" } }));
    let patched = revisions
        .patch_status("blue-1", &params, &served)
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["servedFrom"], "2026-12-03T12:00:00Z");
    assert_eq!(patched.data["spec"]["settings"]["version"], "blue");

    let mut wrong = revision.clone();
    wrong.metadata.name = Some("blue-2".into());
    wrong.data["spec"]["digest"] = json!("not-a-digest");
    let refused = revisions
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("spec.digest"), "{refused}");
}
