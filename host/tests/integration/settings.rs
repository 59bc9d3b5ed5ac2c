//! Settings: one module deployed twice with different settings behaves differently, with no
//! rebuild; new settings alone reload the guest without a compile; a ConfigMap module reads its
//! `<stem>.settings.json` key, and bad settings there are refused, naming the key, while the
//! version serving keeps serving.
//!
//! The guest is `guests/stamp`, which stamps `<settings.version>:<data.v>` when its settings
//! name a version.

use crate::common;

use std::time::Duration;

use common::host::{TempDir, seen_all, stamped, supervisor_with, tenant_host};
use common::wait::wait_until;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use reconciled::guest::settings::GuestSettings;
use reconciled::sources::configmap::LABEL;
use reconciled::supervisor::{Applied, Source};
use serde_json::json;
use testenv::ControlPlane;

fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(common::guests::wasm(name)).unwrap()
}

fn settings(name: &str, ns: &str, version: &str) -> Settings {
    Settings {
        grant: Grant::namespaces([ns]),
        guest_settings: GuestSettings::from_value(&json!({ "version": version })).unwrap(),
        ..Settings::new(name)
    }
}

/// Waits until `work` in `api` is stamped `want`.
async fn wait_stamp(api: &Api<ConfigMap>, want: &str) {
    let mut last = None;
    let stamped = async {
        loop {
            last = seen_all(api).await.remove("work").flatten();
            if last.as_deref() == Some(want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let done = tokio::time::timeout(Duration::from_secs(30), stamped).await;
    assert!(done.is_ok(), "wanted {want}, saw {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_module_runs_twice_with_different_settings_and_new_settings_reload_without_a_compile() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let (blue_ns, green_ns) = ("settings-blue", "settings-green");
    let mut apis = Vec::new();
    for ns in [blue_ns, green_ns] {
        common::namespace(&client, ns).await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.create(&PostParams::default(), &stamped("work", "1"))
            .await
            .unwrap();
        apis.push(api);
    }
    let sup = supervisor_with(&cp.admin_config(), None);
    let module = wasm("stamp_v1");
    let source = || Source::File("stamp_v1.wasm".into());
    for (name, ns, version) in [("blue", blue_ns, "blue"), ("green", green_ns, "green")] {
        let applied =
            (sup.apply(name, source(), settings(name, ns, version), module.clone())).await;
        assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");
    }
    wait_stamp(&apis[0], "blue:1").await;
    wait_stamp(&apis[1], "green:1").await;

    // The same bytes with new settings: a reload of the module serving, nothing compiled.
    let before = sup.controller("blue").unwrap();
    let applied = sup
        .apply(
            "blue",
            source(),
            settings("blue", blue_ns, "navy"),
            module.clone(),
        )
        .await;
    assert!(matches!(applied, Applied::Reloaded { .. }), "{applied:?}");
    let after = sup.controller("blue").unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&before, &after),
        "reloaded in place: the queue and informers stay"
    );
    let (compile, _, _) = sup.last_load("blue").unwrap();
    assert_eq!(compile, Duration::ZERO, "nothing compiled for new settings");
    assert_eq!(after.guest_settings().as_str(), r#"{"version":"navy"}"#);
    wait_stamp(&apis[0], "navy:1").await;
    // The same settings again change nothing.
    let applied = sup
        .apply("blue", source(), settings("blue", blue_ns, "navy"), module)
        .await;
    assert!(matches!(applied, Applied::Unchanged), "{applied:?}");
    wait_stamp(&apis[1], "green:1").await;
    sup.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_module_reads_its_settings_key_and_bad_settings_are_refused_naming_it() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "settings-tenant";
    let artifacts = TempDir::new("settings-artifacts");
    let (sup, _source) = tenant_host(cp, ns, &artifacts, common::tenants(&["*"])).await;
    let work: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    work.create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    let guest = format!("{ns}/rec/stamp");
    let module = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(wasm("stamp_v1"))
    };
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let delivery: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "rec", "labels": { LABEL: "true" } },
        "binaryData": { "stamp.wasm": module },
        "data": { "stamp.settings.json": r#"{"version": "teal"}"# },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &delivery).await.unwrap();
    wait_stamp(&work, "teal:1").await;

    // A settings edit alone: reloaded with the new settings, nothing compiled.
    let edit = |text: &str| Patch::Merge(json!({ "data": { "stamp.settings.json": text } }));
    cms.patch(
        "rec",
        &PatchParams::default(),
        &edit(r#"{"version": "plum"}"#),
    )
    .await
    .unwrap();
    wait_stamp(&work, "plum:1").await;
    assert_eq!(sup.last_load(&guest).unwrap().0, Duration::ZERO);
    common::wait::wait_event(
        &client,
        ns,
        "rec",
        "ModuleLoaded",
        "the module already serving, with new settings",
        Duration::from_secs(10),
    )
    .await;

    // Settings that are no object: refused, naming the key; plum keeps serving.
    cms.patch("rec", &PatchParams::default(), &edit("[1, 2]"))
        .await
        .unwrap();
    common::wait::wait_event(
        &client,
        ns,
        "rec",
        "ModuleRejected",
        "\"stamp.settings.json\": the settings are an array, not a JSON object",
        Duration::from_secs(10),
    )
    .await;
    wait_until("still serving plum", Duration::from_secs(5), || {
        sup.controller(&guest)
            .is_some_and(|c| c.guest_settings().as_str() == r#"{"version":"plum"}"#)
    })
    .await;
    work.patch(
        "work",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "v": "2" } })),
    )
    .await
    .unwrap();
    wait_stamp(&work, "plum:2").await;
    sup.shutdown().await;
}
