//! What tenant namespaces may use, against the real apiserver: the guest quota (serving guests
//! count, rejected ones do not, reloads never wait, a refused guest loads once room frees up)
//! and the cap on cache bytes, with the memory each guest is attributed.
//!
//! The guest is `guests/stamp`, delivered in ConfigMaps as a tenant would; its informer reads
//! the ConfigMaps labelled `stamp.reconciled.dev/enabled=true` of its namespace.

use crate::common;

use std::time::Duration;

use common::host::{ENABLED, TempDir, seen, stamped, supervisor_with};
use common::tenant_namespace;
use common::wait::{wait_event, wait_until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use reconciled::guest::digest_of;
use reconciled::ops::status::GuestState;
use reconciled::sources::configmap::{ConfigMapSource, LABEL, TenantPolicy};
use reconciled::supervisor::Supervisor;
use testenv::ControlPlane;

fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(common::guests::wasm(name)).unwrap()
}

fn b64(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A ConfigMap `name` delivering `bytes` under `key`, labelled as a module source.
fn module_cm(name: &str, modules: &[(&str, &[u8])]) -> ConfigMap {
    let binary: serde_json::Map<String, serde_json::Value> = modules
        .iter()
        .map(|(k, b)| (k.to_string(), b64(b).into()))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {LABEL: "true"}},
        "binaryData": binary,
    }))
    .unwrap()
}

fn serving(sup: &Supervisor, guest: &str) -> bool {
    sup.controller(guest).is_some()
}

fn state(sup: &Supervisor, guest: &str) -> Option<GuestState> {
    sup.status().guest(guest).map(|g| g.state)
}

/// The refusal of `guest` for quota: in `/status`, in the log, in the rejection metric and as
/// a Warning Event on its ConfigMap `cm`.
async fn refused_for_quota(
    client: &kube::Client,
    sup: &Supervisor,
    ns: &str,
    cm: &str,
    guest: &str,
) {
    wait_until("the refusal in /status", Duration::from_secs(10), || {
        sup.status().guest(guest).is_some_and(|g| {
            g.state == GuestState::Rejected
                && g.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("tenants.max_guests_per_namespace = 3"))
        })
    })
    .await;
    wait_event(
        client,
        ns,
        cm,
        "ModuleRejected",
        "tenants.max_guests_per_namespace",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        common::logs::logged(&["module rejected", guest, "quota"]),
        "no log line for the refusal of {guest}"
    );
    let metric =
        format!("reconciled_module_rejections_total{{guest=\"{guest}\",reason=\"quota\"}}");
    assert!(sup.metrics().contains(&metric), "no {metric}");
    assert!(!serving(sup, guest));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_counts_serving_guests_lets_reloads_through_and_loads_a_refused_guest_when_room_frees_up()
 {
    common::logs::capture();
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "team-quota";
    tenant_namespace(cp, ns).await;
    let artifacts = TempDir::new("quota");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let policy = TenantPolicy {
        max_guests_per_namespace: 3,
        min_reload_interval_ms: 0,
        ..common::only(&[ns], common::tenants(&["*"]))
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let (v1, v2) = (wasm("stamp_v1"), wasm("stamp_v2"));
    let create = |name: &'static str, bytes: Vec<u8>| {
        let cms = cms.clone();
        async move {
            let cm = module_cm(name, &[(&format!("{name}.wasm"), &bytes)]);
            cms.create(&PostParams::default(), &cm).await.unwrap();
        }
    };

    // Two serving and one rejected under a quota of 3 (18 and 2 under 20, scaled down).
    create("a", v1.clone()).await;
    create("b", v1.clone()).await;
    create("bad", b"not a component".to_vec()).await;
    wait_until(
        "a and b serving, bad rejected",
        Duration::from_secs(30),
        || {
            serving(&sup, "team-quota/a/a")
                && serving(&sup, "team-quota/b/b")
                && state(&sup, "team-quota/bad/bad") == Some(GuestState::Rejected)
        },
    )
    .await;

    // A rejected guest holds no seat: the third guest loads.
    create("c", v1.clone()).await;
    wait_until(
        "c serving beside a rejected guest",
        Duration::from_secs(30),
        || serving(&sup, "team-quota/c/c"),
    )
    .await;

    // The fourth is refused, and says so everywhere.
    create("d", v1.clone()).await;
    refused_for_quota(&client, &sup, ns, "d", "team-quota/d/d").await;

    // A new version of a serving guest loads, quota full or not.
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"binaryData": {"a.wasm": b64(&v2)}})),
    )
    .await
    .unwrap();
    let v2_digest = digest_of(&v2);
    wait_until("a reloaded over the quota", Duration::from_secs(30), || {
        sup.controller("team-quota/a/a")
            .is_some_and(|c| c.digest() == v2_digest)
    })
    .await;
    wait_event(
        &client,
        ns,
        "a",
        "ModuleLoaded",
        &v2_digest,
        Duration::from_secs(10),
    )
    .await;

    // Room frees up: d loads with no edit of its ConfigMap.
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    wait_until("d serving once b is gone", Duration::from_secs(30), || {
        serving(&sup, "team-quota/d/d")
    })
    .await;
    wait_event(
        &client,
        ns,
        "d",
        "ModuleLoaded",
        "serving",
        Duration::from_secs(10),
    )
    .await;
    // And the quota holds again: a fifth waits.
    create("e", v1.clone()).await;
    refused_for_quota(&client, &sup, ns, "e", "team-quota/e/e").await;
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_past_the_namespaces_cache_cap_is_refused_and_shared_informers_are_split() {
    common::logs::capture();
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let (big, small) = ("team-cache-big", "team-cache-small");
    tenant_namespace(cp, big).await;
    tenant_namespace(cp, small).await;
    // About 40 KiB for the stamp guest's informer in `big`, 2 small objects in `small`.
    let objects = |ns| Api::<ConfigMap>::namespaced(client.clone(), ns);
    for i in 0..4 {
        let cm = stamped(&format!("work-{i}"), &"x".repeat(10 << 10));
        objects(big)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    for i in 0..2 {
        let cm = stamped(&format!("work-{i}"), "1");
        objects(small)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let artifacts = TempDir::new("cache-cap");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let cap = 16u64 << 10;
    let policy = TenantPolicy {
        max_cached_bytes_per_namespace: Some(cap),
        min_reload_interval_ms: 0,
        ..common::only(&[big, small], common::tenants(&["*"]))
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    let v1 = wasm("stamp_v1");

    // Over the cap: refused once its informer has synced, and the informer released.
    let cm = module_cm("rec", &[("rec.wasm", &v1)]);
    objects(big)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let guest = "team-cache-big/rec/rec";
    // Refused once its cache has synced, after a cold compile.
    wait_event(
        &client,
        big,
        "rec",
        "ModuleRejected",
        "tenants.max_cached_bytes_per_namespace",
        common::wait::COLD_LOAD,
    )
    .await;
    let status = sup.status();
    let g = status.guest(guest).unwrap();
    assert_eq!(g.state, GuestState::Rejected);
    let reason = g.reason.clone().unwrap();
    assert!(reason.contains(&format!("cap of {cap} bytes")), "{reason}");
    let metric =
        format!("reconciled_module_rejections_total{{guest=\"{guest}\",reason=\"cache-bytes\"}} 1");
    assert!(sup.metrics().contains(&metric), "no {metric}");
    assert!(common::logs::logged(&[
        "module rejected",
        guest,
        "cache-bytes"
    ]));
    // The ConfigMap source's own informer covers `big` too (the source is scoped to the test's
    // namespaces); the guest's is the one that must go.
    wait_until("its informer released", Duration::from_secs(10), || {
        !sup.factory().active().iter().any(|i| {
            let scope = i.key().scope.to_string();
            scope.contains(big) && !scope.contains(LABEL)
        })
    })
    .await;

    // Under the cap: two guests of one ConfigMap share one informer, half each.
    let cm = module_cm("pair", &[("one.wasm", &v1), ("two.wasm", &v1)]);
    objects(small)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let (one, two) = ("team-cache-small/pair/one", "team-cache-small/pair/two");
    wait_until("both serving", Duration::from_secs(30), || {
        serving(&sup, one) && serving(&sup, two)
    })
    .await;
    for i in 0..2 {
        let name = format!("work-{i}");
        let api = objects(small);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while seen(&api, &name).await.is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} never reconciled"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Both guests stamp the same objects: one may have written both before the other's first
    // reconcile, whose instance the memory figures below need.
    wait_until("both reconciled", Duration::from_secs(20), || {
        let status = sup.status();
        [one, two]
            .iter()
            .all(|g| status.guest(g).is_some_and(|g| g.reconciles.ok > 0))
    })
    .await;
    let status = sup.status();
    let informer = status
        .informers
        .iter()
        .find(|i| i.scope.contains(small) && i.scope.contains(ENABLED))
        .unwrap();
    assert!(informer.cached_bytes > 0 && informer.cached_bytes < cap);
    let memory = |g: &str| status.guest(g).unwrap().memory.clone().unwrap();
    let (m1, m2) = (memory(one), memory(two));
    assert_eq!(
        m1.cached_bytes + m2.cached_bytes,
        informer.cached_bytes,
        "the shares sum to what the informer holds"
    );
    assert!(
        m1.cached_bytes.abs_diff(m2.cached_bytes) <= 1,
        "{m1:?} {m2:?}"
    );
    for m in [&m1, &m2] {
        assert!(m.compiled_bytes > v1.len() as u64, "{m:?}");
        assert!(
            m.peak_instance_bytes >= 64 << 10,
            "a wasm page at least: {m:?}"
        );
    }
    // For the reader of a run: what one small Rust guest costs.
    eprintln!(
        "informer {} objects, {} bytes; per guest: cache share {} / {}, peak instance {}, compiled {} (module {})",
        informer.objects,
        informer.cached_bytes,
        m1.cached_bytes,
        m2.cached_bytes,
        m1.peak_instance_bytes,
        m1.compiled_bytes,
        v1.len()
    );
    let text = sup.metrics();
    for line in [
        format!(
            "reconciled_guest_cached_bytes{{guest=\"{one}\"}} {}",
            m1.cached_bytes
        ),
        format!(
            "reconciled_module_compiled_bytes{{guest=\"{two}\"}} {}",
            m2.compiled_bytes
        ),
    ] {
        assert!(text.contains(&line), "no {line:?}");
    }
    sup.shutdown().await;
}
