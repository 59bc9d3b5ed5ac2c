//! Reconcilers as Kubernetes objects, end to end against the real API server and a real
//! registry: a tenant applies a `Reconciler` and the host runs it, records each version it
//! serves as a `ReconcilerRevision`, prunes them to the limit, rolls back to a pinned one without
//! the registry, writes the status (`kubectl get reconcilers`), refuses what the policy does not
//! allow with a condition and one Event while the version serving keeps serving, and among
//! replicas writes status and Events from the shard's owner only.
//!
//! The guests are `guests/stamp` (which stamps `<settings.version>:<data.v>` when its settings
//! name a version) and the stamp built against `reconciled:runtime@0.1.0` that `guests/compat/`
//! keeps (`wit-0.1.0:<data.v>`): two modules, two digests.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::host::{TempDir, seen_all, stamped, supervisor_options, supervisor_with};
use common::reconcilers::{
    api, apply, condition, is, message_of, module_configmap, options, policy, wait_status,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use reconciled::guest::digest_of;
use reconciled::sources::configmap::ConfigMapSource;
use reconciled::sources::oci::{Registry, Settings as RegistrySettings};
use reconciled::sources::reconciler::ReconcilerSource;
use reconciled::supervisor::Supervisor;
use serde_json::{Value, json};
use testenv::ControlPlane;
use testenv::registry::Registry as TestRegistry;

/// The revisions in `ns`, as (number, digest), sorted.
async fn revisions(client: &kube::Client, ns: &str) -> Vec<(u64, String)> {
    let mut all: Vec<(u64, String)> = api(client, ns, "ReconcilerRevision")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| {
            (
                r.data["spec"]["revision"].as_u64().unwrap(),
                r.data["spec"]["digest"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    all.sort();
    all
}

/// Waits until `work` in `cms` is stamped `want`.
async fn wait_stamp(cms: &Api<ConfigMap>, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = seen_all(cms).await.remove("work").flatten();
        if seen.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "wanted stamp {want}, saw {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`tenant`], with `stamp_v1` in the unlabelled ConfigMap `mods`, key `stamp.wasm`; returns
/// the module too.
async fn tenant_with_module(cp: &ControlPlane, ns: &str) -> (Api<ConfigMap>, Vec<u8>) {
    let cms = tenant(cp, ns).await;
    let stamp = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    cms.create(
        &PostParams::default(),
        &module_configmap("mods", "stamp.wasm", &stamp, false),
    )
    .await
    .unwrap();
    (cms, stamp)
}

/// A tenant namespace with the CRDs installed and a `work` ConfigMap for `stamp` to stamp.
async fn tenant(cp: &ControlPlane, ns: &str) -> Api<ConfigMap> {
    common::reconciler_crds(cp);
    common::tenant_namespace(cp, ns).await;
    let cms = Api::<ConfigMap>::namespaced(cp.admin_client(), ns);
    cms.create(&PostParams::default(), &stamped("work", "x"))
        .await
        .unwrap();
    cms
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_serves_from_a_registry_records_its_revisions_and_rolls_back_without_it() {
    let cp = ControlPlane::shared();
    let ns = "rec-revisions";
    let cms = tenant(cp, ns).await;
    let admin = cp.admin_client();
    let reg = TestRegistry::start().unwrap();
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &common::registry_login(reg.dockerconfigjson()),
        )
        .await
        .unwrap();
    let client = Arc::new(
        Registry::new(RegistrySettings {
            ca_file: Some(reg.ca_file()),
            poll_interval_ms: 300,
            ..RegistrySettings::default()
        })
        .unwrap(),
    );
    let me = reconciled::sources::oci::credentials::Login {
        username: reg.user().into(),
        password: reg.password().into(),
    };
    let live = format!("{}/team/stamp:live", reg.host());
    let push = async |bytes: Vec<u8>| {
        client
            .push(&live.parse().unwrap(), Some(&me), bytes, None)
            .await
            .unwrap()
    };
    let (stamp, frozen) = (
        std::fs::read(common::guests::wasm("stamp_v1")).unwrap(),
        common::guests::compat("0.1.0"),
    );
    push(stamp.clone()).await;

    let dir = TempDir::new("rec-revisions");
    let sup = supervisor_with(&cp.admin_config(), Some(&dir));
    let source = ReconcilerSource::start(
        sup.factory(),
        sup.clone(),
        policy(ns, &[reg.host()]),
        client.clone(),
        options(),
    )
    .unwrap();
    let reconcilers = api(&admin, ns, "Reconciler");
    let spec = |settings: Value| {
        json!({
            "module": { "image": live, "pullSecret": "registry-login" },
            "settings": settings,
            "revisionHistoryLimit": 1,
        })
    };
    apply(&reconcilers, "stamp", spec(json!({ "version": "one" }))).await;
    let status = wait_status(&reconcilers, "stamp", "Ready with revision 1", |s| {
        is(s, "Ready", "True", "Serving") && s["currentRevision"] == 1
    })
    .await;
    assert!(is(&status, "Accepted", "True", "Valid"), "{status:#}");
    assert_eq!(status["digest"], digest_of(&stamp));
    assert!(
        status.get("owner").is_none(),
        "a host without replicas names no owner"
    );
    wait_stamp(&cms, "one:x").await;
    let out = cp
        .kubectl()
        .args(["get", "reconcilers", "-n", ns, "-o", "wide"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["stamp", "True", "1"], "{table}");
    assert!(
        table.contains(&digest_of(&stamp)),
        "DIGEST with -o wide: {table}"
    );

    // New settings: revision 2, the same module reloaded without a compile.
    let compiled_before = sup.last_load(&format!("{ns}/stamp")).unwrap();
    apply(&reconcilers, "stamp", spec(json!({ "version": "two" }))).await;
    wait_stamp(&cms, "two:x").await;
    wait_status(&reconcilers, "stamp", "revision 2", |s| {
        s["currentRevision"] == 2 && s["observedGeneration"] == 2
    })
    .await;
    let (compile, _, origin) = sup.last_load(&format!("{ns}/stamp")).unwrap();
    assert!(
        origin != reconciled::guest::artifact_cache::Origin::Compiled,
        "a settings edit compiles nothing: {origin:?} in {compile:?} (before: {compiled_before:?})"
    );

    // A new digest behind the tag: revision 3; history capped at 1 beside the one serving.
    push(frozen.clone()).await;
    wait_stamp(&cms, "wit-0.1.0:x").await;
    wait_status(&reconcilers, "stamp", "revision 3", |s| {
        s["currentRevision"] == 3
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut kept = revisions(&admin, ns).await;
    while kept.len() != 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        kept = revisions(&admin, ns).await;
    }
    assert_eq!(
        kept,
        [(2, digest_of(&stamp)), (3, digest_of(&frozen))],
        "revision 1 pruned by revisionHistoryLimit: 1"
    );

    // The registry goes away; pinning revision 2 still works, from the host's copy.
    drop(reg);
    let mut pinned = spec(json!({ "version": "two" }));
    pinned["revision"] = json!(2);
    apply(&reconcilers, "stamp", pinned.clone()).await;
    wait_stamp(&cms, "two:x").await;
    let status = wait_status(&reconcilers, "stamp", "back on revision 2", |s| {
        s["currentRevision"] == 2 && is(s, "Ready", "True", "Serving")
    })
    .await;
    assert_eq!(status["digest"], digest_of(&stamp), "{status:#}");

    // A revision that is gone: refused, with one Event, and revision 2 keeps serving.
    pinned["revision"] = json!(1);
    apply(&reconcilers, "stamp", pinned).await;
    let status = wait_status(&reconcilers, "stamp", "NoSuchRevision", |s| {
        is(s, "Accepted", "False", "NoSuchRevision")
    })
    .await;
    let message = message_of(&status, "Accepted");
    assert!(
        message.contains("it has [2, 3]") && message.ends_with("revision 2 keeps serving"),
        "{message}"
    );
    assert!(is(&status, "Ready", "True", "Serving"), "{status:#}");
    common::wait::wait_event(
        &admin,
        ns,
        "stamp",
        "NoSuchRevision",
        "spec.revision 1",
        Duration::from_secs(30),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refusals = common::wait::events(&admin, ns, "stamp")
        .await
        .into_iter()
        .filter(|(r, _)| r == "NoSuchRevision")
        .count();
    assert_eq!(refusals, 1, "one Event per refusal");
    assert_eq!(
        sup.controller(&format!("{ns}/stamp")).unwrap().digest(),
        digest_of(&stamp)
    );

    // Deleted: the guest unloads, and the revisions go with their owner (garbage collection).
    reconcilers
        .delete("stamp", &DeleteParams::default())
        .await
        .unwrap();
    common::wait::wait_until("the guest unloads", Duration::from_secs(30), || {
        sup.controller(&format!("{ns}/stamp")).is_none()
    })
    .await;
    drop(source);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reconcilers_get_a_condition_and_one_event_and_change_nothing_that_serves() {
    let cp = ControlPlane::shared();
    let ns = "rec-refusals";
    let (cms, stamp) = tenant_with_module(cp, ns).await;
    let admin = cp.admin_client();
    cms.create(
        &PostParams::default(),
        &module_configmap("clash", "rec.wasm", &stamp, true),
    )
    .await
    .unwrap();
    let dir = TempDir::new("rec-refusals");
    let sup = supervisor_with(&cp.admin_config(), Some(&dir));
    let policy = policy(ns, &["r.example"]);
    let _configmaps = ConfigMapSource::start(sup.factory(), sup.clone(), policy.clone()).unwrap();
    let _reconcilers = ReconcilerSource::start(
        sup.factory(),
        sup.clone(),
        policy,
        Arc::new(Registry::default()),
        options(),
    )
    .unwrap();
    let reconcilers = api(&admin, ns, "Reconciler");

    // From a ConfigMap key, read as the ServiceAccount; more workers than the policy allows.
    let good = json!({
        "module": { "configMapRef": { "name": "mods", "key": "stamp.wasm" } },
        "settings": { "version": "cm" },
        "workers": 8,
    });
    apply(&reconcilers, "good", good.clone()).await;
    let status = wait_status(&reconcilers, "good", "Ready", |s| {
        is(s, "Ready", "True", "Serving")
    })
    .await;
    let accepted = condition(&status, "Accepted").unwrap();
    assert_eq!(accepted["reason"], "Clamped", "{status:#}");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("workers 8 → 2"),
        "{accepted}"
    );
    wait_stamp(&cms, "cm:x").await;
    let serving = digest_of(&stamp);

    // Each bad edit: Accepted=False with its reason, one Event, and the guest as it was.
    for (edit, reason, says) in [(
        json!({ "module": { "image": "evil.example/x:1", "configMapRef": null } }),
        "RegistryNotAllowed",
        "registry evil.example is not one tenants may pull from",
    )] {
        let mut spec = good.clone();
        for (k, v) in edit.as_object().unwrap() {
            spec[k] = v.clone();
        }
        if spec["module"]["configMapRef"].is_null() {
            spec["module"]
                .as_object_mut()
                .unwrap()
                .remove("configMapRef");
        }
        apply(&reconcilers, "good", spec).await;
        let status = wait_status(&reconcilers, "good", reason, |s| {
            is(s, "Accepted", "False", reason)
        })
        .await;
        let message = message_of(&status, "Accepted");
        assert!(message.contains(says), "{message}");
        assert!(
            is(&status, "Ready", "True", "Serving"),
            "the older version serves: {status:#}"
        );
        common::wait::wait_event(&admin, ns, "good", reason, says, Duration::from_secs(30)).await;
        assert_eq!(
            sup.controller(&format!("{ns}/good")).unwrap().digest(),
            serving
        );
    }
    apply(&reconcilers, "good", good.clone()).await;
    wait_status(&reconcilers, "good", "accepted again", |s| {
        is(s, "Accepted", "True", "Clamped")
    })
    .await;

    // A ServiceAccount that may not read what the guest reads: the new version is rejected,
    // saying so, and the one serving keeps serving.
    let mut stranger = good.clone();
    stranger["serviceAccountName"] = json!("someone-else");
    apply(&reconcilers, "good", stranger).await;
    let status = wait_status(
        &reconcilers,
        "good",
        "the stranger's version rejected",
        |s| is(s, "Degraded", "True", "NewVersionRejected"),
    )
    .await;
    let message = message_of(&status, "Degraded");
    assert!(message.contains("someone-else"), "{message}");
    assert!(is(&status, "Ready", "True", "Serving"), "{status:#}");
    assert_eq!(
        sup.controller(&format!("{ns}/good")).unwrap().digest(),
        serving
    );
    apply(&reconcilers, "good", good.clone()).await;
    wait_status(&reconcilers, "good", "healthy again", |s| {
        is(s, "Degraded", "False", "AsExpected")
    })
    .await;

    // A labelled ConfigMap already delivers under the name: refused, naming both.
    apply(
        &reconcilers,
        "clash",
        json!({ "module": { "configMapRef": { "name": "mods", "key": "stamp.wasm" } } }),
    )
    .await;
    let status = wait_status(&reconcilers, "clash", "NameTaken", |s| {
        is(s, "Accepted", "False", "NameTaken")
    })
    .await;
    let message = message_of(&status, "Accepted");
    assert!(
        message.contains(&format!(
            "Reconciler {ns}/clash and the labelled ConfigMap {ns}/clash"
        )),
        "{message}"
    );
    assert!(is(&status, "Ready", "False", "NotAccepted"), "{status:#}");
    common::wait::wait_event(
        &admin,
        ns,
        "clash",
        "NameTaken",
        "this ConfigMap's guests serve on",
        Duration::from_secs(30),
    )
    .await;
    // The ConfigMap's guest serves on (its own load may still be under way).
    common::host::wait_serving(&sup, &format!("{ns}/clash/rec"), Duration::from_secs(60)).await;

    // Suspend unloads; resume loads again.
    let mut suspended = good.clone();
    suspended["suspend"] = json!(true);
    apply(&reconcilers, "good", suspended).await;
    wait_status(&reconcilers, "good", "Suspended", |s| {
        is(s, "Ready", "False", "Suspended")
    })
    .await;
    common::wait::wait_until(
        "the suspended guest unloads",
        Duration::from_secs(30),
        || sup.controller(&format!("{ns}/good")).is_none(),
    )
    .await;
    apply(&reconcilers, "good", good).await;
    wait_status(&reconcilers, "good", "Ready again", |s| {
        is(s, "Ready", "True", "Serving")
    })
    .await;

    // A module edit in the ConfigMap reloads it.
    let frozen = common::guests::compat("0.1.0");
    cms.replace("mods", &PostParams::default(), &{
        let mut cm = module_configmap("mods", "stamp.wasm", &frozen, false);
        cm.metadata.resource_version = cms.get("mods").await.unwrap().metadata.resource_version;
        cm
    })
    .await
    .unwrap();
    wait_stamp(&cms, "wit-0.1.0:x").await;

    // Deleted while its module loads: unloads cleanly, nothing left behind.
    apply(
        &reconcilers,
        "brief",
        json!({ "module": { "configMapRef": { "name": "mods", "key": "stamp.wasm" } } }),
    )
    .await;
    reconcilers
        .delete("brief", &DeleteParams::default())
        .await
        .unwrap();
    // Time for the load to start, then for it to be undone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    common::wait::wait_until("brief unloaded", Duration::from_secs(30), || {
        sup.controller(&format!("{ns}/brief")).is_none() && !sup.loading(&format!("{ns}/brief"))
    })
    .await;
}

/// Two replicas in this process share one Reconciler: the shard's holder names itself as the
/// owner and is the only one to write status and post Events; the other keeps it warm, standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn among_replicas_only_the_owner_writes_status_and_posts_events() {
    let cp = ControlPlane::shared();
    let ns = "rec-replicas";
    let (cms, _) = tenant_with_module(cp, ns).await;
    let admin = cp.admin_client();
    let leases = "rec-replicas-leases";
    common::namespace(&admin, leases).await;
    let mut hosts: Vec<(Arc<Supervisor>, ReconcilerSource, TempDir)> = Vec::new();
    for id in ["ra", "rb"] {
        let mut config = reconciled::replicas::Config::new(id, leases);
        config.group = "recrep".into();
        config.shards = 2;
        config.lease_duration = Duration::from_secs(3);
        config.renew_deadline = Duration::from_secs(2);
        config.retry_period = Duration::from_millis(500);
        config.rebalance_after = Duration::from_secs(2);
        let replicas = Arc::new(
            reconciled::replicas::Replicas::start(admin.clone(), config)
                .await
                .unwrap(),
        );
        let dir = TempDir::new(&format!("rec-replicas-{id}"));
        let sup = supervisor_options(
            &cp.admin_config(),
            Some(&dir),
            reconciled::supervisor::Options {
                replicas: Some(replicas),
                ..Default::default()
            },
        );
        let source = common::reconcilers::source(&sup, ns);
        hosts.push((sup, source, dir));
    }
    // Settled first: a shard that moved after the load would be loaded, and announced, again.
    // The plan may give both shards to one replica: settled is each shard held as planned.
    common::wait::wait_until(
        "the replicas see each other and hold every shard as planned",
        Duration::from_secs(60),
        || {
            hosts.iter().all(|(sup, _, _)| {
                sup.replicas().is_some_and(|r| {
                    let s = r.snapshot();
                    s.members.len() == 2
                        && (s.shards.iter()).all(|v| v.holder.is_some() && v.holder == v.planned)
                })
            })
        },
    )
    .await;
    let reconcilers = api(&admin, ns, "Reconciler");
    apply(
        &reconcilers,
        "shared",
        json!({ "module": { "configMapRef": { "name": "mods", "key": "stamp.wasm" } }, "settings": { "version": "r" } }),
    )
    .await;
    let status = wait_status(&reconcilers, "shared", "Ready with an owner", |s| {
        is(s, "Ready", "True", "Serving") && s["owner"].is_string() && s["currentRevision"] == 1
    })
    .await;
    let owner = status["owner"].as_str().unwrap().to_string();
    eprintln!("owner {owner}, shard {}", status["shard"]);
    wait_stamp(&cms, "r:x").await;
    let guest = format!("{ns}/shared");
    // The other replica compiles the module on its own, so it may still be loading.
    common::wait::wait_until(
        "the other replica keeps the guest warm, standby",
        Duration::from_secs(60),
        || {
            hosts.iter().any(|(sup, _, _)| {
                sup.guest_status(&guest).is_some_and(|g| {
                    g.owner.as_deref() == Some(owner.as_str())
                        && g.state == reconciled::ops::status::GuestState::Standby
                })
            })
        },
    )
    .await;

    // Status has one writer: the owner's field manager is the only one on it.
    let object = reconcilers.get("shared").await.unwrap();
    let managers: Vec<String> = object
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .map(|m| m.manager.unwrap_or_default())
        .collect();
    assert_eq!(managers, ["reconciled"], "{managers:?}");
    assert_eq!(
        revisions(&admin, ns).await.len(),
        1,
        "one revision, recorded once"
    );

    // One ModuleLoaded Event, though both replicas loaded the module: the owner's is posted in
    // the background, and a second one would come within a few seconds.
    let timeout = Duration::from_secs(30);
    common::wait::wait_event(&admin, ns, "shared", "ModuleLoaded", "", timeout).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let loaded = common::wait::events(&admin, ns, "shared")
        .await
        .into_iter()
        .filter(|(r, _)| r == "ModuleLoaded")
        .count();
    assert_eq!(loaded, 1, "posted by the owner only");
    for (sup, source, _) in hosts {
        drop(source);
        sup.shutdown().await;
        if let Some(r) = sup.replicas() {
            r.shutdown().await;
        }
    }
}
