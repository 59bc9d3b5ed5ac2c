//! Helpers for tests of the `Reconciler` kind: applying one as a tenant would, reading its
//! conditions, and the quick status and tenant policy such tests run with.

use std::time::{Duration, Instant};

use super as common;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams};
use reconciled::sources::configmap::{LABEL, TenantPolicy};
use reconciled::sources::reconciler::{Options, ReconcilerSource};
use serde_json::{Value, json};

pub fn api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("reconciled.dev", "v1alpha1", kind);
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// Applies Reconciler `name` with `spec`, as the tenant would (`kubectl apply --server-side`).
pub async fn apply(api: &Api<DynamicObject>, name: &str, spec: Value) {
    let r: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "reconciled.dev/v1alpha1",
        "kind": "Reconciler",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap();
    api.patch(
        name,
        &PatchParams::apply("tenant").force(),
        &Patch::Apply(&r),
    )
    .await
    .unwrap();
}

pub fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The message of condition `type_` of `status`.
pub fn message_of(status: &Value, type_: &str) -> String {
    condition(status, type_).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until Reconciler `name`'s status satisfies `ok`; returns it.
pub async fn wait_status(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = api
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| o.data["status"].clone())
            .unwrap_or(Value::Null);
        if ok(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {what} not within 90 s; status: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether condition `type_` of `status` is `want` with `reason`.
pub fn is(status: &Value, type_: &str, want: &str, reason: &str) -> bool {
    condition(status, type_).is_some_and(|c| c["status"] == want && c["reason"] == reason)
}

/// Quick status, for tests.
pub fn options() -> Options {
    Options {
        tick: Duration::from_millis(200),
        min_gap: Duration::from_millis(500),
        refresh: Duration::from_secs(2),
    }
}

pub fn policy(ns: &str, registries: &[&str]) -> TenantPolicy {
    let mut policy = common::tenants(&["v1/ConfigMap"]);
    policy.registries = registries.iter().map(|r| r.to_string()).collect();
    policy.min_reload_interval_ms = 0;
    policy.workers = 2;
    common::only(&[ns], policy)
}

/// A ConfigMap holding `module` under binaryData key `key`, labelled as a module source or not.
pub fn module_configmap(name: &str, key: &str, module: &[u8], labelled: bool) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labelled.then(|| [(LABEL.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        binary_data: Some([(key.to_string(), k8s_openapi::ByteString(module.to_vec()))].into()),
        ..Default::default()
    }
}

/// A Reconciler source over namespace `ns` alone for `sup`, with configMapRef modules (no
/// registry) and quick status.
pub fn source(
    sup: &std::sync::Arc<reconciled::supervisor::Supervisor>,
    ns: &str,
) -> ReconcilerSource {
    ReconcilerSource::start(
        sup.factory(),
        sup.clone(),
        policy(ns, &[]),
        std::sync::Arc::new(reconciled::sources::oci::Registry::default()),
        options(),
    )
    .unwrap()
}
