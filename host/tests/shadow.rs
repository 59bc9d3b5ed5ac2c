//! A shadow version with a bug (it stamps `v2:` where the live version stamps `v1:`) runs beside
//! the live one for 100 edits: the live version's results are untouched, nothing the shadow
//! wrote is stored (its writes go out with `dryRun=All`), and `/metrics` and `/status` count
//! the divergences.

mod common;

use std::time::Duration;

use common::host::{SEEN, serve, stamped, supervisor_with};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use reconciled::controller::Settings;
use reconciled::guest::grant::Grant;
use reconciled::ops::status::Status;
use reconciled::supervisor::{Applied, Source};
use testenv::ControlPlane;

const EDITS: usize = 100;
const OBJECTS: usize = 10;

fn counter(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}_total{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buggy_shadow_runs_for_a_hundred_edits_stores_nothing_and_is_counted() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "shadow";
    common::namespace(&admin, ns).await;
    let objects: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    for i in 0..OBJECTS {
        objects
            .create(&PostParams::default(), &stamped(&format!("o{i}"), "0"))
            .await
            .unwrap();
    }

    let sup = supervisor_with(&cp.admin_config(), None);
    let addr = serve(&sup).await;
    let guest = "shadowed";
    let settings = Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new(guest)
    };
    let shadow_path = common::guests::wasm("stamp_v2");
    let settings = sup.with_shadow(settings, Some(&shadow_path)).await;
    assert!(settings.shadow.is_some(), "the shadow compiled");
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let applied = sup
        .apply(
            guest,
            Source::File("stamp_v1.wasm".into()),
            settings,
            module,
        )
        .await;
    assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");

    let mut last = vec![0usize; OBJECTS];
    for edit in 1..=EDITS {
        let i = edit % OBJECTS;
        last[i] = edit;
        let patch = serde_json::json!({"data": {"v": edit.to_string()}});
        objects
            .patch(
                &format!("o{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
        if edit % OBJECTS == 0 {
            // Let the live version keep up, so that edits are not all coalesced into one.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // The live version's results: every object stamped by v1 with its last value.
    common::wait::wait_until_async(
        "every object stamped v1:<last edit>",
        Duration::from_secs(60),
        || {
            let objects = objects.clone();
            let last = last.clone();
            async move {
                for (i, v) in last.iter().enumerate() {
                    let cm = objects.get(&format!("o{i}")).await.unwrap();
                    let seen = cm.metadata.annotations.unwrap_or_default().remove(SEEN);
                    if seen.as_deref() != Some(format!("v1:{v}").as_str()) {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;

    common::wait::wait_until_async(
        "the shadow has diverged on every edit",
        Duration::from_secs(30),
        || async move {
            let (_, body) = reconciled::ops::http::get(addr, "/metrics").await.unwrap();
            counter(&body, "reconciled_shadow_divergences") >= EDITS as f64
        },
    )
    .await;
    let (_, metrics) = reconciled::ops::http::get(addr, "/metrics").await.unwrap();
    let reconciles = counter(&metrics, "reconciled_shadow_reconciles");
    let divergences = counter(&metrics, "reconciled_shadow_divergences");
    eprintln!("shadow: {reconciles} reconciles, {divergences} divergent, after {EDITS} edits");
    assert_eq!(
        reconciles, divergences,
        "v2 stamps differently from v1 on every request"
    );

    // Nothing the shadow wrote is stored: no object ever carries its stamp, and none was
    // written by anything but the live version (its field manager) after the creation.
    for i in 0..OBJECTS {
        let cm = objects.get(&format!("o{i}")).await.unwrap();
        let seen = cm.metadata.annotations.unwrap_or_default().remove(SEEN);
        assert!(
            seen.as_deref().is_some_and(|s| s.starts_with("v1:")),
            "o{i}: {seen:?}"
        );
    }

    let (_, body) = reconciled::ops::http::get(addr, "/status").await.unwrap();
    let status: Status = serde_json::from_str(&body).unwrap();
    let g = status.guests.iter().find(|g| g.name == guest).unwrap();
    let shadow = g.shadow.as_ref().expect("/status shows the shadow");
    assert!(shadow.divergent >= EDITS as u64, "{shadow:?}");
    assert_eq!(shadow.problem, None);
    let last = shadow.last_divergence.as_deref().unwrap_or("");
    assert!(
        last.contains("write") && last.contains("v1/ConfigMap"),
        "the latest divergence names the write: {last}"
    );
    assert_eq!(
        shadow.digest,
        reconciled::guest::digest_of(&std::fs::read(&shadow_path).unwrap())
    );
    sup.shutdown().await;
}
