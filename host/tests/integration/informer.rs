//! Informer behaviour against the real apiserver: the list/watch handoff, RBAC preflight,
//! discovery of CRDs, sharing, late and slow subscribers.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::wait::wait_until;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::Role;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use reconciled::informer::factory::InformerFactory;
use reconciled::informer::store::Query;
use reconciled::informer::{Event, Informer, InformerKey, Options, Scope, State, SyncError};
use testenv::ControlPlane;

fn configmaps(ns: &str) -> InformerKey {
    InformerKey::new("", "v1", "ConfigMap", Scope::namespace(ns))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

/// The writer's log and the informer's deliveries must agree key by key: every write after the
/// initial sync arrives once, in order; every key's initial state arrives as one background add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_informer_misses_no_event_and_sees_none_twice_at_the_handoff() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "handoff";
    namespace(&admin, ns).await;

    let log: Arc<Mutex<Vec<(String, Op, u64)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (log, stop, api) = (
            log.clone(),
            stop.clone(),
            Api::<ConfigMap>::namespaced(admin.clone(), ns),
        );
        tokio::spawn(async move {
            let mut exists = [false; 30];
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let i = fastrand::usize(..exists.len());
                let name = format!("k{i}");
                let rv = |o: &ConfigMap| {
                    o.metadata
                        .resource_version
                        .as_deref()
                        .unwrap()
                        .parse::<u64>()
                        .unwrap()
                };
                let (op, got) = if !exists[i] {
                    (
                        Op::Create,
                        api.create(&PostParams::default(), &cm(&name, &[("n", &n.to_string())]))
                            .await
                            .map(|o| rv(&o)),
                    )
                } else if fastrand::u8(..4) == 0 {
                    let deleted = api.delete(&name, &DeleteParams::default()).await;
                    (
                        Op::Delete,
                        deleted.map(|e| e.left().map(|o| rv(&o)).unwrap_or(0)),
                    )
                } else {
                    let patch = serde_json::json!({"data": {"n": n.to_string()}});
                    (
                        Op::Update,
                        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .map(|o| rv(&o)),
                    )
                };
                let rv = got.unwrap_or_else(|e| panic!("{op:?} {name}: {e}"));
                exists[i] = op != Op::Delete;
                log.lock().unwrap().push((name, op, rv));
                n += 1;
            }
        })
    };
    // Counted, not timed: on a busy machine the writer may manage a tenth of its usual pace.
    let writes_committed_after = |rv: u64| {
        let log = log.lock().unwrap();
        log.iter()
            .filter(|(_, op, at)| *op != Op::Delete && *at > rv)
            .count()
    };
    wait_until("the writer's first writes", Duration::from_secs(60), || {
        writes_committed_after(0) > 60
    })
    .await;

    let informer = Informer::start(cp.admin_client(), configmaps(ns), Options::default());
    let mut sub = informer.subscribe(1 << 20);
    informer.wait_synced(Duration::from_secs(30)).await.unwrap();
    let sync_rv = informer.stats().initial_sync_rv;
    wait_until(
        "the writer's writes after the sync",
        Duration::from_secs(60),
        || writes_committed_after(sync_rv) > 60,
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    wait_cache_equals_list(&informer, &admin, ns, Duration::from_secs(20)).await;
    assert!(sync_rv > 0);
    let mut initial: HashMap<String, Vec<u64>> = HashMap::new();
    let mut live: HashMap<String, Vec<(Op, u64)>> = HashMap::new();
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
        let (name, op, rv) = match &n.event {
            Event::Added(o) => (
                o.name().to_string(),
                Op::Create,
                o.resource_version_number().unwrap(),
            ),
            Event::Updated { new, .. } => (
                new.name().to_string(),
                Op::Update,
                new.resource_version_number().unwrap(),
            ),
            Event::Deleted {
                last_known,
                final_state_unknown,
            } => {
                assert!(!final_state_unknown, "no relist should have happened");
                (
                    last_known.name().to_string(),
                    Op::Delete,
                    last_known.resource_version_number().unwrap(),
                )
            }
            Event::Resync => panic!("the subscriber buffer should not overflow"),
        };
        if n.background {
            assert_eq!(op, Op::Create, "initial events are adds");
            initial.entry(name).or_default().push(rv);
        } else {
            live.entry(name).or_default().push((op, rv));
        }
    }

    let log = log.lock().unwrap().clone();
    // DELETE answers with the object at its last write, not at the deletion's revision. The
    // writer is sequential and RVs are global, so a deletion lies strictly between its
    // neighbours' RVs: place it there, and when the sync point falls inside that interval,
    // accept the delete on either side of it.
    // Only creates and updates report the revision they committed at, so the bounds come
    // from the nearest of those on either side.
    let commit = |(_, op, rv): &(String, Op, u64)| (*op != Op::Delete).then_some(*rv);
    let mut per_key: BTreeMap<String, Vec<(Op, u64, u64)>> = BTreeMap::new();
    for (i, (name, op, rv)) in log.iter().cloned().enumerate() {
        let (lo, hi) = if op == Op::Delete {
            (
                log[..i].iter().rev().find_map(commit).unwrap_or(0),
                log[i + 1..].iter().find_map(commit).unwrap_or(u64::MAX),
            )
        } else {
            (rv, rv)
        };
        per_key.entry(name).or_default().push((op, lo, hi));
    }
    let mut checked_live = 0;
    for (name, ops) in &per_key {
        let straddling = ops
            .iter()
            .position(|(op, lo, hi)| *op == Op::Delete && *lo <= sync_rv && sync_rv < *hi);
        let placements: Vec<Option<bool>> = match straddling {
            Some(_) => vec![Some(true), Some(false)],
            None => vec![None],
        };
        let got_initial = initial.get(name).cloned().unwrap_or_default();
        let got_live = live.get(name).cloned().unwrap_or_default();
        let strip = |v: &[(Op, u64)]| {
            v.iter()
                .map(|(op, rv)| (op.clone(), if *op == Op::Delete { 0 } else { *rv }))
                .collect::<Vec<_>>()
        };
        let mut outcomes = Vec::new();
        for before_sync in placements {
            let is_before =
                |i: usize, (op, lo, hi): &(Op, u64, u64)| match (op, Some(i) == straddling) {
                    (Op::Delete, true) => before_sync.unwrap(),
                    (Op::Delete, false) => *hi <= sync_rv,
                    _ => *lo <= sync_rv,
                };
            let before: Vec<&(Op, u64, u64)> = ops
                .iter()
                .enumerate()
                .filter(|(i, o)| is_before(*i, o))
                .map(|(_, o)| o)
                .collect();
            let want_initial: Vec<u64> = match before.last() {
                Some((Op::Delete, _, _)) | None => vec![],
                Some((_, rv, _)) => vec![*rv],
            };
            let want_live: Vec<(Op, u64)> = ops
                .iter()
                .enumerate()
                .filter(|(i, o)| !is_before(*i, o))
                .map(|(_, (op, lo, _))| (op.clone(), *lo))
                .collect();
            let ok = got_initial == want_initial && strip(&got_live) == strip(&want_live);
            if ok {
                checked_live += want_live.len();
            }
            outcomes.push((ok, want_initial, want_live));
        }
        assert!(
            outcomes.iter().any(|(ok, ..)| *ok),
            "{name}: sync at RV {sync_rv}; got initial {got_initial:?} live {got_live:?}; wanted one of {outcomes:?}"
        );
    }
    assert!(
        checked_live > 50,
        "the writer should have overlapped the watch; only {checked_live} live writes"
    );
    assert!(
        log.iter().filter(|(_, _, rv)| *rv <= sync_rv).count() > 50,
        "the writer should have overlapped the list"
    );
    eprintln!(
        "handoff: {} writes, {} before the sync RV {sync_rv}, {checked_live} after; stats {:?}",
        log.len(),
        log.len() - checked_live,
        informer.stats()
    );
}

#[tokio::test]
async fn forbidden_watch_is_reported_with_the_rule_and_syncs_once_granted() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "preflight";
    namespace(&admin, ns).await;
    let user = cp.user("preflight-pat", &[]).unwrap();

    let rule = |verbs: &[&str]| testenv::fixtures::rule("", &["configmaps"], verbs);
    testenv::fixtures::grant(&admin, ns, "cm", &user.name, vec![rule(&["list"])])
        .await
        .unwrap();
    let roles = Api::<Role>::namespaced(admin.clone(), ns);

    let client = kube::Client::try_from(user.config.clone()).unwrap();
    let informer = Informer::start(client, configmaps(ns), Options::default());
    let took = wait_state(&informer, State::Forbidden, Duration::from_secs(5)).await;
    let err = informer
        .wait_synced(Duration::from_secs(1))
        .await
        .unwrap_err();
    let SyncError::Forbidden(msg) = &err else {
        panic!("{err:?}")
    };
    assert!(
        msg.contains(r#"cannot watch configmaps in namespace "preflight""#),
        "{msg}"
    );
    assert!(
        msg.contains(
            r#"add rule {apiGroups:[""], resources:["configmaps"], verbs:["list","watch"]}"#
        ),
        "{msg}"
    );
    assert!(
        err.to_string().starts_with("cache not synced: forbidden"),
        "{err}"
    );
    eprintln!("forbidden reported after {took:?}: {msg}");

    let grant = serde_json::json!({"rules": [rule(&["list", "watch"])]});
    roles
        .patch("cm", &PatchParams::default(), &Patch::Merge(&grant))
        .await
        .unwrap();
    // The reflector backs off while refused (0.8 s, doubling), so the next try may be seconds
    // after the grant.
    let took = wait_state(&informer, State::Synced, Duration::from_secs(30)).await;
    eprintln!("synced {took:?} after the grant");
}

#[tokio::test]
async fn a_missing_crd_is_reported_and_the_informer_syncs_once_it_is_installed() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let key = InformerKey::new("example.reconciled.dev", "v1", "Widget", Scope::default());
    let informer = Informer::start(admin.clone(), key, Options::default());
    wait_state(&informer, State::KindNotFound, Duration::from_secs(5)).await;
    let err = informer
        .wait_synced(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("example.reconciled.dev/v1/Widget"),
        "{err}"
    );

    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.reconciled.dev"},
        "spec": {"group": "example.reconciled.dev", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    wait_state(&informer, State::Synced, Duration::from_secs(30)).await;
    assert_eq!(informer.resource().unwrap().plural, "widgets");
}

#[tokio::test]
async fn subscribers_share_one_informer_and_the_last_one_out_stops_it() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "sharing";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    let factory = InformerFactory::new(admin.clone(), Options::default());
    let mut first = factory.subscribe(configmaps(ns), &[]).unwrap();
    first
        .informer()
        .wait_synced(Duration::from_secs(10))
        .await
        .unwrap();
    let mut late = factory.subscribe(configmaps(ns), &["data.role"]).unwrap();
    assert!(
        Arc::ptr_eq(first.informer(), late.informer()),
        "same key, same informer"
    );
    assert_eq!(first.informer().subscriber_count(), 2);
    let other = factory
        .subscribe(
            InformerKey::new("", "v1", "ConfigMap", Scope::namespace("default")),
            &[],
        )
        .unwrap();
    assert!(
        !Arc::ptr_eq(first.informer(), other.informer()),
        "another scope, another informer"
    );

    // The late subscriber first gets the stored objects, then live events, in order.
    let mut names = Vec::new();
    for _ in 0..5 {
        let n = late.recv().await.unwrap();
        let Event::Added(o) = n.event else {
            panic!("{n:?}")
        };
        assert!(n.background);
        names.push(o.name().to_string());
    }
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
    api.create(&PostParams::default(), &cm("c5", &[("role", "edge")]))
        .await
        .unwrap();
    let n = late.recv().await.unwrap();
    assert!(
        matches!(&n.event, Event::Added(o) if o.name() == "c5") && !n.background,
        "{n:?}"
    );
    let n = first.recv().await.unwrap();
    assert!(
        matches!(&n.event, Event::Added(o) if o.name() == "c0"),
        "the first subscriber also saw the initial list: {n:?}"
    );

    // The index one subscriber declared serves everyone on that informer.
    let q = Query {
        fields: vec![("data.role".into(), "edge".into())],
        ..Query::default()
    };
    assert_eq!(first.informer().store().list(&q).unwrap().len(), 1);

    let weak = Arc::downgrade(first.informer());
    drop(first);
    assert!(weak.upgrade().is_some(), "one subscriber is left");
    drop(late);
    assert!(
        weak.upgrade().is_none(),
        "the last subscriber leaving stops the informer"
    );
    assert_eq!(
        factory.active().len(),
        1,
        "only the other scope's informer is left"
    );
}

#[tokio::test]
async fn a_slow_subscriber_gets_a_resync_instead_of_unbounded_memory() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "slow";
    namespace(&admin, ns).await;
    let informer = Informer::start(admin.clone(), configmaps(ns), Options::default());
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let mut slow = informer.subscribe(4);
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for i in 0..20 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    wait_cache_equals_list(&informer, &admin, ns, Duration::from_secs(10)).await;
    let n = slow.recv().await.unwrap();
    assert!(
        matches!(n.event, Event::Resync),
        "expected a Resync after overflowing 4 slots, got {n:?}"
    );
    api.create(&PostParams::default(), &cm("after", &[]))
        .await
        .unwrap();
    let n = slow.recv().await.unwrap();
    assert!(
        matches!(&n.event, Event::Added(o) if o.name() == "after"),
        "live events resume: {n:?}"
    );
}

#[tokio::test]
async fn the_initial_sync_uses_watch_list_and_no_list_request() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "watchlist";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    let informer = Informer::start(admin.clone(), configmaps(ns), Options::default());
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let stats = informer.stats();
    assert_eq!((stats.watch_list_syncs, stats.lists), (1, 0), "{stats:?}");
    assert_eq!(informer.store().len(), 3);
    let stored = informer.store().get(&format!("{ns}/c0")).unwrap();
    let v = stored.to_value();
    assert!(
        v["metadata"].get("managedFields").is_none(),
        "the default transform strips managedFields: {v}"
    );
    assert_eq!(
        (v["apiVersion"].as_str(), v["kind"].as_str()),
        (Some("v1"), Some("ConfigMap"))
    );
}

#[tokio::test]
async fn scopes_select_on_the_server_by_label_field_and_namespace_set() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    for ns in ["scope-a", "scope-b", "scope-c"] {
        namespace(&admin, ns).await;
        let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
        let mut web = cm("web", &[]);
        web.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        api.create(&PostParams::default(), &web).await.unwrap();
        api.create(&PostParams::default(), &cm("db", &[]))
            .await
            .unwrap();
    }
    let two: std::collections::BTreeSet<String> =
        ["scope-a".to_string(), "scope-b".to_string()].into();
    let names = |i: &Informer| {
        i.store()
            .all()
            .iter()
            .map(|o| o.key().to_string())
            .collect::<Vec<_>>()
    };

    let scope = Scope {
        namespaces: reconciled::informer::Namespaces::Only(two.clone()),
        ..Scope::default()
    };
    let both = Informer::start(
        admin.clone(),
        InformerKey::new("", "v1", "ConfigMap", scope),
        Options::default(),
    );
    both.wait_synced(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        names(&both),
        ["scope-a/db", "scope-a/web", "scope-b/db", "scope-b/web"],
        "one store holds both namespaces"
    );
    let stats = both.stats();
    assert_eq!(
        stats.lists + stats.watch_list_syncs,
        2,
        "one initial sync per namespace: {stats:?}"
    );
    assert!(
        stats.watches >= 2,
        "one watch per namespace, so at least two: {stats:?}"
    );

    let labels = reconciled::selector::LabelSelector::parse("app=web").unwrap();
    let scope = Scope {
        namespaces: reconciled::informer::Namespaces::Only(two.clone()),
        labels,
        ..Scope::default()
    };
    let web = Informer::start(
        admin.clone(),
        InformerKey::new("", "v1", "ConfigMap", scope),
        Options::default(),
    );
    web.wait_synced(Duration::from_secs(10)).await.unwrap();
    assert_eq!(names(&web), ["scope-a/web", "scope-b/web"]);

    let fields = reconciled::selector::FieldSelector::parse("metadata.name=db").unwrap();
    let scope = Scope {
        namespaces: reconciled::informer::Namespaces::Only(two),
        fields,
        ..Scope::default()
    };
    let db = Informer::start(
        admin.clone(),
        InformerKey::new("", "v1", "ConfigMap", scope),
        Options::default(),
    );
    db.wait_synced(Duration::from_secs(10)).await.unwrap();
    assert_eq!(names(&db), ["scope-a/db", "scope-b/db"]);

    // A label-filtered informer sees an object leave its scope as a delete.
    let mut sub = web.subscribe(64);
    for _ in 0..2 {
        assert!(sub.recv().await.unwrap().background);
    }
    let patch = serde_json::json!({"metadata": {"labels": {"app": "other"}}});
    Api::<ConfigMap>::namespaced(admin.clone(), "scope-a")
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let n = sub.recv().await.unwrap();
    assert!(
        matches!(&n.event, Event::Deleted { last_known, .. } if last_known.key() == "scope-a/web"),
        "{n:?}"
    );
}

fn rv_of(o: &ConfigMap) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_shows_the_servers_silence_and_the_stores_resource_version() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "staleness";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let mut newest = 0;
    for i in 0..3 {
        let o = api
            .create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
        newest = rv_of(&o);
    }
    let proxy = testenv::Proxy::start(cp.server_addr()).await.unwrap();
    let client = kube::Client::try_from(proxy.config(&cp.admin_config())).unwrap();
    let informer = Informer::start(client, configmaps(ns), Options::default());
    assert_eq!(
        informer.staleness().silent_for,
        None,
        "nothing heard from the server yet"
    );
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let s = informer.staleness();
    assert!(s.silent_for.unwrap() < Duration::from_secs(2), "{s:?}");
    assert_eq!(s.resource_version, newest, "the newest object listed");

    let patch = serde_json::json!({"data": {"k": "v"}});
    let changed = rv_of(
        &api.patch("c0", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while informer.staleness().resource_version < changed {
        assert!(tokio::time::Instant::now() < deadline, "{s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(informer.staleness().resource_version, changed);

    // Cut off, the silence grows while the content stays where it was.
    proxy.pause();
    wait_state(&informer, State::Degraded, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cut_off = informer.staleness();
    assert!(
        cut_off.silent_for.unwrap() >= Duration::from_secs(2),
        "{cut_off:?}"
    );
    assert_eq!(cut_off.resource_version, changed);

    proxy.resume();
    wait_state(&informer, State::Synced, Duration::from_secs(5)).await;
    let back = informer.staleness();
    assert!(
        back.silent_for.unwrap() < Duration::from_secs(2),
        "{back:?}"
    );
    eprintln!("staleness: synced {s:?}; cut off for 2 s {cut_off:?}; back {back:?}");
}

#[tokio::test]
async fn a_field_index_added_to_a_running_informer_indexes_what_it_already_holds() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    let ns = "late-index";
    namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    for (name, role) in [("a", "edge"), ("b", "core"), ("c", "edge")] {
        api.create(&PostParams::default(), &cm(name, &[("role", role)]))
            .await
            .unwrap();
    }
    let informer = Informer::start(admin.clone(), configmaps(ns), Options::default());
    informer.wait_synced(Duration::from_secs(10)).await.unwrap();
    let edge = Query {
        fields: vec![("data.role".into(), "edge".into())],
        ..Query::default()
    };
    assert!(
        informer.store().list(&edge).is_err(),
        "not declared yet: an error, never a scan"
    );
    informer.add_field_index("data.role").unwrap();
    let names: Vec<String> = informer
        .store()
        .list(&edge)
        .unwrap()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(
        informer.add_field_index("data.role"),
        Err(reconciled::informer::store::Error::DuplicateIndex(
            "data.role".into()
        ))
    );
}
