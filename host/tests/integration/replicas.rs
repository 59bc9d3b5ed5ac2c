//! Replicas sharing guests through Leases, as three real `reconciled run` processes against the
//! loopback control plane, each reaching the API server through a proxy of its own so that a
//! test can cut one off.
//!
//! The guest is `stamp_mark`: besides stamping, it records every reconcile (replica, key, start,
//! end) as a ConfigMap, so the test can prove from the API server's own records that no two
//! replicas ever reconciled one guest at once.
//!
//! Timings here are short (lease 4 s, renew deadline 2.5 s, retry 0.5 s, rebalance after 2 s)
//! so that many disruptions fit in a test; `RECONCILED_REPLICA_ROUNDS` (default 3) sets how many
//! kills, cuts and rolling restarts the long scenario makes (10 for the full acceptance run).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::guests::wasm;
use common::host::{ENABLED, SEEN, TempDir};
use common::replica::{KeepOnFailure, Replica, step};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use reconciled::controller::gate::Gate;
use reconciled::controller::{Controller, Settings};
use reconciled::guest::grant::Grant;
use reconciled::ops::status::GuestState;
use testenv::ControlPlane;

const LEASE: Duration = Duration::from_secs(4);
const MARKER: &str = "stamp.reconciled.dev/marker";

/// Writes the host config: `guests` guests `g00`…, each granted its own namespace
/// `<prefix>-gNN`, sharing the Leases of `group` in `lease_ns`.
fn host_config(dir: &Path, group: &str, lease_ns: &str, prefix: &str, guests: usize) -> PathBuf {
    let module = wasm("stamp_mark");
    let mut toml = format!(
        "[replicas]\nnamespace = \"{lease_ns}\"\ngroup = \"{group}\"\nshards = 16\nlease_duration_ms = {}\nrenew_deadline_ms = 2500\nretry_period_ms = 500\nrebalance_after_ms = 2000\n",
        LEASE.as_millis()
    );
    for g in 0..guests {
        toml.push_str(&format!(
            "\n[[guest]]\nname = \"g{g:02}\"\nmodule = \"{}\"\n[guest.grant]\nnamespaces = [\"{prefix}-g{g:02}\"]\n",
            module.display()
        ));
    }
    let path = dir.join(format!("{group}.toml"));
    std::fs::write(&path, toml).unwrap();
    path
}

/// Who serves each guest, by the replicas' own `/status`: guest → replicas serving it.
async fn serving(replicas: &[Replica]) -> BTreeMap<String, Vec<String>> {
    let mut by_guest: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in replicas {
        if let Some(s) = r.status().await {
            for g in s.guests {
                let entry = by_guest.entry(g.name.clone()).or_default();
                if g.state == GuestState::Serving {
                    entry.push(r.id.clone());
                }
            }
        }
    }
    by_guest
}

/// Waits until every one of `guests` guests is served by exactly one replica, and every
/// replica in `expect` serves at least one; returns the guests per replica.
async fn wait_spread(
    replicas: &[Replica],
    guests: usize,
    expect: &[&str],
    timeout: Duration,
) -> BTreeMap<String, usize> {
    let started = Instant::now();
    loop {
        let by_guest = serving(replicas).await;
        let mut per: BTreeMap<String, usize> = BTreeMap::new();
        let exactly_one = by_guest.len() == guests && by_guest.values().all(|v| v.len() == 1);
        for v in by_guest.values() {
            for r in v {
                *per.entry(r.clone()).or_default() += 1;
            }
        }
        if exactly_one && expect.iter().all(|id| per.get(*id).is_some_and(|n| *n > 0)) {
            return per;
        }
        assert!(
            started.elapsed() < timeout,
            "guests not spread over {expect:?} within {timeout:?}: {by_guest:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`wait_spread`], until `settled` holds of the spread too: rebalancing may move shards for a
/// while after a first spread.
async fn wait_spread_until(
    replicas: &[Replica],
    guests: usize,
    expect: &[&str],
    timeout: Duration,
    settled: impl AsyncFn(&BTreeMap<String, usize>) -> bool,
) -> BTreeMap<String, usize> {
    let started = Instant::now();
    loop {
        let per = wait_spread(replicas, guests, expect, timeout).await;
        if settled(&per).await {
            return per;
        }
        assert!(
            started.elapsed() < timeout,
            "the spread did not settle within {timeout:?}: {per:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The guests replica `id` serves now.
async fn guests_of(r: &Replica) -> Vec<String> {
    r.status()
        .await
        .map(|s| {
            s.guests
                .into_iter()
                .filter(|g| g.state == GuestState::Serving)
                .map(|g| g.name)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until every guest in `moved` is served by one of `replicas` (the survivors).
async fn wait_moved(replicas: &[&Replica], moved: &[String], timeout: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let mut served = BTreeSet::new();
        for r in replicas {
            served.extend(guests_of(r).await);
        }
        if moved.iter().all(|g| served.contains(g)) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "guests {moved:?} not taken over within {timeout:?}; served: {served:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_objects(client: &kube::Client, prefix: &str, guests: usize) {
    for g in 0..guests {
        let ns = format!("{prefix}-g{g:02}");
        common::namespace(client, &ns).await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        for o in 0..2 {
            api.create(
                &PostParams::default(),
                &common::host::stamped(&format!("o{o}"), "0"),
            )
            .await
            .unwrap();
        }
    }
}

async fn set_v(client: &kube::Client, ns: &str, name: &str, v: u64) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({ "data": { "v": v.to_string() } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn seen(client: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get(name)
        .await
        .ok()?
        .metadata
        .annotations?
        .get(SEEN)
        .cloned()
}

/// One reconcile, as the guest recorded it.
#[derive(Debug, Clone)]
struct Mark {
    replica: String,
    key: String,
    start: u64,
    end: u64,
}

async fn marks(client: &kube::Client, prefix: &str, guests: usize) -> Vec<Mark> {
    let mut out = Vec::new();
    for g in 0..guests {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("{prefix}-g{g:02}"));
        let lp = ListParams::default().labels(&format!("{MARKER}=true"));
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
    }
    out
}

/// Reconciles of one guest (one namespace) by two replicas whose intervals overlap.
fn overlaps(marks: &[Mark]) -> Vec<(Mark, Mark)> {
    let mut by_guest: BTreeMap<String, Vec<&Mark>> = BTreeMap::new();
    for m in marks {
        let guest = m.key.split('/').next().unwrap_or("").to_string();
        by_guest.entry(guest).or_default().push(m);
    }
    let mut bad = Vec::new();
    for ms in by_guest.values_mut() {
        ms.sort_by_key(|m| m.start);
        // Sweep: the latest-ending interval so far, by replica.
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

/// These tests' own control plane: the Lease traffic test counts every Lease write the API
/// server serves, which other tests' hosts would add to.
fn control_plane() -> &'static ControlPlane {
    static CP: std::sync::OnceLock<Result<ControlPlane, String>> = std::sync::OnceLock::new();
    ControlPlane::own(&CP, &[])
}

/// The tests of this file one at a time: each runs three hosts, and the Lease traffic test
/// counts every Lease write the API server serves.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

fn rounds() -> usize {
    std::env::var("RECONCILED_REPLICA_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

fn summary(label: &str, v: &[Duration]) -> String {
    let mut ms: Vec<u128> = v.iter().map(|d| d.as_millis()).collect();
    ms.sort_unstable();
    format!(
        "{label}: n={} min={} median={} max={} ms, all: {ms:?}",
        ms.len(),
        ms.first().unwrap_or(&0),
        ms.get(ms.len() / 2).unwrap_or(&0),
        ms.last().unwrap_or(&0)
    )
}

/// Three replicas, 30 guests, a steady stream of edits: spread, then kills, rolling restarts
/// and API server cuts, each measured; then every object ends reconciled and the guest's own
/// records show no two replicas reconciling one guest at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_thirty_guests_and_survive_kills_cuts_and_rolling_restarts() {
    let _serial = serial().await;
    let cp = control_plane();
    let client = cp.admin_client();
    let dir = KeepOnFailure(TempDir::new("replicas"));
    let dir = &dir.0;
    let (prefix, guests) = ("chaos", 30);
    common::namespace(&client, "chaos-leases").await;
    create_objects(&client, prefix, guests).await;
    let config = host_config(&dir.0, "chaos", "chaos-leases", prefix, guests);
    let mut replicas = Vec::new();
    for id in ["r0", "r1", "r2"] {
        replicas.push(Replica::new(cp, &dir.0, id, &config).await);
    }
    let ids = ["r0", "r1", "r2"];

    // Spread: every guest on exactly one replica, each replica between 5 and 15.
    let per = wait_spread(&replicas, guests, &ids, Duration::from_secs(90)).await;
    // Let rebalancing settle (a moved shard's plan is kept for `rebalance_after`).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let settled = wait_spread_until(
        &replicas,
        guests,
        &ids,
        Duration::from_secs(60),
        async |p| p.values().all(|n| (5..=15).contains(n)),
    )
    .await;
    eprintln!("spread at first sight {per:?}, settled {settled:?}");

    // A steady stream of edits throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(1));
    let editor = tokio::spawn({
        let (client, stop, counter) = (client.clone(), stop.clone(), counter.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let g = fastrand::usize(..guests);
                let o = fastrand::usize(..2);
                set_v(&client, &format!("{prefix}-g{g:02}"), &format!("o{o}"), n).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });

    let mut failovers = Vec::new();
    let mut first_reconciles = Vec::new();
    let mut handoffs = Vec::new();
    let mut fences = Vec::new();
    for round in 0..rounds() {
        // kill -9: the victim's guests move once its Leases expire, with no relist.
        let victim = round % 3;
        let moved = guests_of(&replicas[victim]).await;
        step(&format!(
            "round {round}: kill -9 {} (serving {moved:?})",
            ids[victim]
        ));
        assert!(
            !moved.is_empty(),
            "round {round}: {} serves nothing",
            ids[victim]
        );
        let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
        let mut relists_before = 0;
        for i in &survivors {
            relists_before += replicas[*i].relists().await;
        }
        let probe_ns = format!("{prefix}-{}", moved[0]);
        let v = counter.fetch_add(1, Ordering::Relaxed);
        replicas[victim].kill9();
        let killed = Instant::now();
        set_v(&client, &probe_ns, "o0", v).await;
        let others: Vec<&Replica> = survivors.iter().map(|i| &replicas[*i]).collect();
        failovers.push(wait_moved(&others, &moved, LEASE + Duration::from_secs(10)).await);
        common::wait::wait_until_async(
            "the probe edit reconciled",
            Duration::from_secs(20),
            || {
                let (client, ns) = (client.clone(), probe_ns.clone());
                // The edit stream may edit the probe again meanwhile, with a higher value: a
                // stamp of that one counts too.
                async move {
                    seen(&client, &ns, "o0")
                        .await
                        .and_then(|s| s.strip_prefix("v1:")?.parse::<u64>().ok())
                        .is_some_and(|n| n >= v)
                }
            },
        )
        .await;
        first_reconciles.push(killed.elapsed());
        step(&format!(
            "round {round}: {moved:?} taken over; probe {probe_ns}/o0 reconciled"
        ));
        let mut relists_after = 0;
        for i in &survivors {
            relists_after += replicas[*i].relists().await;
        }
        assert_eq!(
            relists_after, relists_before,
            "round {round}: a survivor relisted to take over"
        );
        replicas[victim].start();
        wait_spread(&replicas, guests, &ids, Duration::from_secs(60)).await;

        // SIGTERM: a rolling update hands the shards over at once.
        let victim = (round + 1) % 3;
        let moved = guests_of(&replicas[victim]).await;
        let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
        step(&format!(
            "round {round}: SIGTERM {} (serving {moved:?})",
            ids[victim]
        ));
        let mut child = replicas[victim].sigterm();
        let others: Vec<&Replica> = survivors.iter().map(|i| &replicas[*i]).collect();
        handoffs.push(wait_moved(&others, &moved, Duration::from_secs(10)).await);
        assert!(child.wait().unwrap().success(), "SIGTERM: a clean exit");
        replicas[victim].start();
        wait_spread(&replicas, guests, &ids, Duration::from_secs(60)).await;

        // An API server cut: the cut replica stops its workers by the renew deadline, and the
        // others take over once the Leases expire.
        let victim = (round + 2) % 3;
        let moved = guests_of(&replicas[victim]).await;
        step(&format!(
            "round {round}: cut {} off the API server (serving {moved:?})",
            ids[victim]
        ));
        replicas[victim].proxy.pause();
        let cut = Instant::now();
        common::wait::wait_until_async(
            "the cut replica stops serving",
            Duration::from_secs(10),
            || {
                let r = &replicas[victim];
                async move { guests_of(r).await.is_empty() }
            },
        )
        .await;
        fences.push(cut.elapsed());
        let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
        let others: Vec<&Replica> = survivors.iter().map(|i| &replicas[*i]).collect();
        wait_moved(&others, &moved, LEASE + Duration::from_secs(10)).await;
        step(&format!("round {round}: {} reconnected", ids[victim]));
        replicas[victim].proxy.resume();
        wait_spread(&replicas, guests, &ids, Duration::from_secs(60)).await;
    }
    stop.store(true, Ordering::Relaxed);
    editor.await.unwrap();

    // Every object ends reconciled: its stamp names its last value.
    common::wait::wait_until_async(
        "every object stamped with its last value",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            async move {
                for g in 0..guests {
                    let ns = format!("{prefix}-g{g:02}");
                    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
                    let lp = ListParams::default().labels(&format!("{ENABLED}=true"));
                    for cm in api.list(&lp).await.unwrap() {
                        let v = cm
                            .data
                            .as_ref()
                            .and_then(|d| d.get("v"))
                            .cloned()
                            .unwrap_or_default();
                        let s = cm
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(SEEN))
                            .cloned();
                        if s.as_deref() != Some(&format!("v1:{v}")) {
                            return false;
                        }
                    }
                }
                true
            }
        },
    )
    .await;

    let all = marks(&client, prefix, guests).await;
    let bad = overlaps(&all);
    eprintln!(
        "{}",
        summary(
            "failover after kill -9 (guests serving elsewhere)",
            &failovers
        )
    );
    eprintln!(
        "{}",
        summary("kill -9 to the probe edit reconciled", &first_reconciles)
    );
    eprintln!("{}", summary("SIGTERM hand-off", &handoffs));
    eprintln!(
        "{}",
        summary(
            "API server cut to the cut replica's workers stopped",
            &fences
        )
    );
    eprintln!(
        "{} reconciles recorded, {} overlapping",
        all.len(),
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "two replicas reconciled one guest at once: {:?}",
        &bad[..bad.len().min(5)]
    );
    assert!(
        all.len() > guests * 2,
        "the guest recorded its reconciles: {}",
        all.len()
    );
    for f in &failovers {
        assert!(
            *f <= LEASE + Duration::from_secs(2),
            "{}",
            summary("failover", &failovers)
        );
    }
    for h in &handoffs {
        assert!(
            *h <= Duration::from_secs(2),
            "{}",
            summary("SIGTERM hand-off", &handoffs)
        );
    }
    for f in &fences {
        // The renew deadline (2.5 s) plus the watchdog's tick and the status poll.
        assert!(
            *f <= Duration::from_millis(3500),
            "{}",
            summary("fence", &fences)
        );
    }
}

/// Sums the samples of `family` in a Prometheus text.
fn sum_of(text: &str, family: &str, filter: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family) && filter(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn metrics(r: &Replica) -> String {
    reconciled::ops::http::get(r.addr, "/metrics")
        .await
        .unwrap()
        .1
}

/// Lease writes the API server has served so far (all clients), by its own metrics.
fn server_lease_writes(cp: &ControlPlane) -> f64 {
    let out = cp
        .kubectl()
        .args(["get", "--raw", "/metrics"])
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl get --raw /metrics");
    let text = String::from_utf8_lossy(&out.stdout);
    sum_of(&text, "apiserver_request_total{", |l| {
        l.contains("resource=\"leases\"")
            && ["\"POST\"", "\"PUT\"", "\"PATCH\"", "\"DELETE\""]
                .iter()
                .any(|v| l.contains(&format!("verb={v}")))
    })
}

/// With the default timings, 100 guests on three replicas cost the API server at most 5 Lease
/// writes per second in all, measured both by the replicas and by the API server; and what a
/// replica pays in memory for keeping the guests it does not run warm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_guests_on_three_replicas_cost_at_most_five_lease_writes_a_second() {
    let _serial = serial().await;
    let cp = control_plane();
    let client = cp.admin_client();
    let dir = TempDir::new("replicas-traffic");
    common::namespace(&client, "traffic-leases").await;
    common::namespace(&client, "traffic").await;
    let module = wasm("stamp_mark");
    // Default timings, but a quick rebalance so that the test need not wait 15 s for it.
    let mut toml =
        "[replicas]\nnamespace = \"traffic-leases\"\ngroup = \"traffic\"\nrebalance_after_ms = 2000\n"
            .to_string();
    for g in 0..100 {
        toml.push_str(&format!(
            "\n[[guest]]\nname = \"t{g:03}\"\nmodule = \"{}\"\n[guest.grant]\nnamespaces = [\"traffic\"]\n",
            module.display()
        ));
    }
    let config = dir.0.join("traffic.toml");
    std::fs::write(&config, toml).unwrap();
    let ids = ["t0", "t1", "t2"];
    let mut replicas = Vec::new();
    for id in ids {
        replicas.push(Replica::new(cp, &dir.0, id, &config).await);
    }
    let per = wait_spread(&replicas, 100, &ids, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let per_settled = wait_spread(&replicas, 100, &ids, Duration::from_secs(30)).await;
    eprintln!("100 guests spread {per:?}, settled {per_settled:?}");

    let window = Duration::from_secs(30);
    let ours = |texts: &[String]| -> f64 {
        texts
            .iter()
            .map(|t| sum_of(t, "reconciled_lease_writes_total", |_| true))
            .sum()
    };
    let mut before = Vec::new();
    for r in &replicas {
        before.push(metrics(r).await);
    }
    let server_before = server_lease_writes(cp);
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let server_after = server_lease_writes(cp);
    let mut after = Vec::new();
    for r in &replicas {
        after.push(metrics(r).await);
    }
    let secs = started.elapsed().as_secs_f64();
    let ours_rate = (ours(&after) - ours(&before)) / secs;
    let server_rate = (server_after - server_before) / secs;
    eprintln!(
        "Lease writes over {secs:.1} s: {ours_rate:.2}/s counted by the three replicas, {server_rate:.2}/s served by the API server (every client's, the controller-manager's included)"
    );
    assert!(
        ours_rate <= 5.0,
        "{ours_rate:.2} Lease writes per second from the replicas"
    );
    assert!(
        ours_rate > 1.0,
        "the replicas renew their Leases: {ours_rate:.2}/s"
    );
    assert!(
        server_rate <= 5.0 + 1.0,
        "the API server served {server_rate:.2} Lease writes per second"
    );

    // What keeping guests warm costs: a replica holds all 100, and runs about a third.
    let rss: Vec<f64> = after
        .iter()
        .map(|t| sum_of(t, "process_resident_memory_bytes", |_| true))
        .collect();
    let compiled: Vec<f64> = after
        .iter()
        .map(|t| sum_of(t, "reconciled_module_compiled_bytes", |_| true) / 100.0)
        .collect();
    let solo_config = dir.0.join("solo.toml");
    std::fs::write(
        &solo_config,
        format!(
            "[[guest]]\nname = \"solo\"\nmodule = \"{}\"\n[guest.grant]\nnamespaces = [\"traffic\"]\n",
            module.display()
        ),
    )
    .unwrap();
    let solo = Replica::solo(cp, &dir.0, &solo_config).await;
    let solo_rss = common::wait::wait_until_async(
        "the one-guest host serves",
        Duration::from_secs(60),
        || {
            let s = &solo;
            async move {
                s.status()
                    .await
                    .is_some_and(|s| s.guests.iter().all(|g| g.state == GuestState::Serving))
            }
        },
    )
    .await;
    let _ = solo_rss;
    let solo_rss = sum_of(
        &metrics(&solo).await,
        "process_resident_memory_bytes",
        |_| true,
    );
    let per_guest: Vec<f64> = rss.iter().map(|r| (r - solo_rss) / 99.0).collect();
    eprintln!(
        "warm standby: RSS of the three replicas with 100 guests each {:?} MiB, of a host with one guest {:.1} MiB: {:?} KiB per guest loaded (compiled code {:?} KiB of it)",
        rss.iter()
            .map(|r| (r / 1048576.0 * 10.0).round() / 10.0)
            .collect::<Vec<_>>(),
        solo_rss / 1048576.0,
        per_guest
            .iter()
            .map(|b| (b / 1024.0).round())
            .collect::<Vec<_>>(),
        compiled
            .iter()
            .map(|b| (b / 1024.0).round())
            .collect::<Vec<_>>()
    );
}

/// The gate is a fence: closed, nothing of the guest starts; closed under a reconcile that spins
/// (and would run for its whole 30 s deadline), the reconcile is cancelled at once, so the
/// replica may hand the shard over within its drain wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_gate_cancels_a_reconcile_in_flight_at_once() {
    let _serial = serial().await;
    let cp = control_plane();
    let client = cp.admin_client();
    let ns = "gate-cancel";
    common::namespace(&client, ns).await;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &common::host::stamped("spin", "1"))
        .await
        .unwrap();
    let mut settings = Settings {
        grant: Grant::namespaces([ns]),
        ..Settings::new("spinner")
    };
    settings.limits.deadline = Duration::from_secs(30);
    let gate = Gate::closed("shard 0 is held by replica b");
    let (controller, _factory, _runtime) =
        common::controllers::start_gated(client, "stamp_spin", settings, gate.clone())
            .await
            .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = |c: &Controller| c.counters().started.load(Ordering::Relaxed);
    assert_eq!(started(&controller), 0, "a closed gate starts nothing");

    gate.set_open();
    common::wait::wait_until(
        "the spinning reconcile holds a pass",
        Duration::from_secs(10),
        || gate.running() == 1,
    )
    .await;
    let closed = Instant::now();
    gate.close("shard 0: handed over to replica b");
    tokio::time::timeout(Duration::from_secs(1), gate.drained())
        .await
        .expect("drained within a second of the close");
    let took = closed.elapsed();
    assert!(took < Duration::from_millis(500), "cancelled in {took:?}");
    assert_eq!(controller.counters().cancelled.load(Ordering::Relaxed), 1);
    let before = started(&controller);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        started(&controller),
        before,
        "the requeued key waits for the gate"
    );
    assert_eq!(
        controller
            .counters()
            .concurrent_same_key
            .load(Ordering::Relaxed),
        0
    );
    controller.stop().await;
}

/// A replica the API server does not let read its Leases takes no shard, so every guest would
/// sit in standby: readiness says so, naming the namespace and the rule to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_lease_rbac_is_not_ready_and_names_the_rule() {
    let cp = control_plane();
    common::namespace(&cp.admin_client(), "norbac-leases").await;
    let user = cp.user("no-leases", &[]).unwrap();
    let client = kube::Client::try_from(user.config.clone()).unwrap();
    let mut config = reconciled::replicas::Config::new("r0", "norbac-leases");
    config.group = "norbac".into();
    let replicas = reconciled::replicas::Replicas::start(client, config)
        .await
        .unwrap();
    let mut problem = None;
    // Syncing first, which is a reason not to be ready too; then forbidden, for good.
    common::wait::wait_until(
        "the replica reports its trouble",
        Duration::from_secs(20),
        || {
            problem = replicas.problem();
            problem.as_deref().is_some_and(|p| !p.ends_with("Syncing"))
        },
    )
    .await;
    let problem = problem.unwrap();
    eprintln!("readiness: {problem}");
    assert!(
        problem.contains("namespace norbac-leases")
            && problem.contains("leases")
            && problem.contains("Forbidden"),
        "{problem}"
    );
    assert!(
        replicas.snapshot().held.is_empty(),
        "no shard without its Lease"
    );
}

/// A renew that reached the API server but whose answer was lost (its task cancelled as the
/// replica stopped) left the replica holding an older copy of the Lease; releasing from it
/// conflicted, and the shard waited a whole lease duration instead of moving at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_renew_whose_answer_was_lost_still_frees_the_lease() {
    use reconciled::replicas::lease::{Error, Writer};
    let cp = control_plane();
    let admin = cp.admin_client();
    common::namespace(&admin, "lost-renew-leases").await;
    let writer = |id: &str| {
        Writer::new(
            admin.clone(),
            "lost-renew-leases",
            ("lost-renew", id, "test-process"),
            LEASE,
            Duration::from_secs(5),
        )
    };
    let ours = writer("r0");
    let stale = ours
        .acquire("lost-renew-shard-0", "shard", None)
        .await
        .unwrap();
    let renewed = ours.renew(&stale).await.unwrap();
    assert_ne!(
        stale.metadata.resource_version, renewed.metadata.resource_version,
        "the renew wrote a new version"
    );

    let released = ours.release(&stale).await.unwrap();
    let spec = released.spec.unwrap();
    assert_eq!(spec.holder_identity, None, "released from the stale copy");
    assert_eq!(spec.lease_duration_seconds, Some(1));

    // Once another replica holds it, a stale copy releases nothing.
    let theirs = writer("r1");
    let seen = ours.get("lost-renew-shard-0").await.unwrap();
    theirs
        .acquire("lost-renew-shard-0", "shard", Some(&seen))
        .await
        .unwrap();
    let names = |v: Vec<k8s_openapi::api::coordination::v1::Lease>| -> Vec<String> {
        v.into_iter().filter_map(|l| l.metadata.name).collect()
    };
    assert_eq!(
        names(theirs.held_here().await.unwrap()),
        ["lost-renew-shard-0"],
        "r1 finds what it holds on the server"
    );
    assert!(ours.held_here().await.unwrap().is_empty());
    match ours.release(&renewed).await {
        Err(Error::Conflict { .. }) => {}
        other => panic!("a Lease held by r1 is not released by r0: {other:?}"),
    }
    let now = ours.get("lost-renew-shard-0").await.unwrap();
    assert_eq!(
        now.spec.unwrap().holder_identity.as_deref(),
        Some("r1"),
        "r1 still holds it"
    );
}

/// The replica Lease `name` in `ns`: its holder and instance token, `None` once deleted.
async fn replica_lease(client: &kube::Client, ns: &str, name: &str) -> Option<(String, String)> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), ns);
    let lease = api.get_opt(name).await.unwrap()?;
    let token = reconciled::replicas::instance::of(&lease)
        .unwrap_or_default()
        .to_string();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    Some((holder, token))
}

/// A second process started with the replica id of a live one refuses to run, naming the
/// other, and takes nothing from it; a process started with the id of one killed a moment ago
/// takes the identity over once its Lease has gone unrenewed; and a replica Lease left behind
/// by a kill is deleted by a survivor once it has lain expired for several lease durations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_replica_id_is_refused_and_a_killed_replicas_lease_is_collected() {
    let _serial = serial().await;
    let cp = control_plane();
    let client = cp.admin_client();
    let ns = "dup-leases";
    common::namespace(&client, ns).await;
    create_objects(&client, "dup", 2).await;
    let dir = KeepOnFailure(TempDir::new("replicas-dup"));
    let twin_dir = TempDir::new("replicas-dup-twin");
    let config = host_config(&dir.0.0, "dup", ns, "dup", 2);
    let lease_a = "dup-replica-r-a";

    step("replica r-a starts and stamps its Lease with its instance");
    let mut a = Replica::new(cp, &dir.0.0, "r-a", &config).await;
    let a_pid = a.pid().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        if let Some((_, t)) = replica_lease(&client, ns, lease_a).await
            && t.split('/').nth(1) == Some(a_pid.as_str())
        {
            break t;
        }
        assert!(Instant::now() < deadline, "r-a's Lease names its process");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    step("a second process with r-a's id starts: it refuses, naming r-a's process");
    let mut twin = Replica::new(cp, &twin_dir.0, "r-a", &config).await;
    let status = twin
        .exited(LEASE * 3)
        .await
        .expect("the twin refuses within a lease duration or so");
    let log = std::fs::read_to_string(&twin.log).unwrap();
    assert!(!status.success(), "{status}");
    assert!(
        log.contains("is in use by another running process") && log.contains(&token),
        "the twin's log names the process holding r-a ({token}):\n{log}"
    );
    assert_eq!(
        replica_lease(&client, ns, lease_a).await,
        Some(("r-a".to_string(), token.clone())),
        "r-a's Lease is still r-a's process's"
    );
    assert!(a.status().await.is_some(), "r-a still runs");

    step("r-b joins; r-a is killed; a new r-a process takes the identity over");
    let b = Replica::new(cp, &dir.0.0, "r-b", &config).await;
    common::wait::wait_until_async("r-b sees r-a", Duration::from_secs(30), async || {
        b.status()
            .await
            .and_then(|s| s.replicas)
            .is_some_and(|r| r.members.len() == 2)
    })
    .await;
    a.kill9();
    let killed = Instant::now();
    let mut again = Replica::new_stopped(cp, &twin_dir.0, "r-a", &config).await;
    again.start();
    let again_pid = again.pid().unwrap().to_string();
    common::wait::wait_until_async(
        "the new r-a process holds its Lease",
        LEASE * 4,
        async || {
            replica_lease(&client, ns, lease_a)
                .await
                .is_some_and(|(_, t)| t.split('/').nth(1) == Some(again_pid.as_str()))
        },
    )
    .await;
    eprintln!("r-a restarted {:?} after the kill", killed.elapsed());
    assert!(
        again.exited(Duration::ZERO).await.is_none(),
        "the new r-a runs"
    );

    step("the new r-a is killed too: r-b deletes r-a's Lease once it has lain expired");
    again.kill9();
    let killed = Instant::now();
    // The Lease's clock starts at its last renew, which may come a moment before the kill (or,
    // sent before it, be stored a moment after): the latest renew seen while it lies there.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    let mut renewed = None;
    while let Some(lease) = leases.get_opt(lease_a).await.unwrap() {
        renewed = lease
            .spec
            .and_then(|s| s.renew_time)
            .map(|t| t.0)
            .or(renewed);
        assert!(
            killed.elapsed() < LEASE * 10,
            "r-a's Lease is collected: not within {:?}",
            LEASE * 10
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "r-a's Lease collected {:?} after the kill",
        killed.elapsed()
    );
    let renewed = renewed.expect("r-a's Lease had a renew time");
    let unrenewed = k8s_openapi::jiff::Timestamp::now().duration_since(renewed);
    let due = LEASE * (1 + reconciled::replicas::stale::AFTER_DURATIONS);
    assert!(
        unrenewed >= k8s_openapi::jiff::SignedDuration::try_from(due).unwrap(),
        "not before it lay expired {} lease durations: collected {unrenewed:?} after its last renew",
        reconciled::replicas::stale::AFTER_DURATIONS
    );
    assert!(
        replica_lease(&client, ns, "dup-replica-r-b")
            .await
            .is_some(),
        "r-b's own Lease stays"
    );
    let text = metrics(&b).await;
    assert!(
        sum_of(&text, "reconciled_leases_collected", |_| true) >= 1.0,
        "r-b counts what it collected"
    );
}

/// Turns `[replicas] standby = "cold"` on in a config `host_config` wrote.
fn cold(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    let cold = text.replacen("[replicas]\n", "[replicas]\nstandby = \"cold\"\n", 1);
    assert_ne!(text, cold, "{text}");
    std::fs::write(config, cold).unwrap();
}

/// Checks that every guest replica `r` does not serve is parked: standby, saying so, with no
/// informer and nothing in memory here; returns how many are. Parking follows a hand-over
/// asynchronously, so it first waits a little for the last one to end.
async fn parked_on(r: &Replica) -> usize {
    common::wait::wait_until_async(
        &format!("{} parks the guests it does not serve", r.id),
        Duration::from_secs(10),
        async || {
            r.status().await.is_some_and(|s| {
                s.guests
                    .iter()
                    .all(|g| g.state == GuestState::Serving || g.informers.is_empty())
            })
        },
    )
    .await;
    let status = r.status().await.expect("the replica answers");
    let mut parked = 0;
    for g in status.guests {
        if g.state == GuestState::Serving {
            assert!(
                !g.informers.is_empty(),
                "{}: serving, with informers",
                g.name
            );
            continue;
        }
        assert_eq!(
            g.state,
            GuestState::Standby,
            "{} on {}: {g:?}",
            g.name,
            r.id
        );
        let reason = g.reason.clone().unwrap_or_default();
        assert!(reason.contains("cold standby"), "{reason}");
        assert!(
            g.informers.is_empty() && g.memory.is_none(),
            "{} is not loaded on {}: {g:?}",
            g.name,
            r.id
        );
        parked += 1;
    }
    parked
}

/// Cold standby: each of two replicas loads only the guests whose shard it holds; a kill moves
/// the dead one's guests to the survivor, which loads them, syncs and reconciles; a restarted
/// replica takes its share back and the survivor parks what it handed over. No two replicas
/// reconcile one guest at once throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_cold_standby_a_replica_loads_only_the_guests_of_its_shards_and_takes_over_by_loading()
 {
    let _serial = serial().await;
    let cp = control_plane();
    let client = cp.admin_client();
    let dir = KeepOnFailure(TempDir::new("replicas-cold"));
    let dir = &dir.0;
    let (prefix, guests) = ("cold", 8);
    common::namespace(&client, "cold-leases").await;
    create_objects(&client, prefix, guests).await;
    let config = host_config(&dir.0, "cold", "cold-leases", prefix, guests);
    cold(&config);
    let ids = ["c0", "c1"];
    let mut replicas = Vec::new();
    for id in ids {
        replicas.push(Replica::new(cp, &dir.0, id, &config).await);
    }

    step("two replicas share eight guests, each loading only its own");
    wait_spread(&replicas, guests, &ids, Duration::from_secs(90)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Every guest serves or is parked on each replica, which parks the other's guests.
    wait_spread_until(
        &replicas,
        guests,
        &ids,
        Duration::from_secs(60),
        async |per| {
            for r in &replicas {
                let parked = parked_on(r).await;
                if parked + per[&r.id] != guests || parked == 0 {
                    return false;
                }
            }
            true
        },
    )
    .await;

    step("kill -9 c0: c1 loads its guests and reconciles them");
    let moved = guests_of(&replicas[0]).await;
    let probe_ns = format!("{prefix}-{}", moved[0]);
    replicas[0].kill9();
    let killed = Instant::now();
    set_v(&client, &probe_ns, "o0", 7).await;
    let took_over = wait_moved(&[&replicas[1]], &moved, LEASE + Duration::from_secs(20)).await;
    common::wait::wait_until_async(
        "the probe edit reconciled by the survivor",
        Duration::from_secs(20),
        || {
            let (client, ns) = (client.clone(), probe_ns.clone());
            async move { seen(&client, &ns, "o0").await.as_deref() == Some("v1:7") }
        },
    )
    .await;
    eprintln!(
        "cold takeover of {moved:?}: served {took_over:?} and probe reconciled {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(parked_on(&replicas[1]).await, 0, "c1 runs every guest now");

    step("c0 comes back: it takes its share, and c1 parks what it handed over");
    replicas[0].start();
    wait_spread(&replicas, guests, &ids, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    // c1 handed some back.
    let c1 = &replicas[1];
    wait_spread_until(
        &replicas,
        guests,
        &ids,
        Duration::from_secs(60),
        async |_| parked_on(c1).await > 0,
    )
    .await;

    step("every object reconciled, and no two replicas reconciled one guest at once");
    for g in 0..guests {
        set_v(&client, &format!("{prefix}-g{g:02}"), "o1", 9).await;
    }
    common::wait::wait_until_async(
        "every guest's edit reconciled",
        Duration::from_secs(30),
        || {
            let client = client.clone();
            async move {
                for g in 0..guests {
                    let ns = format!("{prefix}-g{g:02}");
                    if seen(&client, &ns, "o1").await.as_deref() != Some("v1:9") {
                        return false;
                    }
                }
                true
            }
        },
    )
    .await;
    let overlapping = overlaps(&marks(&client, prefix, guests).await);
    assert!(overlapping.is_empty(), "{overlapping:?}");
}

/// A replica restarted under its identity first waits for its old process's Lease to go
/// unrenewed (about a lease duration) before it joins. The Leases it saw change meanwhile must
/// count from when it saw them: a shard whose holder died while it waited is taken as soon as it
/// joins, not a whole lease duration later, as it was when its elector took every Lease as
/// just renewed at its first look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_takes_a_dead_holders_shard_as_it_joins_not_a_lease_later() {
    let _serial = serial().await;
    let cp = control_plane();
    let client = cp.admin_client();
    let lease_ns = "rejoin-leases";
    common::namespace(&client, lease_ns).await;
    create_objects(&client, "rejoin", 1).await;
    let dir = KeepOnFailure(TempDir::new("replicas-rejoin"));
    let dir = &dir.0;
    let config = host_config(&dir.0, "rejoin", lease_ns, "rejoin", 1);
    let ids = ["j0", "j1"];
    let mut replicas = Vec::new();
    for id in ids {
        replicas.push(Replica::new(cp, &dir.0, id, &config).await);
    }
    wait_spread(&replicas, 1, &[], Duration::from_secs(60)).await;
    let holder = if guests_of(&replicas[0]).await.is_empty() {
        1
    } else {
        0
    };
    let other = 1 - holder;

    step(&format!(
        "restart {} (it waits for its old Lease), then kill the holder {}",
        ids[other], ids[holder]
    ));
    replicas[other].kill9();
    replicas[other].start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    replicas[holder].kill9();
    // Its endpoints answer once it has joined.
    let joined =
        common::wait::wait_until_async("the restarted replica joins", LEASE * 4, async || {
            replicas[other].status().await.is_some()
        })
        .await;
    let served = wait_moved(&[&replicas[other]], &["g00".to_string()], LEASE * 4).await;
    eprintln!(
        "the restarted replica joined {joined:?} after the holder's kill, and served g00 {served:?} after joining"
    );
    assert!(
        joined >= LEASE / 2,
        "it joined {joined:?} after the kill: it should have waited for its old Lease"
    );
    assert!(
        served < LEASE,
        "it served g00 {served:?} after joining, {joined:?} after the holder's kill: the holder's Lease, which it saw renewed last before it joined, counted from its join"
    );
}
