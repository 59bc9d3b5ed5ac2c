//! End to end: the ConfigMapGenerator reconciler, compiled to wasm and run by the host, converges
//! a real cluster: ConfigMaps created, updated and pruned through server-side apply, status kept
//! current, an Event recorded, and garbage collection through owner references on delete. The
//! same test for each language the example is written in: Rust (`examples/configmap-generator`),
//! TypeScript (`examples/configmap-generator-ts`), Python (`examples/configmap-generator-py`)
//! and Go (`examples/configmap-generator-go`).

use crate::common;

use std::time::Duration;

use common::namespace;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use testenv::ControlPlane;

const LABEL: &str = "example.reconciled.dev/generator";

/// Polls `check` every 100 ms until it returns `Some`, or fails after `timeout` with `what`.
async fn eventually<T, F: AsyncFnMut() -> Option<T>>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn generated(api: &Api<ConfigMap>, name: &str) -> Vec<(String, Option<String>)> {
    let lp = ListParams::default().labels(&format!("{LABEL}={name}"));
    let mut v: Vec<_> = api
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap(),
                c.data.and_then(|d| d.get("greeting").cloned()),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configmap_generator_converges_creates_updates_and_garbage_collects() {
    converges("configmap_generator", "cmgen").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_configmap_generator_passes_the_same_test() {
    converges("configmap_generator_ts", "cmgen-ts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_configmap_generator_passes_the_same_test() {
    converges("configmap_generator_py", "cmgen-py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_configmap_generator_passes_the_same_test() {
    converges("configmap_generator_go", "cmgen-go").await;
}

/// The example built as `stem` (a file stem from guests/build.sh) converges in namespace `ns`.
async fn converges(stem: &str, ns: &str) {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    namespace(&admin, ns).await;
    common::install_example_crd(cp).await;

    let settings = Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new(ns)
    };
    let (controller, _factory, _runtime) =
        common::controllers::start(admin.clone(), stem, settings)
            .await
            .map_err(|(e, _)| e)
            .unwrap();

    let gvk = GroupVersionKind::gvk("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator");
    let generators =
        Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &ApiResource::from_gvk(&gvk));
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let gen_obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.reconciled.dev/v1alpha1", "kind": "ConfigMapGenerator",
        "metadata": {"name": "greeting"},
        "spec": {"copies": 3, "data": {"greeting": "hello"}}
    }))
    .unwrap();
    let created = generators
        .create(&PostParams::default(), &gen_obj)
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    // Creates: three ConfigMaps, controlled by the generator, and a status that says so.
    let want = |n: usize, greeting: &str| {
        (0..n)
            .map(|i| (format!("greeting-{i}"), Some(greeting.to_string())))
            .collect::<Vec<_>>()
    };
    eventually(
        "3 generated ConfigMaps",
        Duration::from_secs(30),
        async || (generated(&cms, "greeting").await == want(3, "hello")).then_some(()),
    )
    .await;
    let child = cms.get("greeting-0").await.unwrap();
    let owner = &child.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (uid.as_str(), Some(true))
    );
    eventually(
        "status generated=3, observedGeneration=1",
        Duration::from_secs(30),
        async || {
            let s = generators.get("greeting").await.unwrap().data["status"].clone();
            (s["generated"] == 3 && s["observedGeneration"] == 1).then_some(())
        },
    )
    .await;

    // Updates: fewer copies and new data prune the extras and update the rest.
    let patch = serde_json::json!({"spec": {"copies": 1, "data": {"greeting": "bonjour"}}});
    generators
        .patch("greeting", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("1 updated ConfigMap", Duration::from_secs(30), async || {
        (generated(&cms, "greeting").await == want(1, "bonjour")).then_some(())
    })
    .await;
    eventually(
        "status generated=1, observedGeneration=2",
        Duration::from_secs(30),
        async || {
            let s = generators.get("greeting").await.unwrap().data["status"].clone();
            (s["generated"] == 1 && s["observedGeneration"] == 2).then_some(())
        },
    )
    .await;
    let events = Api::<Event>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.involved_object.name.as_deref() == Some("greeting")
                && e.reason.as_deref() == Some("Generated")),
        "the guest records an Event on its generator"
    );

    // Deletes: the garbage collector removes what the generator owned.
    generators
        .delete("greeting", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "generated ConfigMaps garbage-collected",
        Duration::from_secs(60),
        async || generated(&cms, "greeting").await.is_empty().then_some(()),
    )
    .await;

    let snap = controller.snapshot();
    assert_eq!(snap.traps, 0, "{snap:?}");
    eprintln!("{stem} converged: {snap:?}");
}
