//! Wasm guests running in the host against the real apiserver: typed errors, the sandbox,
//! forbidden writes and read-your-writes. The guest is `guests/probe`, whose behaviour is chosen
//! by the name of the ConfigMap it reconciles and which reports by annotation.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{cm, namespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use reconciled::controller::{Controller, Settings};
use reconciled::guest::Runtime;
use reconciled::guest::grant::Grant;
use reconciled::informer::factory::InformerFactory;
use testenv::ControlPlane;

const RESULT: &str = "probe.reconciled.dev/result";

async fn start(
    client: kube::Client,
    name: &str,
    settings: Settings,
) -> (Arc<Controller>, Arc<InformerFactory>, Runtime) {
    common::controllers::start(client, name, settings)
        .await
        .map_err(|(e, _)| e)
        .unwrap()
}

fn probe_settings(name: &str, namespaces: &[&str]) -> Settings {
    Settings {
        grant: Grant::namespaces(namespaces.iter().copied()),
        ..Settings::new(name)
    }
}

async fn result(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get(name)
        .await
        .unwrap()
        .metadata
        .annotations
        .and_then(|a| a.get(RESULT).cloned())
}

/// Waits until the probe has recorded a result on `name`, and returns it.
async fn wait_result(api: &Api<ConfigMap>, name: &str, timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(r) = result(api, name).await {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no result on {name} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_kinds_and_unindexed_fields_are_typed_errors() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "typed";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for name in ["undeclared-1", "unindexed-1"] {
        api.create(&PostParams::default(), &cm(name, &[]))
            .await
            .unwrap();
    }
    api.create(
        &PostParams::default(),
        &cm("indexed-1", &[("indexed", "yes")]),
    )
    .await
    .unwrap();
    let (_c, _f, _r) = start(admin.clone(), "probe", probe_settings("probe-typed", &[ns])).await;

    assert_eq!(
        wait_result(&api, "undeclared-1", Duration::from_secs(30)).await,
        "not-declared"
    );
    assert_eq!(
        wait_result(&api, "unindexed-1", Duration::from_secs(30)).await,
        "unindexed-field"
    );
    assert_eq!(
        wait_result(&api, "indexed-1", Duration::from_secs(30)).await,
        "ok:1",
        "the declared index serves the match"
    );
}

/// A guest that loops, one that allocates 1 GiB, one that pages through a huge list and one that
/// panics: each fails only its own reconcile and is retried, while a second guest keeps
/// reconciling normally throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_guest_fails_only_its_own_reconciles() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let (bad_ns, good_ns) = ("sandbox", "sandbox-good");
    namespace(&admin, bad_ns).await;
    namespace(&admin, good_ns).await;
    let bad_api = Api::<ConfigMap>::namespaced(admin.clone(), bad_ns);
    let good_api = Api::<ConfigMap>::namespaced(admin.clone(), good_ns);
    // 20 × 100 KiB: more than the bad guest's 1 MiB byte budget when listed.
    let filler = "x".repeat(100 << 10);
    for i in 0..20 {
        bad_api
            .create(
                &PostParams::default(),
                &cm(&format!("filler-{i}"), &[("blob", &filler)]),
            )
            .await
            .unwrap();
    }
    for name in ["loop-1", "alloc-1", "huge-list-1", "panic-1"] {
        bad_api
            .create(&PostParams::default(), &cm(name, &[]))
            .await
            .unwrap();
    }
    good_api
        .create(&PostParams::default(), &cm("steady", &[("v", "0")]))
        .await
        .unwrap();

    let mut bad = probe_settings("probe-bad", &[bad_ns]);
    bad.limits.deadline = Duration::from_secs(2);
    bad.limits.bytes_out = 1 << 20;
    // Two workers: the bad keys must not block each other either.
    bad.workers = 2;
    let (bad_c, _f1, _r1) = start(admin.clone(), "probe", bad).await;
    let (good_c, _f2, _r2) = start(
        admin.clone(),
        "probe",
        probe_settings("probe-good", &[good_ns]),
    )
    .await;

    // While the bad guest fails, the good one follows every change.
    for v in 1..=15 {
        let patch = serde_json::json!({"data": {"v": v.to_string()}});
        good_api
            .patch("steady", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if result(&good_api, "steady").await.as_deref() == Some(&format!("seen:{v}")) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the good guest stalled at v={v}: {:?}",
                good_c.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let key = |n: &str| format!("{bad_ns}/{n}");
    // The bad guest may have started late on a loaded machine: each of its keys fails, and the
    // trapping ones are retried, in its own time.
    common::wait::wait_until(
        "every bad key failed, loop, alloc and panic trapped twice, huge-list failed twice",
        Duration::from_secs(60),
        || {
            let snap = bad_c.snapshot();
            ["loop-1", "alloc-1", "huge-list-1", "panic-1"]
                .iter()
                .all(|n| bad_c.last_error(&key(n)).is_some())
                && snap.traps >= 6
                && snap.reconciles_failed >= 2
        },
    )
    .await;
    let err = |n: &str| {
        bad_c
            .last_error(&key(n))
            .unwrap_or_else(|| panic!("{n} has no error: {:?}", bad_c.snapshot()))
    };
    assert!(
        err("loop-1").contains("deadline of 2s exceeded"),
        "{}",
        err("loop-1")
    );
    assert!(
        err("alloc-1").contains("memory limit"),
        "{}",
        err("alloc-1")
    );
    assert!(
        err("panic-1").contains("probe panic"),
        "the panic message reaches the host: {}",
        err("panic-1")
    );
    assert!(
        err("huge-list-1").contains("TooLarge"),
        "{}",
        err("huge-list-1")
    );
    let snap = bad_c.snapshot();
    assert!(
        snap.traps >= 6,
        "loop, alloc and panic trap, and are retried: {snap:?}"
    );
    assert!(
        snap.reconciles_failed >= 2,
        "huge-list fails with an error, and is retried: {snap:?}"
    );
    assert_eq!(
        bad_c.counters().concurrent_same_key.load(Ordering::Relaxed),
        0
    );
    let good = good_c.snapshot();
    assert_eq!((good.traps, good.reconciles_failed), (0, 0), "{good:?}");
    eprintln!("sandbox: bad {snap:?}; good {good:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_hosts_rbac_forbids_is_a_forbidden_error() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "forbidden-writes";
    namespace(&admin, ns).await;
    // The host runs as a user that may read and patch ConfigMaps here, but not create them.
    let user = cp.user("host-limited", &[]).unwrap();
    let rules = vec![
        testenv::fixtures::rule(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch", "update"],
        ),
        // The probe also watches these; without them no reconcile would start at all.
        testenv::fixtures::rule("", &["serviceaccounts", "pods"], &["list", "watch"]),
    ];
    testenv::fixtures::grant(&admin, ns, "host", &user.name, rules)
        .await
        .unwrap();

    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(
        &PostParams::default(),
        &cm("forbidden-1", &[("target-namespace", ns)]),
    )
    .await
    .unwrap();
    let host_client = kube::Client::try_from(user.config.clone()).unwrap();
    let (c, _f, _r) = start(host_client, "probe", probe_settings("probe-fw", &[ns])).await;
    let got = wait_result(&api, "forbidden-1", Duration::from_secs(30)).await;
    assert_eq!(got, "forbidden");
    assert_eq!(
        c.snapshot().traps,
        0,
        "a forbidden write is an answer, not a crash"
    );
}

async fn run_ryw(ns: &str, read_your_writes: Option<bool>) -> (String, Duration, (u64, u64)) {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let mut settings = probe_settings(&format!("probe-{ns}"), &[ns]);
    settings.read_your_writes = read_your_writes;
    settings.limits.deadline = Duration::from_secs(120);
    let (c, _f, _r) = start(admin.clone(), "probe", settings).await;
    let started = std::time::Instant::now();
    api.create(&PostParams::default(), &cm("ryw-1", &[("counter", "0")]))
        .await
        .unwrap();
    let result = wait_result(&api, "ryw-1", Duration::from_secs(150)).await;
    let floors =
        &c.context().declared[&reconciled::guest::bindings::Gvk::new("", "v1", "ConfigMap")].floors;
    (result, started.elapsed(), floors.wait_stats())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_always_reads_its_own_writes_from_the_cache() {
    let (result, wall, (waits, wakeups)) = run_ryw("ryw-on", None).await;
    assert_eq!(
        result, "stale:0",
        "1000 update-then-read rounds must never read a stale object"
    );
    // Event-driven, not polling: a wait wakes only when the store changes, so each wait sees a
    // handful of wake-ups (this test's write, plus other objects in the namespace). A poll loop
    // would show hundreds per wait.
    assert!(
        waits > 0,
        "some reads should have had to wait for the watch"
    );
    assert!(
        wakeups <= waits * 4,
        "{wakeups} wake-ups for {waits} waits: is something polling?"
    );
    eprintln!(
        "read-your-writes on: {result} over 1000 rounds in {wall:?}; {waits} reads waited, {wakeups} wake-ups"
    );

    let (result, wall, _) = run_ryw("ryw-off", Some(false)).await;
    let stale: u32 = result.strip_prefix("stale:").unwrap().parse().unwrap();
    // Without the floor the cache is merely eventually consistent: a read right after a write
    // usually beats the watch event (hundreds of times in 1000 here).
    assert!(
        stale > 0,
        "read-your-writes off should have shown at least one stale read"
    );
    eprintln!("read-your-writes off: {stale} stale reads of 1000 in {wall:?}");
}

/// `watches` reach the primary: a ServiceAccount through its label, a Pod through the guest's
/// own `map` export. The probe's `watch-*` result counts what it sees, so it only moves if the
/// watched change triggered a reconcile of the ConfigMap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_kinds_map_to_their_primary_by_label_and_by_guest_map() {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "watches";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &cm("watch-1", &[]))
        .await
        .unwrap();
    let (_c, _f, _r) = start(
        admin.clone(),
        "probe",
        probe_settings("probe-watches", &[ns]),
    )
    .await;
    let wait_for = async |want: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while result(&api, "watch-1").await.as_deref() != Some(want) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "watch-1 never showed {want}: {:?}",
                result(&api, "watch-1").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    wait_for("sa:0,pod:0").await;

    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sa-1", "labels": {"probe.reconciled.dev/for": "watch-1"}}
    }))
    .unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    wait_for("sa:1,pod:0").await;

    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pod-1", "annotations": {"probe.reconciled.dev/for": "watch-1"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    wait_for("sa:1,pod:1").await;
}

/// An error a TypeScript, Python or Go guest throws (or returns) reaches the host as the WIT's
/// typed error: the SDK's error type as its case, any other error as `other` with its message;
/// neither is a trap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_python_and_go_errors_reach_the_host_typed_never_as_traps() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    for (stem, ns, thrown) in [
        ("errors_ts", "errors-ts", "\"a plain failure\""),
        ("errors_py", "errors-py", "ValueError: a plain failure"),
        ("errors_go", "errors-go", "a plain failure"),
    ] {
        namespace(&client, ns).await;
        let (controller, _factory, _runtime) =
            start(client.clone(), stem, probe_settings(stem, &[ns])).await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for name in ["conflict", "plain", "fine"] {
            api.create(&PostParams::default(), &cm(name, &[]))
                .await
                .unwrap();
        }
        let key = |name: &str| format!("{ns}/{name}");
        common::wait::wait_until(
            &format!("{stem}: both errors recorded and counted"),
            Duration::from_secs(30),
            || {
                // The error is recorded a moment before the failure is counted.
                controller.last_error(&key("conflict")).is_some()
                    && controller.last_error(&key("plain")).is_some()
                    && controller.snapshot().reconciles_failed >= 2
            },
        )
        .await;
        let conflict = controller.last_error(&key("conflict")).unwrap();
        assert!(
            conflict.contains("Error::Conflict(") && conflict.contains("by the guest"),
            "{stem}: {conflict}"
        );
        let plain = controller.last_error(&key("plain")).unwrap();
        assert!(
            plain.contains("Error::Other(") && plain.contains(thrown),
            "{stem}: {plain}"
        );
        assert_eq!(controller.last_error(&key("fine")), None, "{stem}");
        let snap = controller.snapshot();
        assert_eq!(snap.traps, 0, "{stem}: an error is not a trap");
        assert!(
            snap.reconciles_failed >= 2,
            "{stem}: {}",
            snap.reconciles_failed
        );
        controller.stop().await;
    }
}
