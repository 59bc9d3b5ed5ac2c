//! What kinds a tenant's guest may declare, against the real apiserver: none by default, and a
//! wildcard never covers RBAC kinds, Secrets or Pods.

use crate::common;

use common::host::{TempDir, supervisor_with, tenant_host, wait_rejected, wait_serving};
use common::wait::COLD_LOAD;
use common::{tenant_namespace, wait_allowed};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use reconciled::sources::configmap::{ConfigMapSource, TenantPolicy};
use testenv::ControlPlane;

async fn deliver(client: &kube::Client, ns: &str, name: &str, guest: &str) {
    let module = std::fs::read(common::guests::wasm(guest)).unwrap();
    let packed = reconciled::sources::configmap::pack(ns, name, "rec", &module).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(packed).unwrap(),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_tenant_guest_loads_nothing_and_is_told_which_setting_allows_it() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "deny-default";
    let artifacts = TempDir::new("artifacts");
    let (sup, _source) = tenant_host(cp, ns, &artifacts, TenantPolicy::default()).await;
    deliver(&client, ns, "writer", "stamp_v1").await;
    let says = r#"add it to `kinds` under [tenants] or [tenants.grants.deny-default]"#;
    let guest = format!("{ns}/writer/rec");
    wait_rejected(&sup, &client, (ns, "writer"), &guest, says, COLD_LOAD).await;
    assert!(sup.controller(&guest).is_none());
    let error = sup.last_error(&guest).unwrap();
    assert!(error.contains(r#"declares kind "v1/ConfigMap""#), "{error}");
    assert!(error.contains("--tenant-kinds"), "{error}");
    // Nothing was started for it, and its rejection does not hold the host's readiness.
    assert!(
        sup.factory().active().iter().all(|i| {
            i.key().kind != "ConfigMap" || !i.key().scope.to_string().contains("stamp")
        })
    );
    assert_eq!(sup.readiness(), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_does_not_let_a_tenant_guest_declare_pods() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "deny-wildcard";
    let artifacts = TempDir::new("artifacts");
    let (sup, _source) = tenant_host(cp, ns, &artifacts, common::tenants(&["*"])).await;
    // probe watches Pods (and ServiceAccounts and ConfigMaps); stamp only ConfigMaps.
    deliver(&client, ns, "pods", "probe").await;
    deliver(&client, ns, "plain", "stamp_v1").await;
    wait_rejected(
        &sup,
        &client,
        (ns, "pods"),
        &format!("{ns}/pods/rec"),
        r#"never allows "v1/Pod""#,
        COLD_LOAD,
    )
    .await;
    assert!(sup.controller(&format!("{ns}/pods/rec")).is_none());
    wait_serving(&sup, &format!("{ns}/plain/rec"), COLD_LOAD).await;

    // Named, Pods are allowed: the same module loads once the operator lists them.
    let ns = "allow-named";
    tenant_namespace(cp, ns).await;
    // The second wall: the tenant's ServiceAccount must also be let read what probe reads.
    for args in [
        "create role probe-reads --verb=list,watch --resource=pods,serviceaccounts",
        "create rolebinding probe-reads --role=probe-reads --serviceaccount=allow-named:reconciled-guest",
    ] {
        let out = cp
            .kubectl()
            .args(args.split(' '))
            .args(["-n", ns])
            .output()
            .unwrap();
        assert!(out.status.success(), "kubectl {args}: {out:?}");
    }
    wait_allowed(&client, ns, "reconciled-guest", ("", "pods", "watch")).await;
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let _source = ConfigMapSource::start(
        sup.factory(),
        sup.clone(),
        common::only(&[ns], common::tenants(&["*", "v1/Pod"])),
    )
    .unwrap();
    deliver(&client, ns, "pods", "probe").await;
    wait_serving(&sup, &format!("{ns}/pods/rec"), COLD_LOAD).await;
}
