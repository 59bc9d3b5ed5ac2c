//! One guest's keys split across replicas (`shard_keys = true`): real `reconciled run`
//! processes on the control plane with sharded list and watch on. Each replica caches exactly
//! the objects of the shards whose Leases it holds, a replica joining takes a third of them, a
//! replica killed hands its range to the others, and through it all, with edits streaming in,
//! no object is lost and none is reconciled by two replicas at once (by the guest's own
//! records, `stamp_mark`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::guests::wasm;
use common::host::{SEEN, TempDir, stamped};
use common::replica::{KeepOnFailure, Replica, step};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use reconciled::informer::shard::{ShardKey, ShardSet, index_of};
use reconciled::ops::status::{GuestState, InformerState};

const SHARDS: u64 = 12;
const OBJECTS: usize = 240;
const GUEST: &str = "wide";
const GROUP: &str = "keys";
const MARKER: &str = "stamp.reconciled.dev/marker";

fn host_config(dir: &Path, ns: &str, lease_ns: &str) -> PathBuf {
    let toml = format!(
        "[replicas]\nnamespace = \"{lease_ns}\"\ngroup = \"{GROUP}\"\nshards = {SHARDS}\nlease_duration_ms = 4000\nrenew_deadline_ms = 2500\nretry_period_ms = 500\nrebalance_after_ms = 2000\n\n[[guest]]\nname = \"{GUEST}\"\nmodule = \"{}\"\nworkers = 4\nshard_keys = true\n[guest.grant]\nnamespaces = [\"{ns}\"]\n",
        wasm("stamp_mark").display()
    );
    let path = dir.join("keys.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// Each shard's live holder, by the shard Leases.
async fn holders(client: &kube::Client, lease_ns: &str) -> BTreeMap<u64, String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), lease_ns);
    let mut out = BTreeMap::new();
    for l in api.list(&ListParams::default()).await.unwrap() {
        let name = l.metadata.name.unwrap_or_default();
        let Some(shard) = name
            .strip_prefix(&format!("{GROUP}-shard-"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        if let Some(h) = l.spec.and_then(|s| s.holder_identity)
            && !h.is_empty()
        {
            out.insert(shard, h);
        }
    }
    out
}

/// What one replica says it watches of the guest's keys: the ranges, and how many objects its
/// informer for them holds, once synced.
async fn watched(r: &Replica) -> Option<(String, usize)> {
    let status = r.status().await?;
    let guest = status.guests.iter().find(|g| g.name == GUEST)?;
    let keys = guest.key_shards.clone()?;
    if keys != "none" && guest.state != GuestState::Serving {
        return None;
    }
    let wanted = format!("shard={keys}");
    let objects = status
        .informers
        .iter()
        .filter(|i| i.kind == "v1/ConfigMap" && i.state == InformerState::Synced)
        .find(|i| keys == "none" || i.scope.contains(&wanted))
        .map_or(0, |i| i.objects);
    Some((keys, objects))
}

/// Waits until the shards are held by exactly `replicas`, as many each, and every live
/// replica watches the ranges of the shards it holds and caches exactly the objects in them;
/// returns the objects each caches.
async fn wait_split(
    client: &kube::Client,
    lease_ns: &str,
    replicas: &[&Replica],
    uids: &[String],
    timeout: Duration,
) -> BTreeMap<String, usize> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let held = holders(client, lease_ns).await;
        let mut by_replica: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (shard, h) in &held {
            by_replica.entry(h.clone()).or_default().insert(*shard);
        }
        // Twelve shards over the live replicas: as many each.
        let even = SHARDS as usize / replicas.len();
        let mut ok = held.len() == SHARDS as usize
            && replicas.iter().all(|r| by_replica.contains_key(&r.id))
            && by_replica.len() == replicas.len()
            && by_replica.values().all(|s| s.len() == even);
        let mut cached = BTreeMap::new();
        if ok {
            for r in replicas {
                let shards = &by_replica[&r.id];
                let want_keys = ShardSet::of(ShardKey::Uid, shards.iter().copied(), SHARDS)
                    .unwrap()
                    .to_string();
                let want_objects = uids
                    .iter()
                    .filter(|u| shards.contains(&index_of(u, SHARDS)))
                    .count();
                let seen = watched(r).await;
                if seen.as_ref() != Some(&(want_keys.clone(), want_objects)) {
                    ok = false;
                    last = format!(
                        "{}: holds {shards:?}, so should watch {want_keys} with {want_objects} objects; says {seen:?}",
                        r.id
                    );
                    break;
                }
                cached.insert(r.id.clone(), want_objects);
            }
        } else {
            last = format!("shard holders: {held:?}");
        }
        if ok {
            return cached;
        }
        assert!(
            started.elapsed() < timeout,
            "keys not split over {:?} within {timeout:?}: {last}",
            replicas.iter().map(|r| r.id.as_str()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn set_v(api: &Api<ConfigMap>, name: &str, v: u64) {
    let patch = serde_json::json!({ "data": { "v": v.to_string() } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// One reconcile, as the guest recorded it.
#[derive(Debug, Clone)]
struct Mark {
    replica: String,
    key: String,
    start: u64,
    end: u64,
}

async fn marks(api: &Api<ConfigMap>) -> Vec<Mark> {
    let lp = ListParams::default().labels(&format!("{MARKER}=true"));
    let mut out = Vec::new();
    for cm in api.list(&lp).await.unwrap() {
        let d = cm.data.unwrap_or_default();
        let num = |k: &str| d.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        out.push(Mark {
            replica: d.get("replica").cloned().unwrap_or_default(),
            key: d.get("key").cloned().unwrap_or_default(),
            start: num("start"),
            end: num("end"),
        });
    }
    out
}

/// Reconciles of one key by two replicas whose intervals overlap.
fn overlaps(marks: &[Mark]) -> Vec<(Mark, Mark)> {
    let mut by_key: BTreeMap<&str, Vec<&Mark>> = BTreeMap::new();
    for m in marks {
        by_key.entry(m.key.as_str()).or_default().push(m);
    }
    let mut bad = Vec::new();
    for ms in by_key.values_mut() {
        ms.sort_by_key(|m| m.start);
        let mut open: Option<&Mark> = None;
        for m in ms.iter() {
            if let Some(o) = open
                && o.replica != m.replica
                && m.start < o.end
            {
                bad.push(((*o).clone(), (*m).clone()));
            }
            if open.is_none_or(|o| m.end > o.end) {
                open = Some(m);
            }
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_one_guests_keys_and_a_join_and_a_kill_move_ranges_without_loss_or_overlap()
 {
    let cp = common::sharded_control_plane();
    let client = cp.admin_client();
    let (ns, lease_ns) = ("keys-objects", "keys-leases");
    common::namespace(&client, ns).await;
    common::namespace(&client, lease_ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut uids = Vec::new();
    for chunk in (0..OBJECTS).collect::<Vec<_>>().chunks(24) {
        let made = futures::future::join_all(chunk.iter().map(|i| {
            let api = api.clone();
            async move {
                let cm = stamped(&format!("o{i:03}"), "0");
                api.create(&PostParams::default(), &cm).await.unwrap()
            }
        }))
        .await;
        uids.extend(made.into_iter().map(|cm| cm.metadata.uid.unwrap()));
    }
    let dir = KeepOnFailure(TempDir::new("key-sharding"));
    let config = host_config(&dir.0.0, ns, lease_ns);

    step("two replicas split the keys");
    let a = Replica::new(cp, &dir.0.0, "a", &config).await;
    let b = Replica::new(cp, &dir.0.0, "b", &config).await;
    let two = wait_split(&client, lease_ns, &[&a, &b], &uids, Duration::from_secs(90)).await;
    assert_eq!(two.values().sum::<usize>(), OBJECTS, "{two:?}");

    // Edits stream in from now on, so that every move below happens with keys in flight.
    let stop = Arc::new(AtomicBool::new(false));
    let edits = Arc::new(AtomicU64::new(0));
    let editor = tokio::spawn({
        let (api, stop, edits) = (api.clone(), stop.clone(), edits.clone());
        async move {
            let mut v = 1;
            while !stop.load(Ordering::Relaxed) {
                for i in (0..OBJECTS).step_by(7) {
                    set_v(&api, &format!("o{i:03}"), v).await;
                    edits.fetch_add(1, Ordering::Relaxed);
                }
                v += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });

    step("a third replica joins and takes a third of the shards");
    let mut c = Replica::new(cp, &dir.0.0, "c", &config).await;
    let three = wait_split(
        &client,
        lease_ns,
        &[&a, &b, &c],
        &uids,
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(three.values().sum::<usize>(), OBJECTS, "{three:?}");
    let shares: BTreeMap<String, usize> =
        holders(&client, lease_ns)
            .await
            .into_values()
            .fold(BTreeMap::new(), |mut m, h| {
                *m.entry(h).or_default() += 1;
                m
            });
    assert!(
        shares.values().all(|n| *n == (SHARDS / 3) as usize),
        "12 shards over 3 replicas: 4 each; {shares:?}"
    );
    step(&format!("split: {three:?} objects, {shares:?} shards"));
    // c reconciles some of the edits in its range before it dies.
    common::wait::wait_until_async(
        "c reconciles in its range",
        Duration::from_secs(60),
        || async { marks(&api).await.iter().any(|k| k.replica == "c") },
    )
    .await;

    step("c is killed; its shards go to a and b once their Leases expire");
    let killed = Instant::now();
    c.kill9();
    let after = wait_split(&client, lease_ns, &[&a, &b], &uids, Duration::from_secs(60)).await;
    step(&format!("taken over in {:?}: {after:?}", killed.elapsed()));

    stop.store(true, Ordering::Relaxed);
    editor.await.unwrap();
    step(&format!(
        "{} edits made; the last value goes to every object",
        edits.load(Ordering::Relaxed)
    ));
    let last = 1_000_000;
    for chunk in (0..OBJECTS).collect::<Vec<_>>().chunks(24) {
        futures::future::join_all(chunk.iter().map(|i| {
            let api = api.clone();
            async move { set_v(&api, &format!("o{i:03}"), last).await }
        }))
        .await;
    }
    let want = format!("v1:{last}");
    let started = Instant::now();
    loop {
        let lp = ListParams::default().labels(&format!("{}=true", common::host::ENABLED));
        let behind: Vec<String> = api
            .list(&lp)
            .await
            .unwrap()
            .into_iter()
            .filter(|cm| cm.metadata.annotations.as_ref().and_then(|a| a.get(SEEN)) != Some(&want))
            .filter_map(|cm| cm.metadata.name)
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{} objects never reconciled to their last value, e.g. {:?}",
            behind.len(),
            &behind[..behind.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let marks = marks(&api).await;
    let by: BTreeMap<&str, usize> = marks.iter().fold(BTreeMap::new(), |mut m, k| {
        *m.entry(k.replica.as_str()).or_default() += 1;
        m
    });
    step(&format!("{} reconciles recorded: {by:?}", marks.len()));
    for id in ["a", "b", "c"] {
        assert!(
            by.get(id).is_some_and(|n| *n > 0),
            "{id} reconciled nothing: {by:?}"
        );
    }
    let bad = overlaps(&marks);
    assert!(
        bad.is_empty(),
        "{} reconciles of one key by two replicas at once, e.g. {:?}",
        bad.len(),
        bad.first()
    );
}
