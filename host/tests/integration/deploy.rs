//! `deploy/reconciled.yaml` and `deploy/tenant.yaml` against the real apiserver: they apply
//! cleanly, and a host running as the host's ServiceAccount with its `host.toml` is ready and
//! serves a tenant's reconciler, acting as the tenant's ServiceAccount, with exactly those RBAC
//! rules; without one of the tenant's rules, the reconciler is refused, naming it. A `Reconciler`
//! the team creates (with tenant.yaml's `reconciled-tenant` Role, which may not write revisions)
//! is run too, its status written and its revision recorded with the host's rules alone.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::api::rbac::v1::Role;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use reconciled::config::Config;
use reconciled::guest::Runtime;
use reconciled::guest::identity::Identities;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;
use reconciled::replicas::Replicas;
use reconciled::sources::configmap::ConfigMapSource;
use reconciled::sources::reconciler::ReconcilerSource;
use reconciled::supervisor::{self, Supervisor};
use testenv::ControlPlane;

const SA: &str = "system:serviceaccount:reconciled-system:reconciled";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_apply_and_their_rules_are_enough_for_a_tenant_reconciler() {
    let cp = ControlPlane::shared();
    common::reconciler_crds(cp);
    common::apply_deploy(cp, "reconciled.yaml", None);

    // The host's config, as the Deployment mounts it.
    let admin = cp.admin_client();
    let config_map = Api::<ConfigMap>::namespaced(admin.clone(), "reconciled-system")
        .get("reconciled-config")
        .await
        .unwrap();
    let toml = &config_map.data.unwrap()["host.toml"];
    // Removed as the test ends, once the host has stopped writing compiled modules there.
    let temp = common::host::TempDir::new("deploy");
    let dir = &temp.0;
    std::fs::write(dir.join("host.toml"), toml).unwrap();
    let config = Config::load(&dir.join("host.toml")).unwrap();
    // The deployed config loads tenants from every namespace; here, from the test's own only.
    let policy = common::only(
        &["team-deploy"],
        config.tenants.expect("the deployed config loads tenants"),
    );
    let replicas = config
        .replicas
        .expect("the deployed config shares guests between replicas")
        .resolve("reconciled-0", "reconciled-system");

    // The host's identity: a certificate for the ServiceAccount's user name and groups, so that
    // RBAC treats it as the ServiceAccount. (Not impersonation: the host impersonates tenants'
    // ServiceAccounts itself, and the API server takes one impersonation per request.)
    let host = cp
        .user(
            SA,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:reconciled-system",
            ],
        )
        .unwrap();
    let identities = Identities::new(host.config.clone()).unwrap();
    let runtime = Runtime::new()
        .unwrap()
        .with_artifact_cache(&dir.join("cache"))
        .unwrap();
    let factory = Arc::new(InformerFactory::new(
        identities.host().clone(),
        Options::default(),
    ));
    // As a replica: the guest reconciles only once this host holds its shard's Lease, which
    // the Role in the manifest must allow.
    let replicas = Arc::new(
        Replicas::start(identities.host().clone(), replicas)
            .await
            .unwrap(),
    );
    let sup = Arc::new(Supervisor::new(
        runtime,
        factory,
        identities,
        supervisor::Options {
            replicas: Some(replicas.clone()),
            ..supervisor::Options::default()
        },
    ));
    let reconcilers = ReconcilerSource::start(
        sup.factory(),
        sup.clone(),
        policy.clone(),
        Arc::new(reconciled::sources::oci::Registry::default()),
        reconciled::sources::reconciler::Options::default(),
    )
    .unwrap();
    let source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Err(reasons) = sup.readiness() {
        assert!(Instant::now() < deadline, "not ready: {reasons:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A tenant namespace, as deploy/tenant.yaml sets one up; the tenant delivers a reconciler,
    // which reconciles (writes as the tenant's ServiceAccount) and the host records an Event on
    // the ConfigMap.
    let ns = "team-deploy";
    common::tenant_namespace(cp, ns).await;
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
    common::host::deliver(&cms, ns, &module).await;
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
    reconciler_as_the_team(cp, &admin, ns, &module).await;

    // Without one of tenant.yaml's verbs (patch, which stamp writes with), the next write is
    // refused: the reconcile error names the ServiceAccount and the rule to add, and nothing
    // changes on the server.
    let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
    let mut role = roles.get("reconciled-guest").await.unwrap();
    for rule in role.rules.iter_mut().flatten() {
        rule.verbs.retain(|v| v != "patch");
    }
    roles
        .replace("reconciled-guest", &PostParams::default(), &role)
        .await
        .unwrap();
    // The RBAC authorizer reads Roles through its own informer: wait until it refuses.
    let guest = Api::<ConfigMap>::namespaced(
        kube::Client::try_from({
            let mut c = cp.admin_config();
            c.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:reconciled-guest"));
            c
        })
        .unwrap(),
        ns,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while guest
        .patch(
            "work",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({})),
        )
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the Role edit never took effect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A merge patch, not get-and-replace: the team's Reconciler reconciles `work` too, and a
    // write of its between the two would conflict.
    cms.patch(
        "work",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "data": { "v": "8" } })),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let error = loop {
        let error = sup
            .controller("team-deploy/rec/rec")
            .and_then(|c| c.last_error("team-deploy/work"));
        if let Some(e) = error.filter(|e| e.contains("Forbidden")) {
            break e;
        }
        assert!(Instant::now() < deadline, "no forbidden reconcile");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        error.contains("ServiceAccount team-deploy/reconciled-guest")
            && error.contains(r#"add rule {apiGroups:[\"\"], resources:[\"configmaps\"], verbs:[\"patch\"]} to a Role bound to it in namespace \"team-deploy\""#),
        "{error}"
    );
    assert_eq!(
        common::host::seen(&cms, "work").await.as_deref(),
        Some("v1:7"),
        "the refused write changed nothing"
    );

    // The Lease rules are exact: Leases in the host's namespace, deleted as a replica stops
    // (its shards released for the others to take at once, and, as the last replica of its
    // group, deleted), and nowhere else.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "reconciled-system");
    let shard = replicas.shard_of("team-deploy/rec/rec");
    let held = leases
        .get(&format!("reconciled-shard-{shard}"))
        .await
        .unwrap();
    assert_eq!(holder(&held), Some("reconciled-0"));
    replicas.shutdown().await;
    assert!(
        leases
            .get_opt(&format!("reconciled-shard-{shard}"))
            .await
            .unwrap()
            .is_none(),
        "the last replica out deletes the shard Leases"
    );
    assert!(
        leases
            .get_opt("reconciled-replica-reconciled-0")
            .await
            .unwrap()
            .is_none(),
        "the replica's own Lease is deleted as it stops"
    );
    let elsewhere: Api<Lease> = Api::namespaced(
        kube::Client::try_from(host.config.clone()).unwrap(),
        "default",
    );
    let mut lease = held.clone();
    lease.metadata.resource_version = None;
    lease.metadata.namespace = None;
    let err = elsewhere
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "the host writes Leases only in its own namespace: {err}"
    );
    drop((reconcilers, source));
    sup.shutdown().await;
}

/// A developer of the team, bound to tenant.yaml's `reconciled-tenant` Role, creates a
/// Reconciler reading its module from a ConfigMap key: the host (with the manifest's rules only)
/// runs it, writes its status and records its revision, which the developer may read but not
/// write.
async fn reconciler_as_the_team(cp: &ControlPlane, admin: &kube::Client, ns: &str, module: &[u8]) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("modules".into()),
                ..Default::default()
            },
            binary_data: Some(
                [(
                    "stamp.wasm".to_string(),
                    k8s_openapi::ByteString(module.to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let developer = cp.user("team-deploy-dev", &[]).unwrap();
    let out = cp
        .kubectl()
        .args([
            "create",
            "rolebinding",
            "dev",
            "-n",
            ns,
            "--role=reconciled-tenant",
            "--user=team-deploy-dev",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = kube::Client::try_from(developer.config.clone()).unwrap();
    let kind = |k: &str| {
        let gvk = GroupVersionKind::gvk("reconciled.dev", "v1alpha1", k);
        (
            Api::<DynamicObject>::namespaced_with(dev.clone(), ns, &ApiResource::from_gvk(&gvk)),
            gvk,
        )
    };
    let (reconcilers, _) = kind("Reconciler");
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "reconciled.dev/v1alpha1",
        "kind": "Reconciler",
        "metadata": { "name": "stamp" },
        "spec": { "module": { "configMapRef": { "name": "modules", "key": "stamp.wasm" } } },
    }))
    .unwrap();
    // The RBAC authorizer reads the new RoleBinding through its own cache.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = reconcilers.create(&PostParams::default(), &object).await {
        assert!(
            Instant::now() < deadline,
            "the team may not create a Reconciler: {e}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status = reconcilers.get("stamp").await.unwrap().data["status"].clone();
        let ready = status["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if ready && status["currentRevision"] == 1 {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the Reconciler did not become Ready with revision 1: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["owner"], "reconciled-0", "{status:#}");
    let (revisions, _) = kind("ReconcilerRevision");
    let revision = revisions.get("stamp-1").await.unwrap();
    assert_eq!(
        revision.data["spec"]["declared"],
        serde_json::json!({ "for": "v1/ConfigMap", "kinds": ["v1/ConfigMap"], "namespaces": [ns] }),
        "what the module declared"
    );
    let err = revisions
        .delete("stamp-1", &kube::api::DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "a revision is the host's to write: {err}"
    );
    assert_eq!(
        revision.data["spec"]["source"],
        "configmap/modules/stamp.wasm"
    );

    // A ServiceAccount outside the host's impersonation rule: refused before any load, naming
    // the rule to widen.
    let stranger: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "reconciled.dev/v1alpha1",
        "kind": "Reconciler",
        "metadata": { "name": "stranger" },
        "spec": {
            "module": { "configMapRef": { "name": "modules", "key": "stamp.wasm" } },
            "serviceAccountName": "someone-else",
        },
    }))
    .unwrap();
    reconcilers
        .create(&PostParams::default(), &stranger)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let accepted = loop {
        let status = reconcilers.get("stranger").await.unwrap().data["status"].clone();
        let accepted = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Accepted").cloned());
        if let Some(a) = accepted.filter(|a| a["status"] == "False") {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "the stranger's Reconciler was not refused: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(accepted["reason"], "ServiceAccountNotAllowed", "{accepted}");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("impersonate:serviceaccount rule of ClusterRole reconciled-host"),
        "{accepted}"
    );
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
}
