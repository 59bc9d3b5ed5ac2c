//! Progressive rollout of a Reconciler's new revision, end to end against the real API server:
//! a revision that fails a share of its keys is rolled back within its first canary step,
//! having written only to keys of that step's share and nothing after the fence, and a module
//! rejected after it is what the status says; a revision whose writes differ is caught by its
//! shadow step without writing at all; a good revision that stamps its own version goes from a
//! shadow step that ignores the stamp through two canary shares to every key, no key ever
//! running on two revisions at once; a canary step with no live change waits for traffic and
//! says so; a rollout survives its host: a replica taking over, a fresh host, the same module
//! with new settings.
//!
//! The guests are builds of `guests/stamp`: `stamp_v1` and `stamp_v2` stamp `v1:<data.v>` and
//! `v2:<data.v>`, or `<settings.version>:<data.v>` when their settings name a version, and fail
//! the reconcile of about `settings.fail_percent` of the names.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::host::{TempDir, seen_all, stamped, supervisor_options, supervisor_with, watch_stamps};
use common::reconcilers::{api, apply, is, module_configmap, wait_status};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use reconciled::guest::digest_of;
use reconciled::rollout::progress::{Phase, Progress};
use reconciled::rollout::share::in_share;
use reconciled::sources::reconciler::ReconcilerSource;
use reconciled::supervisor::Supervisor;
use serde_json::{Value, json};
use testenv::ControlPlane;

/// Objects the reconciler stamps: enough that a 10% share holds several.
const OBJECTS: usize = 100;

/// A tenant namespace serving Reconcilers, with `OBJECTS` objects to stamp and the two builds
/// of stamp in ConfigMaps `mod-v1` and `mod-v2` (key `stamp.wasm`).
struct Scene {
    ns: &'static str,
    /// One host, or one per replica.
    hosts: Vec<Host>,
    reconcilers: Api<DynamicObject>,
    objects: Api<ConfigMap>,
    v1_digest: String,
    v2_digest: String,
}

/// A host serving the scene's namespace.
struct Host {
    sup: Arc<Supervisor>,
    source: Option<ReconcilerSource>,
    _dir: TempDir,
}

/// A replica of group `group` with Leases in `leases`, quick to fail over.
async fn replica(cp: &ControlPlane, id: &str, leases: &str) -> reconciled::supervisor::Options {
    let mut config = reconciled::replicas::Config::new(id, leases);
    config.group = leases.into();
    config.shards = 2;
    config.lease_duration = Duration::from_secs(3);
    config.renew_deadline = Duration::from_secs(2);
    config.retry_period = Duration::from_millis(500);
    config.rebalance_after = Duration::from_secs(2);
    let replicas = reconciled::replicas::Replicas::start(cp.admin_client(), config)
        .await
        .unwrap();
    reconciled::supervisor::Options {
        replicas: Some(Arc::new(replicas)),
        ..Default::default()
    }
}

async fn scene(cp: &ControlPlane, ns: &'static str) -> Scene {
    scene_of(cp, ns, &[]).await
}

/// [`scene`] with one host per replica id in `replicas` (none: one host alone).
async fn scene_of(cp: &ControlPlane, ns: &'static str, replicas: &[&str]) -> Scene {
    common::reconciler_crds(cp);
    common::tenant_namespace(cp, ns).await;
    let admin = cp.admin_client();
    let objects = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for i in 0..OBJECTS {
        (objects
            .create(&PostParams::default(), &stamped(&format!("work-{i}"), "0"))
            .await)
            .unwrap();
    }
    let (mut v1_digest, mut v2_digest) = (String::new(), String::new());
    for build in ["v1", "v2"] {
        let bytes = std::fs::read(common::guests::wasm(&format!("stamp_{build}"))).unwrap();
        match build {
            "v1" => v1_digest = digest_of(&bytes),
            _ => v2_digest = digest_of(&bytes),
        }
        let cm = module_configmap(&format!("mod-{build}"), "stamp.wasm", &bytes, false);
        objects.create(&PostParams::default(), &cm).await.unwrap();
    }
    let leases = format!("{ns}-leases");
    if !replicas.is_empty() {
        common::namespace(&admin, &leases).await;
    }
    let ids: Vec<Option<&str>> = match replicas {
        [] => vec![None],
        ids => ids.iter().copied().map(Some).collect(),
    };
    let mut hosts = Vec::new();
    for id in ids {
        let dir = TempDir::new(&format!("{ns}-{}", id.unwrap_or("host")));
        let sup = match id {
            None => supervisor_with(&cp.admin_config(), Some(&dir)),
            Some(id) => supervisor_options(
                &cp.admin_config(),
                Some(&dir),
                replica(cp, id, &leases).await,
            ),
        };
        let source = common::reconcilers::source(&sup, ns);
        hosts.push(Host {
            sup,
            source: Some(source),
            _dir: dir,
        });
    }
    Scene {
        ns,
        hosts,
        reconcilers: api(&admin, ns, "Reconciler"),
        objects,
        v1_digest,
        v2_digest,
    }
}

/// A Reconciler's spec: module `build`, `settings`, `rollout`.
fn spec(build: &str, settings: Value, rollout: Value) -> Value {
    json!({
        "module": { "configMapRef": { "name": format!("mod-{build}"), "key": "stamp.wasm" } },
        "settings": settings,
        "workers": 2,
        "rollout": rollout,
    })
}

impl Scene {
    fn guest(&self) -> String {
        format!("{}/stamp", self.ns)
    }

    /// The first host's supervisor: the only one, without replicas.
    fn sup(&self) -> &Arc<Supervisor> {
        &self.hosts[0].sup
    }

    /// Starts v1, and waits until it stamped every object.
    async fn serve_v1(&self, rollout: &Value) {
        apply(
            &self.reconcilers,
            "stamp",
            spec("v1", json!({}), rollout.clone()),
        )
        .await;
        wait_status(&self.reconcilers, "stamp", "Ready", |s| {
            is(s, "Ready", "True", "Serving")
        })
        .await;
        self.wait_all("v1:0", Duration::from_secs(60)).await;
    }

    /// Waits until every object is stamped `want`.
    async fn wait_all(&self, want: &str, within: Duration) {
        let wanted = (0..OBJECTS)
            .map(|i| (format!("work-{i}"), want.to_string()))
            .collect();
        self.wait_stamps(&wanted, within).await;
    }

    /// Waits until each object of `wanted` is stamped as it says.
    async fn wait_stamps(&self, wanted: &BTreeMap<String, String>, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let seen = seen_all(&self.objects).await;
            let off: Vec<_> = (wanted.iter())
                .filter(|(n, want)| {
                    seen.get(*n).cloned().flatten().as_deref() != Some(want.as_str())
                })
                .collect();
            if off.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "not stamped as wanted: {off:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the rollout's progress satisfies `ok`; returns it.
    async fn wait_rollout(&self, what: &str, ok: impl Fn(&Progress) -> bool) -> Progress {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let progress = self.sup().rollout(&self.guest());
            if let Some(p) = progress.as_ref().filter(|p| ok(p)) {
                return p.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{what} not within 120 s; rollout: {progress:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Edits every object in turn (`data.v` to 1, 2, ...) until dropped: the traffic each step
    /// is judged on.
    fn traffic(&self) -> Traffic {
        let objects = self.objects.clone();
        let edits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, stopped) = (edits.clone(), stop.clone());
        let task = tokio::spawn(async move {
            for round in 1u64.. {
                for i in 0..OBJECTS {
                    if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    let patch = json!({"data": {"v": round.to_string()}});
                    let name = format!("work-{i}");
                    let _ = (objects.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
                        .await;
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(15)).await;
                }
            }
        });
        Traffic { task, edits, stop }
    }
}

/// Edits in the background; stops when dropped, at once, perhaps with a patch in flight.
struct Traffic {
    task: tokio::task::JoinHandle<()>,
    edits: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Traffic {
    /// Stops after the patch in flight has been answered: no edit lands after this returns.
    async fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        let _ = task.await;
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A progressive rollout with no bake time (the tests that judge it set their own).
fn progressive(steps: Value, analysis: Value) -> Value {
    json!({ "strategy": "Progressive", "steps": steps, "analysis": analysis, "bakeTime": "0s" })
}

/// `rfc3339` (with fractional seconds) as an instant of this machine's clock.
fn instant_of(rfc3339: &str) -> std::time::SystemTime {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().unwrap();
    std::time::SystemTime::from(t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_failing_a_third_of_its_keys_is_rolled_back_in_its_first_step_and_writes_nothing_after()
 {
    let cp = ControlPlane::shared();
    let s = scene(cp, "rollout-bad").await;
    // Latency is not what this test judges: on a loaded machine a few slow reconciles must not
    // be what rolls the revision back.
    let rollout = progressive(
        json!([
            { "canary": { "percent": 10, "minReconciles": 20 } },
            { "canary": { "percent": 50, "minReconciles": 50 } },
            { "canary": { "percent": 100 } },
        ]),
        json!({ "maxErrorRate": 0.05, "maxLatencyRatio": 1000 }),
    );
    s.serve_v1(&rollout).await;
    let stamps = watch_stamps(&s.objects).await;
    let traffic = s.traffic();

    let applied = Instant::now();
    let bad = spec("v2", json!({ "fail_percent": 30 }), rollout.clone());
    apply(&s.reconcilers, "stamp", bad).await;
    // While the new revision runs on its share, /status shows the serving revision's source,
    // and none of the new revision's errors among the serving revision's counts.
    let guest = s.guest();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let g = s.sup().guest_status(&guest).unwrap();
        if let Some(p) = g.rollout.as_ref().filter(|p| p.errors > 0 || p.ended()) {
            assert!(g.source.contains("configmap/mod-v1/"), "{}", g.source);
            assert_eq!(
                (g.reconciles.failed, g.reconciles.traps),
                (0, 0),
                "the new revision's errors ({}) counted as the serving one's: {g:#?}",
                p.errors
            );
            break;
        }
        assert!(Instant::now() < deadline, "v2 never failed: {g:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done = s
        .wait_rollout("the rollback", |p| p.ended() && p.digest == s.v2_digest)
        .await;
    let rolled_back = Instant::now();
    let took = rolled_back - applied;
    assert_eq!(done.phase, Phase::RolledBack, "{done:#?}");
    assert_eq!(done.step, 0, "caught within the first step: {done:#?}");
    assert_eq!(done.reason.as_deref(), Some("Errors"), "{done:#?}");
    let message = done.message.clone().unwrap_or_default();
    assert!(
        message.contains("fails on purpose") && message.contains("at 10% of keys"),
        "the reason names the errors and the share: {message}"
    );

    // Every object v2 wrote to is in the 10% share; after the fence, nothing more, even while
    // every object keeps being edited and reconciled.
    let share: BTreeSet<String> = (0..OBJECTS)
        .map(|i| format!("work-{i}"))
        .filter(|n| in_share(s.ns, n, 10))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let edited = traffic.edits.load(std::sync::atomic::Ordering::Relaxed);
    traffic.stop().await;
    let writes = stamps.by("v2:");
    let touched: BTreeSet<String> = writes.iter().map(|(_, n)| n.clone()).collect();
    eprintln!(
        "rolled back {took:?} after the apply, at step {} ({} reconciles, {} errors); v2 wrote {} times to {} of the {} objects in the 10% share ({} edits in all)",
        done.step,
        done.reconciles,
        done.errors,
        writes.len(),
        touched.len(),
        share.len(),
        edited
    );
    assert!(
        touched.is_subset(&share),
        "v2 wrote outside its share: {:?}",
        touched.difference(&share).collect::<Vec<_>>()
    );
    assert!(!touched.is_empty(), "v2 ran on its share before failing");
    // The watch delivers a write within well under a second of the API server storing it, and
    // a loaded server may take a moment more.
    let late: Vec<_> = (writes.iter())
        .filter(|(at, _)| *at > rolled_back + Duration::from_secs(3))
        .collect();
    assert!(late.is_empty(), "v2 wrote after the rollback: {late:?}");
    // The fence is recorded to the microsecond, and no write of v2 reached the watch later than
    // three seconds after it (a write sent before it may land a moment after).
    assert!(
        done.since.len() == "2026-01-01T00:00:00.000000Z".len(),
        "{}",
        done.since
    );
    let fence = instant_of(&done.since);
    let now = (std::time::SystemTime::now(), Instant::now());
    let after_fence: Vec<_> = (writes.iter())
        .filter(|(at, _)| now.0 - (now.1 - *at) > fence + Duration::from_secs(3))
        .collect();
    assert!(
        after_fence.is_empty(),
        "v2 wrote after the fence {}: {after_fence:?}",
        done.since
    );

    // The serving revision has every key back, and the status says what happened.
    common::wait::wait_until_async(
        "v1 re-stamps every key",
        Duration::from_secs(60),
        || async {
            let last = seen_all(&s.objects).await;
            (last.iter()).all(|(n, seen)| {
                !n.starts_with("work-") || seen.as_deref().is_some_and(|v| v.starts_with("v1:"))
            })
        },
    )
    .await;
    let status = wait_status(&s.reconcilers, "stamp", "Degraded RolledBack", |st| {
        is(st, "Degraded", "True", "RolledBack") && st["rollout"]["phase"] == "RolledBack"
    })
    .await;
    assert!(is(&status, "Ready", "True", "Serving"), "{status:#}");
    assert_eq!(status["rollout"]["summary"], "rolled back", "{status:#}");
    assert_eq!(
        status["rollout"]["since"],
        done.since.as_str(),
        "{status:#}"
    );
    common::wait::wait_event(
        &cp.admin_client(),
        s.ns,
        "stamp",
        "RolloutRolledBack",
        "rolled back at step 1 of 3 (Errors)",
        Duration::from_secs(30),
    )
    .await;
    // Offered again (another edit of the spec), the same revision stays refused.
    let mut again = rollout.clone();
    again["resume"] = json!("again");
    apply(
        &s.reconcilers,
        "stamp",
        spec("v2", json!({ "fail_percent": 30 }), again),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = s.sup().rollout(&s.guest()).unwrap();
    assert_eq!(again.phase, Phase::RolledBack, "{again:#?}");

    // A module rejected after the rollback is the news, whatever rejects it: a ConfigMap that
    // is not there, then one that holds no module. v1 serves all along.
    for (name, why) in [
        ("mod-missing", "mod-missing"),
        ("mod-corrupt", "not a valid"),
    ] {
        if name == "mod-corrupt" {
            let garbage = module_configmap(name, "stamp.wasm", b"\0asm not a module", false);
            s.objects
                .create(&PostParams::default(), &garbage)
                .await
                .unwrap();
        }
        let mut rejected = spec("v2", json!({ "fail_percent": 30 }), rollout.clone());
        rejected["module"]["configMapRef"]["name"] = json!(name);
        apply(&s.reconcilers, "stamp", rejected).await;
        let status = wait_status(&s.reconcilers, "stamp", "Degraded by the rejection", |st| {
            is(st, "Degraded", "True", "NewVersionRejected")
        })
        .await;
        let message = (status["conditions"].as_array().unwrap().iter())
            .find(|c| c["type"] == "Degraded")
            .map(|c| c["message"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
        assert!(message.contains(why), "{name}: {message}");
        assert!(is(&status, "Ready", "True", "Serving"), "{status:#}");
        // Back to the revision serving, ready for the next (its settings say what it stamps
        // anyway: an empty map applied over a full one would leave none, which the CRD refuses).
        apply(
            &s.reconcilers,
            "stamp",
            spec("v1", json!({ "version": "v1" }), rollout.clone()),
        )
        .await;
        wait_status(&s.reconcilers, "stamp", "no rejection", |st| {
            !is(st, "Degraded", "True", "NewVersionRejected")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_whose_writes_differ_is_caught_by_its_shadow_step_and_never_writes() {
    let cp = ControlPlane::shared();
    let s = scene(cp, "rollout-divergent").await;
    let rollout = progressive(
        json!([
            { "shadow": { "minReconciles": 20, "maxDivergence": 0 } },
            { "canary": { "percent": 50, "minReconciles": 20 } },
        ]),
        json!({}),
    );
    s.serve_v1(&rollout).await;
    let stamps = watch_stamps(&s.objects).await;
    let traffic = s.traffic();

    // v2 stamps `v2:` where v1 stamps `v1:`: every compared reconcile diverges.
    apply(&s.reconcilers, "stamp", spec("v2", json!({}), rollout)).await;
    let done = s
        .wait_rollout("the rollback", |p| p.ended() && p.digest == s.v2_digest)
        .await;
    assert_eq!(
        (done.phase, done.step, done.reason.as_deref()),
        (Phase::RolledBack, 0, Some("Divergence")),
        "{done:#?}"
    );
    assert!(
        done.compared >= 20 && done.divergent == done.compared,
        "{done:#?}"
    );
    let message = done.message.clone().unwrap_or_default();
    assert!(
        message.contains("in shadow") && message.contains("work-"),
        "the message shows where it differed: {message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(traffic);
    assert_eq!(stamps.by("v2:"), [], "v2 never wrote");
    assert!(!stamps.by("v1:").is_empty(), "v1 kept serving the edits");
    let status = wait_status(&s.reconcilers, "stamp", "Degraded RolledBack", |st| {
        is(st, "Degraded", "True", "RolledBack")
    })
    .await;
    assert_eq!(status["rollout"]["reason"], "Divergence", "{status:#}");
    let first = status["rollout"]["firstDifference"]
        .as_str()
        .unwrap_or_default();
    assert!(
        first.contains("/body/metadata/annotations/stamp.reconciled.dev~1seen: \"v1:")
            && first.contains("-> \"v2:"),
        "the status names where the writes first differ: {status:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_revision_goes_from_shadow_through_two_shares_to_every_key() {
    let cp = ControlPlane::shared();
    let s = scene(cp, "rollout-good").await;
    // A shadow runs just before the serving revision, without read-your-writes: with an edit
    // landing every few milliseconds, one compare in a few dozen may see another state than the
    // serving run does, whatever the modules.
    // v2 stamps its own version: the shadow step lets the stamp differ, as the guide says.
    let rollout = progressive(
        json!([
            { "shadow": { "minReconciles": 20, "maxDivergence": 0.1,
                          "ignorePaths": ["/metadata/annotations/stamp.reconciled.dev~1seen"] } },
            { "canary": { "percent": 10, "minReconciles": 10 } },
            { "pause": {} },
            { "canary": { "percent": 50, "minReconciles": 30 } },
        ]),
        json!({}),
    );
    s.serve_v1(&rollout).await;
    let stamps = watch_stamps(&s.objects).await;
    let traffic = s.traffic();

    // Another build that stamps `v2:` where v1 stamps `v1:`, with the default analysis.
    let good = spec("v2", json!({}), rollout);
    apply(&s.reconcilers, "stamp", good).await;
    // The pause holds the 10% share until a person resumes it.
    let paused = wait_status(&s.reconcilers, "stamp", "paused", |st| {
        st["rollout"]["phase"] == "Paused" && st["rollout"]["summary"] == "paused at 10%"
    })
    .await;
    assert!(
        is(&paused, "Progressing", "True", "RollingOut"),
        "{paused:#}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.sup().rollout(&s.guest()).unwrap().phase, Phase::Paused);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .args([
            "rollout",
            "resume",
            &format!("{}/stamp", s.ns),
            "--kubeconfig",
        ])
        .arg(cp.kubeconfig_path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("asked to resume") && said.contains("paused at 10%"),
        "{said}"
    );
    // A canary step passes only once the new revision ran its minReconciles for real, so the
    // Events below show that it did at 10% and at 50%.
    let done = s
        .wait_rollout("the promotion", |p| p.ended() && p.digest == s.v2_digest)
        .await;
    assert_eq!(done.phase, Phase::Promoted, "{done:#?}");
    let controller = s.sup().controller(&s.guest()).unwrap();
    assert_eq!(controller.digest(), s.v2_digest, "v2 serves every key");
    // Listed below as the last edits: none may land after the list.
    traffic.stop().await;
    // No v2 stamp before its first canary share: the shadow wrote nothing.
    let written = stamps.all();
    assert!(
        written.iter().any(|w| w.starts_with("v2:")),
        "v2 ran for real"
    );
    // The last edit of every object, reconciled by v2 now that it serves every key, is
    // stamped as v2 stamps it.
    let latest: BTreeMap<String, String> = (s.objects.list(&Default::default()))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("work-"))
        })
        .map(|c| {
            let v = c.data.unwrap_or_default().remove("v").unwrap_or_default();
            (c.metadata.name.unwrap(), format!("v2:{v}"))
        })
        .collect();
    s.wait_stamps(&latest, Duration::from_secs(60)).await;
    let counters = controller.counters();
    assert_eq!(
        counters
            .concurrent_same_key
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no key ran on two revisions at once"
    );
    let status = wait_status(&s.reconcilers, "stamp", "promoted", |st| {
        st["rollout"]["phase"] == "Promoted" && st["digest"] == s.v2_digest.as_str()
    })
    .await;
    assert!(is(&status, "Ready", "True", "Serving"), "{status:#}");
    assert!(is(&status, "Degraded", "False", "AsExpected"), "{status:#}");
    for (reason, says) in [
        ("RolloutStarted", "in 4 steps"),
        ("RolloutStep", "entered step 2 of 4: canary 10%"),
        ("RolloutStep", "entered step 3 of 4: paused at 10%"),
        ("RolloutStep", "entered step 4 of 4: canary 50%"),
        ("RolloutPromoted", "now serves every key"),
    ] {
        common::wait::wait_event(
            &cp.admin_client(),
            s.ns,
            "stamp",
            reason,
            says,
            Duration::from_secs(30),
        )
        .await;
    }
    let out = cp
        .kubectl()
        .args(["get", "reconcilers", "-n", s.ns])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        table.contains("ROLLOUT") && table.contains("promoted"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_taking_over_mid_rollout_resumes_at_the_recorded_step_and_so_does_a_fresh_host() {
    let cp = ControlPlane::shared();
    let mut s = scene_of(cp, "rollout-failover", &["fa", "fb"]).await;
    // The 50% step waits for more reconciles than the test makes: the rollout is still there
    // when the owner dies.
    let rollout = progressive(
        json!([
            { "canary": { "percent": 10, "minReconciles": 5 } },
            { "canary": { "percent": 50, "minReconciles": 1000000 } },
        ]),
        json!({ "maxLatencyRatio": 1000 }),
    );
    s.serve_v1(&rollout).await;
    let traffic = s.traffic();
    apply(
        &s.reconcilers,
        "stamp",
        spec("v2", json!({ "version": "v1" }), rollout),
    )
    .await;
    let status = wait_status(&s.reconcilers, "stamp", "the 50% step, recorded", |st| {
        st["rollout"]["step"] == 1 && st["rollout"]["phase"] == "Canary" && st["owner"].is_string()
    })
    .await;
    let owner = status["owner"].as_str().unwrap().to_string();
    let guest = s.guest();
    // Hosts are built in the order of their ids; the other may still be loading, so its state
    // does not say which is which.
    let dead = (["fa", "fb"].iter().position(|id| *id == owner))
        .unwrap_or_else(|| panic!("the owner {owner} is neither fa nor fb"));
    let alive = 1 - dead;
    eprintln!("owner {owner} dies at the 50% step");

    // kill -9: no renewal, no hand-over; its Lease expires and the other replica takes over.
    let victim = &mut s.hosts[dead];
    victim.sup.replicas().unwrap().crash();
    drop(victim.source.take());
    victim.sup.shutdown().await;
    let taken = wait_status(&s.reconcilers, "stamp", "a new owner", |st| {
        st["owner"].is_string() && st["owner"] != owner.as_str()
    })
    .await;
    assert_eq!(taken["rollout"]["step"], 1, "{taken:#}");
    let survivor = &s.hosts[alive].sup;
    let deadline = Instant::now() + Duration::from_secs(60);
    let resumed = loop {
        let p = survivor.rollout(&guest).unwrap();
        if p.reconciles > 0 {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "the survivor resumed nothing: {p:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (resumed.step, resumed.percent, resumed.phase),
        (1, 50, Phase::Canary),
        "resumed at 50%, not from the start: {resumed:#?}"
    );
    let candidate = survivor.controller(&guest).unwrap().candidate().unwrap();
    assert_eq!(candidate.route.percent, 50);
    // The survivor says it resumed, at the step every message names alike; nobody started the
    // rollout a second time.
    resumed_not_restarted(cp, s.ns, "at step 2 of 2 as recorded: canary 50%").await;

    // Every replica gone, one starts fresh: it starts the serving revision first, from its
    // recorded revision, and rolls the new one out beside it from the recorded step.
    let survivor = &mut s.hosts[alive];
    survivor.sup.replicas().unwrap().crash();
    drop(survivor.source.take());
    survivor.sup.shutdown().await;
    let leases = format!("{}-leases", s.ns);
    let dir = TempDir::new("rollout-failover-fresh");
    let fresh = supervisor_options(
        &cp.admin_config(),
        Some(&dir),
        replica(cp, "fc", &leases).await,
    );
    let source = common::reconcilers::source(&fresh, s.ns);
    let deadline = Instant::now() + Duration::from_secs(90);
    let resumed = loop {
        let staged = fresh.controller(&guest).and_then(|c| {
            let candidate = c.candidate()?;
            Some((c.digest(), candidate))
        });
        let progress = fresh.rollout(&guest);
        if let (Some((serving, candidate)), Some(p)) = (staged, progress)
            && p.reconciles > 0
        {
            assert_eq!(serving, s.v1_digest, "v1 serves, beside the rollout");
            assert_eq!(candidate.digest, s.v2_digest);
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "the fresh host did not resume the rollout: {:?}",
            fresh.guest_status(&guest)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (resumed.step, resumed.percent),
        (1, 50),
        "a fresh host resumes at the recorded step: {resumed:#?}"
    );
    drop(source);
    fresh.shutdown().await;
    if let Some(r) = fresh.replicas() {
        r.shutdown().await;
    }
    drop(traffic);
    for host in s.hosts.drain(..) {
        drop(host.source);
        host.sup.shutdown().await;
        if let Some(r) = host.sup.replicas() {
            r.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_only_rollout_killed_at_25_percent_resumes_there_after_a_restart_with_its_status_and_one_resumed_event()
 {
    let cp = ControlPlane::shared();
    let mut s = scene(cp, "rollout-settings").await;
    // The first step waits for more reconciles than the test makes: the rollout is under way,
    // at 25%, when the host dies.
    let rollout = progressive(
        json!([
            { "canary": { "percent": 25, "minReconciles": 1000000 } },
            { "canary": { "percent": 100, "minReconciles": 5 } },
        ]),
        json!({}),
    );
    apply(
        &s.reconcilers,
        "stamp",
        spec("v1", json!({ "version": "s1" }), rollout.clone()),
    )
    .await;
    s.wait_all("s1:0", Duration::from_secs(60)).await;
    let traffic = s.traffic();
    // The same module, new settings: a new revision, rolled out step by step.
    apply(
        &s.reconcilers,
        "stamp",
        spec("v1", json!({ "version": "s2" }), rollout),
    )
    .await;
    wait_status(
        &s.reconcilers,
        "stamp",
        "the 25% step under way, recorded",
        |st| {
            st["rollout"]["phase"] == "Canary"
                && st["rollout"]["percent"] == 25
                && st["rollout"]["reconciles"].as_u64() > Some(0)
        },
    )
    .await;

    // kill -9, then a fresh host.
    let host = s.hosts.remove(0);
    drop(host.source);
    host.sup.shutdown().await;
    drop(traffic);
    let dir = TempDir::new("rollout-settings-fresh");
    let fresh = supervisor_with(&cp.admin_config(), Some(&dir));
    let source = common::reconcilers::source(&fresh, s.ns);
    let traffic = s.traffic();
    let guest = s.guest();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (serving, candidate) = loop {
        // Staged, and routed to its recorded share.
        let staged = (fresh.controller(&guest))
            .and_then(|c| Some((c.guest_settings(), c.candidate()?)))
            .filter(|(_, candidate)| candidate.route.percent > 0);
        if let Some(staged) = staged {
            break staged;
        }
        assert!(
            Instant::now() < deadline,
            "the fresh host did not stage the new settings beside the old: {:?}",
            fresh.guest_status(&guest)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        serving.as_str(),
        r#"{"version":"s1"}"#,
        "the old settings serve"
    );
    assert_eq!(candidate.settings.as_str(), r#"{"version":"s2"}"#);
    assert_eq!(
        candidate.route.percent, 25,
        "resumed at 25%, not at every key"
    );
    // Keys outside the share keep the old settings' stamp through edits.
    let outside: Vec<String> = (0..OBJECTS)
        .map(|i| format!("work-{i}"))
        .filter(|n| !in_share(s.ns, n, 25))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = seen_all(&s.objects).await;
    let wrong: Vec<_> = (outside.iter())
        .filter_map(|n| {
            let stamp = seen.get(n).cloned().flatten();
            (!stamp.as_deref().is_some_and(|s| s.starts_with("s1:"))).then_some((n, stamp))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "the new settings reached keys outside the share: {wrong:?}"
    );
    let status = wait_status(
        &s.reconcilers,
        "stamp",
        "the rollout still recorded",
        |st| st["rollout"]["phase"] == "Canary" && st["rollout"]["percent"] == 25,
    )
    .await;
    assert_eq!(status["rollout"]["step"], 0, "{status:#}");
    resumed_not_restarted(cp, s.ns, "at step 1 of 2 as recorded").await;
    drop(traffic);
    drop(source);
    fresh.shutdown().await;
}

/// Waits for a RolloutResumed Event on the `stamp` Reconciler of `ns` saying `says`, and checks
/// that nothing started the rollout a second time: one RolloutStarted in all.
async fn resumed_not_restarted(cp: &ControlPlane, ns: &str, says: &str) {
    let client = cp.admin_client();
    let timeout = Duration::from_secs(30);
    common::wait::wait_event(&client, ns, "stamp", "RolloutResumed", says, timeout).await;
    let started = (common::wait::events(&client, ns, "stamp").await)
        .into_iter()
        .filter(|(reason, _)| reason == "RolloutStarted")
        .count();
    assert_eq!(
        started, 1,
        "one RolloutStarted for one rollout, resumed {says}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_step_with_no_live_change_does_not_pass_and_says_it_waits_for_traffic() {
    let cp = ControlPlane::shared();
    let s = scene(cp, "rollout-quiet").await;
    let rollout = progressive(
        json!([{ "canary": { "percent": 20, "minReconciles": 3 } }]),
        json!({}),
    );
    s.serve_v1(&rollout).await;
    // No edits: the keys that move to v2 are reconciled (and re-stamped), and that is all.
    apply(
        &s.reconcilers,
        "stamp",
        spec("v2", json!({}), rollout.clone()),
    )
    .await;
    let status = wait_status(&s.reconcilers, "stamp", "waiting for traffic", |st| {
        st["rollout"]["summary"] == "canary 20% (waiting for traffic)"
            && st["rollout"]["reconciles"].as_u64() > Some(0)
    })
    .await;
    let waiting = status["rollout"]["waiting"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        waiting.starts_with("waiting for traffic: 0 of 3 reconciles of live changes")
            && waiting.contains("spec.rollout.resyncInterval"),
        "{status:#}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = s.sup().rollout(&s.guest()).unwrap();
    assert_eq!(
        (p.phase, p.live_reconciles),
        (Phase::Canary, 0),
        "the moved keys and v2's own writes are no traffic: {p:#?}"
    );

    // The same rollout with a resync: it drives the step with no edit at all.
    let mut resynced = rollout;
    resynced["resyncInterval"] = json!("1s");
    apply(
        &s.reconcilers,
        "stamp",
        spec("v2", json!({ "version": "quiet" }), resynced),
    )
    .await;
    let done = s
        .wait_rollout("the promotion by resyncs", |p| {
            p.ended() && p.settings_hash != reconciled::rollout::progress::settings_hash("{}")
        })
        .await;
    assert_eq!(done.phase, Phase::Promoted, "{done:#?}");
}
