//! Helpers shared by the host's integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod controllers;
pub mod guests;
pub mod host;
pub mod keys;
pub mod logs;
pub mod reconcilers;
pub mod replica;
pub mod scenarios;
pub mod wait;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, ObjectMeta};
use reconciled::informer::{Informer, State};

/// The control plane of the tests that restart the apiserver, compact etcd or cut its
/// connections (`informer_faults`, `reconnect`): theirs alone, so that no other test sees those
/// faults. Hold [`faults_serial`] while using it: each of those tests expects to be the only
/// one disturbing it.
pub fn faulty_control_plane() -> &'static testenv::ControlPlane {
    static CP: std::sync::OnceLock<Result<testenv::ControlPlane, String>> =
        std::sync::OnceLock::new();
    testenv::ControlPlane::own(&CP, &[])
}

/// The control plane of the tests of sharded list and watch (`sharding`, `key_sharding`): the
/// `ShardedListAndWatch` gate is on there alone, so that the other tests see a server that
/// ignores shard selectors, as most do.
pub fn sharded_control_plane() -> &'static testenv::ControlPlane {
    static CP: std::sync::OnceLock<Result<testenv::ControlPlane, String>> =
        std::sync::OnceLock::new();
    testenv::ControlPlane::own(&CP, &["--feature-gates=ShardedListAndWatch=true"])
}

/// One fault test at a time on [`faulty_control_plane`].
pub async fn faults_serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// Creates a namespace (tests isolate themselves by namespace on the shared control plane).
pub async fn namespace(client: &kube::Client, name: &str) {
    testenv::fixtures::create_namespace(client, name)
        .await
        .unwrap();
}

/// Creates namespace `name` set up for tenants' guests as `deploy/tenant.yaml` sets one up (the
/// ServiceAccount `reconciled-guest` their guests act as, its Role and RoleBinding), and waits
/// until the API server's authorizer sees the binding.
pub async fn tenant_namespace(cp: &testenv::ControlPlane, name: &str) {
    namespace(&cp.admin_client(), name).await;
    apply_deploy(cp, "tenant.yaml", Some(name));
    wait_allowed(
        &cp.admin_client(),
        name,
        "reconciled-guest",
        ("", "configmaps", "watch"),
    )
    .await;
}

/// Installs the `Reconciler` and `ReconcilerRevision` CRDs of `deploy/reconcilers.yaml` and
/// waits until the API server serves both.
pub fn reconciler_crds(cp: &testenv::ControlPlane) {
    apply_deploy(cp, "reconcilers.yaml", None);
    for crd in [
        "crd/reconcilers.reconciled.dev",
        "crd/reconcilerrevisions.reconciled.dev",
    ] {
        let out = (cp.kubectl())
            .args(["wait", "--for=condition=established", "--timeout=30s", crd])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{crd} not established: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `kubectl apply --server-side` of `deploy/<file>`, into namespace `ns` if given.
pub fn apply_deploy(cp: &testenv::ControlPlane, file: &str, ns: Option<&str>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let mut kubectl = cp.kubectl();
    kubectl.args(["apply", "--server-side"]);
    if let Some(ns) = ns {
        kubectl.args(["-n", ns]);
    }
    let out = kubectl.arg("-f").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply -n {ns:?} -f {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the API server's RBAC authorizer (which reads Roles and RoleBindings through its
/// own cache, a moment behind) says ServiceAccount `ns/sa` may `verb` `resource` of `group` in
/// `ns`.
pub async fn wait_allowed(
    client: &kube::Client,
    ns: &str,
    sa: &str,
    (group, resource, verb): (&str, &str, &str),
) {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{ns}:{sa}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = Api::<SubjectAccessReview>::all(client.clone())
            .create(&Default::default(), &review)
            .await
            .unwrap();
        if answer.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{ns}/{sa} never allowed to {verb} {resource}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ConfigMap named `name` with `data`.
pub fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// name → resourceVersion of every ConfigMap in `ns`, from a quorum LIST.
pub async fn fresh_list(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| {
            (
                c.metadata.name.unwrap(),
                c.metadata.resource_version.unwrap(),
            )
        })
        .collect()
}

/// name → resourceVersion of every object in the informer's store.
pub fn cached(informer: &Informer) -> BTreeMap<String, String> {
    informer
        .store()
        .all()
        .iter()
        .map(|o| (o.name().to_string(), o.resource_version().to_string()))
        .collect()
}

/// Waits until the informer's cache equals a quorum LIST of `ns` (same names, same RVs).
pub async fn wait_cache_equals_list(
    informer: &Informer,
    client: &kube::Client,
    ns: &str,
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let want = fresh_list(client, ns).await;
        let have = cached(informer);
        if want == have {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| have.get(*k) != Some(v))
                .collect();
            let extra: Vec<_> = have
                .iter()
                .filter(|(k, v)| want.get(*k) != Some(v))
                .collect();
            panic!(
                "cache != LIST after {timeout:?} (status {}, stats {:?}): missing/stale {missing:?}, extra/stale {extra:?}",
                informer.status(),
                informer.stats()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the informer reaches `state`, returning how long it took.
pub async fn wait_state(informer: &Informer, state: State, timeout: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    let mut rx = informer.watch_status();
    loop {
        if rx.borrow_and_update().state == state {
            return started.elapsed();
        }
        if tokio::time::timeout_at(started + timeout, rx.changed())
            .await
            .is_err()
        {
            panic!(
                "informer not {state:?} after {timeout:?}: {}",
                informer.status()
            );
        }
    }
}

/// Installs the ConfigMapGenerator example's CRD once per test binary: tests run at once, and
/// two creates of one CRD race.
pub async fn install_example_crd(cp: &testenv::ControlPlane) {
    static CRD: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    CRD.get_or_init(|| install_crd(cp, "configmap-generator", "configmapgenerators"))
        .await;
}

/// Installs the Reservation example's CRD once per test binary.
pub async fn install_reservation_crd(cp: &testenv::ControlPlane) {
    static CRD: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    CRD.get_or_init(|| install_crd(cp, "reservation", "reservations"))
        .await;
}

/// Applies `examples/<example>/crd.yaml` and waits until `<plural>.example.reconciled.dev` is
/// established.
async fn install_crd(cp: &testenv::ControlPlane, example: &str, plural: &str) {
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../examples/{example}/crd.yaml"));
    let out = cp
        .kubectl()
        .arg("apply")
        .arg("-f")
        .arg(&crd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl apply {}: {}",
        crd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cp
        .kubectl()
        .args(["wait", "--for=condition=established", "--timeout=30s"])
        .arg(format!("crd/{plural}.example.reconciled.dev"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "CRD {plural} not established: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `[tenants]` policy with these kinds allowed (tenants may declare none by default).
/// `policy`, loading tenants' guests from `namespaces` only. The control plane is shared by
/// every test of the binary: a ConfigMap source over every namespace would load the guests other
/// tests deliver, and reconcile, post Events and hold informers beside theirs.
pub fn only(
    namespaces: &[&str],
    policy: reconciled::sources::configmap::TenantPolicy,
) -> reconciled::sources::configmap::TenantPolicy {
    reconciled::sources::configmap::TenantPolicy {
        namespaces: Some(namespaces.iter().map(|n| n.to_string()).collect()),
        ..policy
    }
}

pub fn tenants(kinds: &[&str]) -> reconciled::sources::configmap::TenantPolicy {
    reconciled::sources::configmap::TenantPolicy {
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        ..Default::default()
    }
}

/// A `kubernetes.io/dockerconfigjson` Secret `registry-login` holding `json`: the pull secret
/// `deploy/tenant.yaml` lets a tenant's ServiceAccount read.
pub fn registry_login(json: String) -> k8s_openapi::api::core::v1::Secret {
    k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("registry-login".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(
            [(
                ".dockerconfigjson".to_string(),
                k8s_openapi::ByteString(json.into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}
