//! A shadow version with a bug (it stamps `v2:` where the live version stamps `v1:`) runs beside
//! the live one for 100 edits: the live version's results are untouched, nothing the shadow
//! wrote is stored (its writes go out with `dryRun=All`), and `/metrics` and `/status` count
//! the divergences.

use crate::common;

use std::time::Duration;

use common::host::{SEEN, serve, stamped, supervisor_with, watch_stamps};
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
    assert!(
        settings.shadow.as_ref().is_some_and(|s| s.0.is_ok()),
        "the shadow compiled"
    );
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

    // Every version of every object, as the API server stored it, from before the first edit.
    let stamps = watch_stamps(&objects).await;

    // Each edit waits for the live version's stamp of it, so that no two edits coalesce into
    // one reconcile however loaded the machine is: every edit is one request to compare.
    let mut last = vec![0usize; OBJECTS];
    for edit in 1..=EDITS {
        let i = edit % OBJECTS;
        last[i] = edit;
        let (name, patch) = (
            format!("o{i}"),
            serde_json::json!({"data": {"v": edit.to_string()}}),
        );
        (objects.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
            .await
            .unwrap();
        let stamp = format!("v1:{edit}");
        common::wait::wait_until(
            &format!("the live version stamps {name} {stamp}"),
            Duration::from_secs(30),
            || stamps.saw(&name, &stamp),
        )
        .await;
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

    // A shadow reconcile is counted when it returns and its divergence once the live one has
    // returned too: wait for both counts to settle, so that one scrape does not fall between.
    common::wait::wait_until_async(
        "the shadow has diverged on every edit, and every reconcile of it is compared",
        Duration::from_secs(30),
        || async move {
            let (_, body) = reconciled::ops::http::get(addr, "/metrics").await.unwrap();
            let divergences = counter(&body, "reconciled_shadow_divergences");
            divergences >= EDITS as f64
                && counter(&body, "reconciled_shadow_reconciles") == divergences
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

    // Nothing the shadow wrote is stored: of every version the API server stored and sent to a
    // watch, none carries the shadow's stamp.
    let stamps = stamps.all();
    let live = stamps.iter().filter(|s| s.starts_with("v1:")).count();
    assert!(
        live >= EDITS,
        "the watch saw the live version's stamps: {live} of {}",
        stamps.len()
    );
    assert!(
        !stamps.iter().any(|s| s.starts_with("v2:")),
        "a version stored with the shadow's stamp: {stamps:?}"
    );

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

    // A shadow that cannot load: the live version runs, and /status says why the shadow does not.
    let broken = "broken-shadow";
    let settings = Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new(broken)
    };
    let missing = std::path::Path::new("/nonexistent/shadow.wasm");
    let settings = sup.with_shadow(settings, Some(missing)).await;
    let module = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let applied = sup
        .apply(
            broken,
            Source::File("stamp_v1.wasm".into()),
            settings,
            module,
        )
        .await;
    assert!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");
    let (_, body) = reconciled::ops::http::get(addr, "/status").await.unwrap();
    let status: Status = serde_json::from_str(&body).unwrap();
    let g = status.guests.iter().find(|g| g.name == broken).unwrap();
    let problem = g.shadow.as_ref().and_then(|s| s.problem.clone());
    assert!(
        problem
            .as_deref()
            .is_some_and(|p| p.contains("cannot read the shadow module /nonexistent/shadow.wasm")),
        "{problem:?}"
    );
    sup.shutdown().await;
}
