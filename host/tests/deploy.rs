//! `deploy/reconciled.yaml` against the real apiserver: it applies cleanly, and a host running
//! as its ServiceAccount (impersonated) with its `host.toml` is ready and serves a tenant's
//! reconciler with exactly those RBAC rules.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use reconciled::config::Config;
use reconciled::guest::Runtime;
use reconciled::guest::identity::Identities;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;
use reconciled::sources::configmap::ConfigMapSource;
use reconciled::supervisor::{self, Supervisor};
use testenv::ControlPlane;

const SA: &str = "system:serviceaccount:reconciled-system:reconciled";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_apply_and_their_rules_are_enough_for_a_tenant_reconciler() {
    let cp = ControlPlane::shared();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/reconciled.yaml");
    let out = cp
        .kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl apply -f {}: {}",
        manifest.display(),
        String::from_utf8_lossy(&out.stderr)
    );

    // The host's config, as the Deployment mounts it.
    let admin = cp.admin_client();
    let config_map = Api::<ConfigMap>::namespaced(admin.clone(), "reconciled-system")
        .get("reconciled-config")
        .await
        .unwrap();
    let toml = &config_map.data.unwrap()["host.toml"];
    let dir = std::env::temp_dir().join(format!("reconciled-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("host.toml"), toml).unwrap();
    let config = Config::load(&dir.join("host.toml")).unwrap();
    let policy = config.tenants.expect("the deployed config loads tenants");

    // The host's identity.
    let mut cfg = cp.admin_config();
    cfg.auth_info.impersonate = Some(SA.into());
    cfg.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        "system:serviceaccounts:reconciled-system".into(),
        "system:authenticated".into(),
    ]);
    let identities = Identities::new(cfg).unwrap();
    let runtime = Runtime::new()
        .unwrap()
        .with_artifact_cache(&dir.join("cache"))
        .unwrap();
    let factory = Arc::new(InformerFactory::new(
        identities.host().clone(),
        Options::default(),
    ));
    let sup = Arc::new(Supervisor::new(
        runtime,
        factory,
        identities,
        supervisor::Options::default(),
    ));
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Err(reasons) = sup.readiness() {
        assert!(Instant::now() < deadline, "not ready: {reasons:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A tenant delivers a reconciler; it reconciles (writes as the ServiceAccount) and the
    // host records an Event on the ConfigMap.
    let ns = "team-deploy";
    common::namespace(&admin, ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("work".into()),
                labels: Some([("stamp.reconciled.dev/enabled".into(), "true".into())].into()),
                ..Default::default()
            },
            data: Some([("v".into(), "7".into())].into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let packed = reconciled::sources::pack::pack(ns, "rec", "rec", &module).unwrap();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(packed).unwrap(),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let work = cms.get("work").await.unwrap();
        let seen = work
            .metadata
            .annotations
            .and_then(|a| a.get("stamp.reconciled.dev/seen").cloned());
        if seen.as_deref() == Some("v1:7") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not reconciled: {seen:?}; load error: {:?}; reconcile error: {:?}",
            sup.last_error("team-deploy/rec/rec"),
            sup.controller("team-deploy/rec/rec")
                .and_then(|c| c.last_error("team-deploy/work"))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = Api::<Event>::namespaced(admin.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap();
        if events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("ModuleLoaded"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no ModuleLoaded Event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
