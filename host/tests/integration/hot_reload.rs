//! Hot reload against the real apiserver: swaps under a stream of updates, bad modules
//! rejected while the old version serves, and guests delivered in ConfigMaps.
//!
//! The guest is `guests/stamp`: it writes `stamp.reconciled.dev/seen = <version>:<data.v>` on
//! every ConfigMap labelled `stamp.reconciled.dev/enabled=true`, so an annotation says which
//! version reconciled which state.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::host::{ENABLED, TempDir, seen_all, stamped, supervisor_with, tenant_host};
use common::namespace;
use common::wait::wait_until;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use reconciled::controller::Settings;
use reconciled::guest::digest_of;
use reconciled::guest::grant::Grant;
use reconciled::guest::wit_version::SERVED;
use reconciled::ops::status::GuestState;
use reconciled::sources::configmap::{ConfigMapSource, LABEL, TenantPolicy};
use reconciled::supervisor::{Applied, Reason, Source, Supervisor};
use testenv::ControlPlane;

fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(common::guests::wasm(name)).unwrap()
}

fn settings(name: &str, ns: &str) -> Settings {
    Settings {
        grant: Grant {
            namespaces: Some([ns.to_string()].into()),
            kinds: Some(["v1/ConfigMap".to_string()].into()),
            uncached_reads: false,
        },
        workers: 2,
        ..Settings::new(name)
    }
}

/// Waits until every ConfigMap in `api` carries `want(name)`.
async fn wait_seen(api: &Api<ConfigMap>, timeout: Duration, want: impl Fn(&str) -> Option<String>) {
    let deadline = Instant::now() + timeout;
    loop {
        let now = seen_all(api).await;
        let wrong: Vec<_> = now
            .iter()
            .filter(|(n, s)| want(n).is_some() && **s != want(n))
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {timeout:?}, {} objects not as expected, e.g. {:?} (want {:?})",
            wrong.len(),
            wrong[0],
            want(wrong[0].0)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn lists(sup: &Supervisor) -> (u64, u64) {
    sup.factory().active().iter().fold((0, 0), |(l, r), i| {
        let s = i.stats();
        (l + s.lists + s.watch_list_syncs, r + s.relists)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_under_a_stream_of_updates_keep_cache_queue_and_order() {
    const OBJECTS: usize = 200;
    const UPDATES: usize = 5000;
    const SWAPS: usize = 20;
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "reload-load";
    namespace(&client, ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for i in 0..OBJECTS {
        api.create(&PostParams::default(), &stamped(&format!("o-{i}"), "0"))
            .await
            .unwrap();
    }
    let (v1, v2) = (wasm("stamp_v1"), wasm("stamp_v2"));
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let loaded = sup
        .apply(
            "stamp",
            Source::File("v1".into()),
            settings("stamp", ns),
            v1.clone(),
        )
        .await;
    assert!(matches!(loaded, Applied::Loaded { .. }), "{loaded:?}");
    wait_seen(&api, Duration::from_secs(60), |_| Some("v1:0".into())).await;
    let controller = sup.controller("stamp").unwrap();
    let after_startup = lists(&sup);

    // Writers: at least UPDATES merge patches spread over the objects, 8 at a time, going on
    // until after the last swap, so that every swap happens under load.
    let next = Arc::new(AtomicUsize::new(0));
    let stop_at = Arc::new(AtomicUsize::new(usize::MAX));
    let writers = (0..8)
        .map(|_| {
            let (api, next, stop_at) = (api.clone(), next.clone(), stop_at.clone());
            tokio::spawn(async move {
                let mut last = BTreeMap::new();
                loop {
                    let u = next.fetch_add(1, Ordering::Relaxed);
                    if u >= stop_at.load(Ordering::Relaxed) {
                        return last;
                    }
                    let name = format!("o-{}", u % OBJECTS);
                    let v = (u + 1).to_string();
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({"data": {"v": v}})),
                    )
                    .await
                    .unwrap();
                    last.insert(name, u + 1);
                }
            })
        })
        .collect::<Vec<_>>();

    // Meanwhile: SWAPS reloads alternating v2, v1, ... (the last is v1 when SWAPS is even).
    let mut versions = Vec::new();
    for s in 0..SWAPS {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (tag, bytes) = if s % 2 == 0 {
            ("v2", v2.clone())
        } else {
            ("v1", v1.clone())
        };
        let before = seen_all(&api).await;
        match sup
            .apply(
                "stamp",
                Source::File(tag.into()),
                settings("stamp", ns),
                bytes,
            )
            .await
        {
            Applied::Reloaded { digest, reload } => {
                assert!(
                    reload.added.is_empty() && reload.released.is_empty(),
                    "{reload:?}"
                );
                assert_eq!(reload.requeued, OBJECTS, "every primary queued once");
                assert_eq!(controller.digest(), digest);
                versions.push((tag, digest));
            }
            other => panic!("swap {s} to {tag}: {other:?}"),
        }
        // Each swap takes effect: some object soon gets a new stamp from the new version
        // (stamps it left two swaps ago do not count).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !seen_all(&api).await.iter().any(|(name, v)| {
            v.as_deref()
                .is_some_and(|v| v.starts_with(&format!("{tag}:")))
                && *v != before[name]
        }) {
            assert!(Instant::now() < deadline, "swap {s}: nothing stamped {tag}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let last_tag = versions.last().unwrap().0;
    let updates_by_last_swap = next.load(Ordering::Relaxed);
    // A few hundred more after the last swap: the last version must see live events too.
    stop_at.store(UPDATES.max(updates_by_last_swap + 200), Ordering::Relaxed);
    let mut last: BTreeMap<String, usize> = BTreeMap::new();
    for w in writers {
        for (name, v) in w.await.unwrap() {
            let e = last.entry(name).or_default();
            *e = (*e).max(v);
        }
    }
    let updates = next.load(Ordering::Relaxed) - 8;
    assert!(updates >= UPDATES && updates_by_last_swap < updates);

    wait_seen(&api, Duration::from_secs(120), |name| {
        Some(format!("{last_tag}:{}", last[name]))
    })
    .await;
    assert_eq!(controller.digest(), digest_of(&v1));
    assert_eq!(
        lists(&sup),
        after_startup,
        "(LISTs, relists) after startup: swaps must not relist"
    );
    assert_eq!(
        controller
            .counters()
            .concurrent_same_key
            .load(Ordering::Relaxed),
        0,
        "a key was reconciled by two workers at once"
    );
    let started = controller.counters().started.load(Ordering::Relaxed);

    // Unloading under load stops the guest at once: no reconcile starts afterwards.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for u in 0..200 {
                let v = format!("after-{u}");
                api.patch(
                    &format!("o-{}", u % OBJECTS),
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"data": {"v": v}})),
                )
                .await
                .unwrap();
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sup.remove("stamp").await);
    let at_removal = controller.counters().started.load(Ordering::Relaxed);
    writer.await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        controller.counters().started.load(Ordering::Relaxed),
        at_removal,
        "a removed guest kept reconciling"
    );
    eprintln!(
        "{updates} updates ({updates_by_last_swap} by the last swap), {SWAPS} swaps: {started} reconciles, LIST/relist counts {after_startup:?} unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_modules_are_rejected_and_the_old_version_keeps_serving() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "reload-bad";
    namespace(&client, ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &stamped("target", "0"))
        .await
        .unwrap();
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let v1 = wasm("stamp_v1");
    let good = sup
        .apply(
            "bad",
            Source::File("v1".into()),
            settings("bad", ns),
            v1.clone(),
        )
        .await;
    assert!(matches!(good, Applied::Loaded { .. }), "{good:?}");
    wait_seen(&api, Duration::from_secs(30), |_| Some("v1:0".into())).await;

    let world = format!("does not fit the reconciled:runtime@{SERVED} `reconciler` world");
    let cases: [(&str, Vec<u8>, Reason, &str); 4] = [
        (
            "not wasm",
            b"#!/bin/sh\necho not a module\n".to_vec(),
            Reason::Invalid,
            "not a valid wasm component",
        ),
        (
            "wrong world",
            wasm("wrong_world"),
            Reason::WrongWorld,
            &world,
        ),
        (
            "trap in describe",
            wasm("stamp_trap"),
            Reason::Describe,
            "describe() refuses on purpose",
        ),
        (
            "beyond its grant",
            wasm("stamp_greedy"),
            Reason::Grant,
            "but its grant",
        ),
    ];
    for (i, (what, bytes, reason, says)) in cases.into_iter().enumerate() {
        let applied = sup
            .apply("bad", Source::File(what.into()), settings("bad", ns), bytes)
            .await;
        match &applied {
            Applied::Rejected { reason: r, message } => {
                assert_eq!(*r, reason, "{what}: {message}");
                assert!(message.contains(says), "{what}: {message}");
            }
            other => panic!("{what} was not rejected: {other:?}"),
        }
        assert!(sup.last_error("bad").unwrap().contains(says));
        // The old version still reconciles.
        let v = (i + 1).to_string();
        api.patch(
            "target",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"v": v}})),
        )
        .await
        .unwrap();
        wait_seen(&api, Duration::from_secs(30), |_| Some(format!("v1:{v}"))).await;
        assert_eq!(sup.controller("bad").unwrap().digest(), digest_of(&v1));
    }
    let metrics = sup.metrics();
    for reason in ["invalid", "wrong-world", "describe", "grant"] {
        let line =
            format!("reconciled_module_rejections_total{{guest=\"bad\",reason=\"{reason}\"}} 1");
        assert!(metrics.contains(&line), "no {line:?} in\n{metrics}");
    }
    let status = sup.status();
    assert_eq!(status.guests[0].state, GuestState::Serving);
    assert_eq!(status.guests[0].rejections, 4);

    // New settings (here, workers) start a fresh controller once the old one has stopped.
    let old = sup.controller("bad").unwrap();
    let wider = Settings {
        workers: 1,
        ..settings("bad", ns)
    };
    let again = sup
        .apply("bad", Source::File("v1".into()), wider, v1.clone())
        .await;
    assert!(matches!(again, Applied::Loaded { .. }), "{again:?}");
    let new = sup.controller("bad").unwrap();
    assert!(!Arc::ptr_eq(&old, &new));
    let old_started = old.counters().started.load(Ordering::Relaxed);
    api.patch(
        "target",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"v": "settings"}})),
    )
    .await
    .unwrap();
    wait_seen(&api, Duration::from_secs(30), |_| {
        Some("v1:settings".into())
    })
    .await;
    assert_eq!(
        old.counters().started.load(Ordering::Relaxed),
        old_started,
        "the replaced controller still reconciles"
    );
    drop((old, new));

    // Unloading releases the guest's informer (nobody else reads this namespace).
    assert!(sup.remove("bad").await);
    let deadline = Instant::now() + Duration::from_secs(30);
    while sup
        .factory()
        .active()
        .iter()
        .any(|i| i.key().scope.to_string().contains(ns))
    {
        assert!(Instant::now() < deadline, "informer not released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sup.controller("bad").is_none());
}

async fn wait_event(client: &kube::Client, ns: &str, cm: &str, reason: &str, says: &str) {
    common::wait::wait_event(client, ns, cm, reason, says, Duration::from_secs(60)).await;
}

fn patch_module(bytes: &[u8]) -> Patch<serde_json::Value> {
    use base64::Engine as _;
    Patch::Merge(serde_json::json!({
        "binaryData": { "rec.wasm": base64::engine::general_purpose::STANDARD.encode(bytes) }
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmaps_deliver_reload_reject_and_unload_tenant_guests() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "team-a";
    let artifacts = TempDir::new("artifacts");
    let (sup, _source) = tenant_host(cp, ns, &artifacts, common::tenants(&["*"])).await;
    let objects: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    objects
        .create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    let guest = "team-a/my-rec/rec";
    let (v1, v2) = (wasm("stamp_v1"), wasm("stamp_v2"));

    // Deliver with kubectl, as a tenant would.
    let module = common::guests::wasm("stamp_v1");
    let kubectl = |args: &[&str]| {
        let out = cp.kubectl().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let from_file = format!("--from-file=rec.wasm={}", module.display());
    kubectl(&["create", "configmap", "my-rec", "-n", ns, &from_file]);
    let labelled = Instant::now();
    kubectl(&[
        "label",
        "configmap",
        "my-rec",
        "-n",
        ns,
        &format!("{LABEL}=true"),
    ]);
    // About 0.3 s alone; the bound is loose because a test beside this one compiling a
    // componentize-py guest holds wasmtime's compile threads for seconds (a latency figure
    // belongs to `bench reload_latency`, not here).
    let took = wait_until("loaded", Duration::from_secs(30), || {
        sup.controller(guest).is_some()
    })
    .await;
    let load_latency = labelled.elapsed();
    eprintln!(
        "ConfigMap to serving: {took:?} after the label ({load_latency:?} including kubectl)"
    );
    assert_eq!(sup.controller(guest).unwrap().digest(), digest_of(&v1));
    wait_seen(&objects, Duration::from_secs(30), |n| {
        (n == "work").then(|| "v1:1".into())
    })
    .await;
    wait_event(&client, ns, "my-rec", "ModuleLoaded", &digest_of(&v1)).await;

    // Editing the ConfigMap reloads.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.patch("my-rec", &PatchParams::default(), &patch_module(&v2))
        .await
        .unwrap();
    wait_until("reloaded to v2", Duration::from_secs(60), || {
        sup.controller(guest)
            .is_some_and(|c| c.digest() == digest_of(&v2))
    })
    .await;
    wait_seen(&objects, Duration::from_secs(30), |n| {
        (n == "work").then(|| "v2:1".into())
    })
    .await;

    // A bad module is rejected with an Event on the ConfigMap; v2 keeps serving.
    cms.patch("my-rec", &PatchParams::default(), &patch_module(b"garbage"))
        .await
        .unwrap();
    wait_event(
        &client,
        ns,
        "my-rec",
        "ModuleRejected",
        "not a valid wasm component",
    )
    .await;
    // A tenant guest may not reach outside its namespace.
    cms.patch(
        "my-rec",
        &PatchParams::default(),
        &patch_module(&wasm("stamp_greedy")),
    )
    .await
    .unwrap();
    wait_event(&client, ns, "my-rec", "ModuleRejected", "kube-system").await;
    assert_eq!(sup.controller(guest).unwrap().digest(), digest_of(&v2));
    objects
        .patch(
            "work",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    wait_seen(&objects, Duration::from_secs(30), |n| {
        (n == "work").then(|| "v2:2".into())
    })
    .await;

    // Gzipped under a .wasm.gz key: the same guest, reloaded to v1.
    let gz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut e, &v1).unwrap();
        e.finish().unwrap()
    };
    {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&gz);
        cms.patch(
            "my-rec",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"binaryData": {"rec.wasm": null, "rec.wasm.gz": b64}}),
            ),
        )
        .await
        .unwrap();
    }
    wait_until("reloaded from .wasm.gz", Duration::from_secs(60), || {
        sup.controller(guest)
            .is_some_and(|c| c.digest() == digest_of(&v1))
    })
    .await;

    // Removing the label unloads; putting it back loads again.
    kubectl(&[
        "label",
        "configmap",
        "my-rec",
        "-n",
        ns,
        &format!("{LABEL}-"),
    ]);
    wait_until("unloaded by label removal", Duration::from_secs(30), || {
        sup.controller(guest).is_none()
    })
    .await;
    kubectl(&[
        "label",
        "configmap",
        "my-rec",
        "-n",
        ns,
        &format!("{LABEL}=true"),
    ]);
    wait_until("loaded again", Duration::from_secs(60), || {
        sup.controller(guest).is_some()
    })
    .await;

    // Deleting the ConfigMap unloads the guest and releases its informer.
    kubectl(&["delete", "configmap", "my-rec", "-n", ns]);
    wait_until("unloaded", Duration::from_secs(30), || {
        sup.controller(guest).is_none() && !sup.names().contains(&guest.to_string())
    })
    .await;
    wait_until("informer released", Duration::from_secs(30), || {
        !sup.factory().active().iter().any(|i| {
            i.key().kind == "ConfigMap" && i.key().scope.to_string().contains("labels=stamp")
        })
    })
    .await;
    wait_event(&client, ns, "my-rec", "ModuleUnloaded", guest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_guest_cannot_watch_a_cluster_scoped_kind() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "team-c";
    common::tenant_namespace(cp, ns).await;
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let _source = ConfigMapSource::start(
        sup.factory(),
        sup.clone(),
        common::only(&[ns], common::tenants(&["*"])),
    )
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let packed =
        reconciled::sources::configmap::pack(ns, "nosy", "rec", &wasm("stamp_cluster")).unwrap();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(packed).unwrap(),
    )
    .await
    .unwrap();
    wait_event(&client, ns, "nosy", "ModuleRejected", "cluster-scoped").await;
    let guest = "team-c/nosy/rec";
    assert!(sup.controller(guest).is_none());
    assert!(sup.last_error(guest).unwrap().contains("v1/Namespace"));
    // Nothing watches Namespaces on its behalf, and the host stays ready.
    wait_until("informer released", Duration::from_secs(30), || {
        !sup.factory()
            .active()
            .iter()
            .any(|i| i.key().kind == "Namespace")
    })
    .await;
    assert_eq!(sup.readiness(), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_declaration_starts_new_informers_releases_old_ones_and_keeps_shared_ones() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "reload-decl";
    namespace(&client, ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &stamped("work", "1"))
        .await
        .unwrap();
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let open = |name: &str| Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new(name)
    };
    // "other" holds the stamp-labelled ConfigMap informer throughout.
    let (stamp, probe) = (wasm("stamp_v1"), wasm("probe"));
    for name in ["a", "other"] {
        let r = sup
            .apply(
                name,
                Source::File("stamp".into()),
                open(name),
                stamp.clone(),
            )
            .await;
        assert!(matches!(r, Applied::Loaded { .. }), "{r:?}");
    }
    wait_seen(&api, Duration::from_secs(30), |_| Some("v1:1".into())).await;
    let kinds = |sup: &Supervisor| {
        let mut k: Vec<String> = sup
            .factory()
            .active()
            .iter()
            .map(|i| format!("{} {}", i.key().kind, i.key().scope))
            .collect();
        k.sort();
        k
    };
    let stamp_informer = format!("ConfigMap ns={ns} labels={ENABLED}=true");
    assert_eq!(kinds(&sup), vec![stamp_informer.clone()]);
    let before = lists(&sup);

    // stamp → probe: probe reads every ConfigMap, ServiceAccounts and Pods.
    match sup
        .apply("a", Source::File("probe".into()), open("a"), probe.clone())
        .await
    {
        Applied::Reloaded { reload, .. } => {
            let mut added = reload.added.clone();
            added.sort();
            assert_eq!(
                added,
                vec!["v1/ConfigMap", "v1/Pod", "v1/ServiceAccount"],
                "{reload:?}"
            );
            assert_eq!(reload.released, vec!["v1/ConfigMap"], "{reload:?}");
        }
        other => panic!("{other:?}"),
    }
    // The shared informer stayed (held by "other") and was not relisted; the new ones synced.
    let now = kinds(&sup);
    assert!(now.contains(&stamp_informer), "{now:?}");
    assert_eq!(now.len(), 4, "{now:?}");
    let stamp_stats = sup
        .factory()
        .active()
        .into_iter()
        .find(|i| i.key().scope.to_string().contains("labels="))
        .unwrap()
        .stats();
    assert_eq!(stamp_stats.relists, 0);
    assert_eq!(
        lists(&sup).0 - before.0,
        3,
        "one initial LIST (or watch-list sync) per new informer, nothing else"
    );
    // The probe now reconciles `work` (it reports `seen:<data.v>`).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = api
            .get("work")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default();
        if got.get("probe.reconciled.dev/result").map(String::as_str) == Some("seen:1") {
            break;
        }
        assert!(Instant::now() < deadline, "{got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Unloading "other" and swapping "a" back to stamp releases what only probe read.
    assert!(sup.remove("other").await);
    let r = sup
        .apply("a", Source::File("stamp".into()), open("a"), stamp.clone())
        .await;
    let Applied::Reloaded { reload, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(reload.added, vec!["v1/ConfigMap"]);
    assert_eq!(reload.released.len(), 3, "{reload:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while kinds(&sup) != vec![stamp_informer.clone()] {
        assert!(Instant::now() < deadline, "{:?}", kinds(&sup));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_may_not_watch_configmaps_is_not_ready_and_says_which_rule_to_add() {
    let cp = ControlPlane::shared();
    let user = cp.user("host-without-configmaps", &[]).unwrap();
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&user.config, Some(&artifacts));
    let _source =
        ConfigMapSource::start(sup.factory(), sup.clone(), common::tenants(&["*"])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let reasons = loop {
        match sup.readiness() {
            Err(r) if r.iter().any(|r| r.contains("forbidden")) => break r,
            other => {
                assert!(Instant::now() < deadline, "{other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    let r = &reasons[0];
    assert!(
        r.starts_with("informer v1/ConfigMap (ns=* labels=reconciled.dev/reconciler=true)")
            && r.contains(r#"resources:["configmaps"], verbs:["list","watch"]"#),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_get_a_guest_quota_and_rapid_edits_collapse_into_one_load() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "team-q";
    common::tenant_namespace(cp, ns).await;
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let policy = TenantPolicy {
        max_guests_per_namespace: 1,
        // Longer than five patches take on a loaded machine, so that they fall in one interval.
        min_reload_interval_ms: 5000,
        ..common::only(&[ns], common::tenants(&["*"]))
    };
    let _source = ConfigMapSource::start(sup.factory(), sup.clone(), policy).unwrap();
    let (v1, v2) = (wasm("stamp_v1"), wasm("stamp_v2"));
    let b64 = |b: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(b)
    };
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "two", "labels": {LABEL: "true"}},
        "binaryData": {"a.wasm": b64(&v1), "b.wasm": b64(&v1)},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    wait_until("a loaded", Duration::from_secs(30), || {
        sup.controller("team-q/two/a").is_some()
    })
    .await;
    wait_event(
        &client,
        ns,
        "two",
        "ModuleRejected",
        "tenants.max_guests_per_namespace",
    )
    .await;
    assert!(sup.controller("team-q/two/b").is_none());

    // Five edits within one interval: one more load, of the last bytes.
    let loads = |sup: &Supervisor| sup.status().guest("team-q/two/a").map(|g| g.loads);
    assert_eq!(loads(&sup), Some(1));
    let mut last = Vec::new();
    for i in 0..5u8 {
        // Distinct bytes: v1 or v2 plus a custom section that names the edit.
        let mut module = if i % 2 == 0 { v2.clone() } else { v1.clone() };
        module.extend_from_slice(&[0, 6, 5, b'e', b'd', b'i', b't', i]);
        cms.patch(
            "two",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"binaryData": {"a.wasm": b64(&module)}})),
        )
        .await
        .unwrap();
        last = module;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let digest = digest_of(&last);
    wait_until(
        "the last edit serving, and no load on its way",
        Duration::from_secs(40),
        || {
            sup.controller("team-q/two/a")
                .is_some_and(|c| c.digest() == digest)
                && !sup.loading("team-q/two/a")
        },
    )
    .await;
    let n = loads(&sup).unwrap();
    // The first edit loads at once when the first load is an interval old by then; the rest
    // collapse into one.
    assert!((2..=3).contains(&n), "{n} loads for 5 edits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_configmap_without_a_module_shows_in_status_until_it_goes() {
    let cp = ControlPlane::shared();
    let client = cp.admin_client();
    let ns = "team-empty";
    common::tenant_namespace(cp, ns).await;
    let artifacts = TempDir::new("artifacts");
    let sup = supervisor_with(&cp.admin_config(), Some(&artifacts));
    let _source = ConfigMapSource::start(
        sup.factory(),
        sup.clone(),
        common::only(&[ns], common::tenants(&["*"])),
    )
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut empty = stamped("nothing", "1");
    empty.metadata.labels = Some([(LABEL.to_string(), "true".to_string())].into());
    cms.create(&PostParams::default(), &empty).await.unwrap();

    let problem = |sup: &Supervisor| {
        sup.status()
            .sources_without_guests
            .into_iter()
            .find(|p| p.source == format!("configmap {ns}/nothing"))
    };
    wait_until("shown in /status", Duration::from_secs(10), || {
        problem(&sup).is_some()
    })
    .await;
    let shown = problem(&sup).unwrap();
    assert!(
        shown.problem.contains("no binaryData key ending in .wasm"),
        "it says what to do: {shown:?}"
    );
    assert!(
        sup.status()
            .table()
            .contains("sources that deliver no guest"),
        "reconciled status shows it too"
    );
    wait_event(&client, ns, "nothing", "NoModule", "delivers no module").await;

    cms.delete("nothing", &Default::default()).await.unwrap();
    wait_until("gone from /status", Duration::from_secs(10), || {
        problem(&sup).is_none()
    })
    .await;
}
