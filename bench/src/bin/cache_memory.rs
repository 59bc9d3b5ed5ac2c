//! Cache bytes per object: reconciled's informer store next to a kube-rs `reflector` +
//! `watcher` store of `ConfigMap` and controller-runtime's cache (in Go, as configured by
//! default, with `TransformStripManagedFields`, and that over JSON), holding the same objects
//! from the same apiserver in one run. controller-runtime's figure is the growth of Go's live
//! heap (`HeapAlloc` after two collections) across its sync.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin cache_memory -- [--runs 3] 10000 100000
//! ```
//!
//! The parent starts the loopback control plane and fills one namespace per size with ConfigMaps
//! of about 1 KiB of data (the apiserver adds managedFields as it always does). Each cache then
//! syncs in a child process of its own, so neither sees the other's heap. A counting allocator
//! gives the live heap bytes the cache holds once synced (exact, repeatable); the RSS growth is
//! reported beside it (what the OS sees, allocator slack included).
//!
//! The initial sync is timed in `--runs` rounds (3 by default), each syncing every cache once in
//! a fresh process, in turn, and the median reported: for reconciled reading protobuf (its
//! default for ConfigMaps) and JSON, kube-rs, and the three controller-runtime configurations.
//! Memory is from the first round.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use reconciled_bench::{Counting, LIVE, rss_bytes};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let [_, peer, kubeconfig, ns] = &args[..] else {
            bail!("usage: --child <peer> <kubeconfig> <ns>")
        };
        return child(peer, kubeconfig, ns);
    }
    let mut runs = 3;
    let mut sizes = Vec::new();
    let mut args = args.iter();
    while let Some(a) = args.next() {
        if a == "--runs" {
            runs = args
                .next()
                .context("--runs N")?
                .parse()
                .context("--runs N")?;
        } else {
            sizes.push(a.parse().context("sizes are object counts")?);
        }
    }
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000];
    }
    parent(&sizes, runs.max(1))
}

/// The first of `reports`, with `key` (a duration) replaced by the median over all of them.
fn median_of(key: &str, reports: &[serde_json::Value]) -> serde_json::Value {
    let mut xs: Vec<f64> = reports
        .iter()
        .map(|r| r[key].as_f64().unwrap_or(0.0))
        .collect();
    let mut first = reports[0].clone();
    first[key] = reconciled_bench::median(&mut xs).into();
    first
}

/// One cache to sync: one of ours in a child process, or controller-runtime with its flags.
#[derive(Debug, Clone, Copy)]
enum Peer {
    Child(&'static str),
    ControllerRuntime(&'static [&'static str]),
}

/// In the order of the tables' columns.
const PEERS: [Peer; 7] = [
    Peer::Child("reconciled"),
    Peer::Child("reconciled-json"),
    Peer::Child("kube-rs"),
    // controller-runtime, in Go: its default cache (protobuf, no transform), with
    // TransformStripManagedFields, and that over JSON.
    Peer::ControllerRuntime(&[]),
    Peer::ControllerRuntime(&["--strip-managed-fields"]),
    Peer::ControllerRuntime(&["--strip-managed-fields", "--json"]),
    // Ours again, over protobuf with paged LISTs instead of WatchList.
    Peer::Child("reconciled-paged"),
];

fn run_once(
    peer: Peer,
    cr: &std::path::Path,
    kubeconfig: &std::path::Path,
    ns: &str,
) -> anyhow::Result<serde_json::Value> {
    let out = match peer {
        Peer::Child(name) => Command::new(std::env::current_exe()?)
            .args(["--child", name])
            .arg(kubeconfig)
            .arg(ns)
            .output()?,
        Peer::ControllerRuntime(flags) => Command::new(cr)
            .args([
                "--mode",
                "cache",
                "--get-rounds",
                "1",
                "--namespace",
                ns,
                "--kubeconfig",
            ])
            .arg(kubeconfig)
            .args(flags)
            .output()?,
    };
    if !out.status.success() {
        bail!("{peer:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "{peer:?} printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn parent(sizes: &[usize], runs: usize) -> anyhow::Result<()> {
    let cp = testenv::ControlPlane::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // A kube client needs a runtime to exist in, not only to run on.
    let _in_runtime = rt.enter();
    let mut rows = Vec::new();
    for &n in sizes {
        let ns = format!("mem-{n}");
        rt.block_on(reconciled_bench::fill(&cp.admin_client(), &ns, n, |_| None))?;
        let cr = reconciled_bench::build_peer()?;
        // Every cache once per round, in turn, so that a slow spell of this shared machine
        // falls on all of them rather than on one.
        let mut reports = vec![Vec::new(); PEERS.len()];
        for round in 0..runs {
            for (i, peer) in PEERS.iter().enumerate() {
                let v = run_once(*peer, &cr, cp.kubeconfig_path(), &ns)?;
                eprintln!("{peer:?} ({n}, round {round}): {v}");
                reports[i].push(v);
            }
        }
        let results: Vec<serde_json::Value> = PEERS
            .iter()
            .zip(&reports)
            .map(|(peer, r)| {
                let key = match peer {
                    Peer::Child(_) => "sync_s",
                    Peer::ControllerRuntime(_) => "sync_ms",
                };
                median_of(key, r)
            })
            .collect();
        rows.push((n, results));
    }
    println!(
        "| objects | reconciled heap B/obj | kube-rs heap B/obj | ratio | reconciled RSS B/obj | kube-rs RSS B/obj | RSS ratio | compact-JSON floor B/obj | as served (with managedFields) B/obj | sync s (ours / kube-rs) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (n, r) in &rows {
        let n = *n;
        let per = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0) / n as f64;
        let (ours, peer) = (&r[0], &r[2]);
        println!(
            "| {n} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.1} / {:.1} |",
            per(ours, "heap"),
            per(peer, "heap"),
            per(ours, "heap") / per(peer, "heap"),
            per(ours, "rss"),
            per(peer, "rss"),
            per(ours, "rss") / per(peer, "rss"),
            per(ours, "json_floor"),
            per(ours, "served"),
            ours["sync_s"].as_f64().unwrap_or(0.0),
            peer["sync_s"].as_f64().unwrap_or(0.0),
        );
    }
    println!(
        "\n| objects | reconciled heap B/obj | controller-runtime default B/obj | ratio | controller-runtime with TransformStripManagedFields B/obj | ratio | same over JSON B/obj | sync s (ours / CR default / CR stripped / CR stripped JSON) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (n, r) in &rows {
        let ours = r[0]["heap"].as_f64().unwrap_or(0.0) / *n as f64;
        let cr = |i: usize| r[i]["heap_per_object"].as_f64().unwrap_or(0.0);
        let sync = |i: usize| r[i]["sync_ms"].as_f64().unwrap_or(0.0) / 1e3;
        println!(
            "| {n} | {ours:.0} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.1} / {:.1} / {:.1} / {:.1} |",
            cr(3),
            ours / cr(3),
            cr(4),
            ours / cr(4),
            cr(5),
            r[0]["sync_s"].as_f64().unwrap_or(0.0),
            sync(3),
            sync(4),
            sync(5),
        );
    }
    println!(
        "\n| objects | reconciled, protobuf ms | reconciled, JSON ms | reconciled, protobuf paged ms | kube-rs ms | controller-runtime default ms | CR stripped ms | CR stripped, JSON ms | ratio to CR default | ratio to CR stripped |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (n, r) in &rows {
        let ms = |i: usize| r[i]["sync_s"].as_f64().unwrap_or(0.0) * 1e3;
        let cr = |i: usize| r[i]["sync_ms"].as_f64().unwrap_or(0.0);
        println!(
            "| {n} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
            ms(0),
            ms(1),
            ms(6),
            ms(2),
            cr(3),
            cr(4),
            cr(5),
            ms(0) / cr(3),
            ms(0) / cr(4),
        );
    }
    Ok(())
}

fn child(peer: &str, kubeconfig: &str, ns: &str) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let config = testenv::kubeconfig::load(kubeconfig.as_ref())?;
    rt.block_on(async {
        let client = kube::Client::try_from(config)?;
        // Warm the client (TLS, connection pool) so its buffers are in the baseline.
        Api::<Namespace>::all(client.clone()).get(ns).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (heap0, rss0) = (LIVE.load(Ordering::Relaxed), rss_bytes());
        let started = Instant::now();
        let report = match peer {
            "reconciled" | "reconciled-json" | "reconciled-paged" => {
                use reconciled::informer::{Informer, InformerKey, Options, Scope};
                let key = InformerKey::new("", "v1", "ConfigMap", Scope::namespace(ns));
                let options = Options {
                    protobuf: peer != "reconciled-json",
                    watch_list: peer != "reconciled-paged",
                    ..Options::default()
                };
                let informer = Informer::start(client.clone(), key, options);
                informer.wait_synced(Duration::from_secs(600)).await?;
                let sync_s = started.elapsed().as_secs_f64();
                tokio::time::sleep(Duration::from_secs(1)).await;
                let (heap, rss) = (LIVE.load(Ordering::Relaxed) - heap0, rss_bytes().saturating_sub(rss0));
                let objs = informer.store().all();
                let json_floor: usize = objs.iter().map(|o| o.json().len()).sum();
                let count = objs.len();
                drop(objs);
                // What the apiserver serves, managedFields included, for scale.
                let served: usize = Api::<ConfigMap>::namespaced(client.clone(), ns)
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    .map(|c| serde_json::to_vec(c).map(|v| v.len()).unwrap_or(0))
                    .sum();
                let report = serde_json::json!({"heap": heap, "rss": rss, "count": count, "json_floor": json_floor, "served": served, "sync_s": sync_s});
                drop(informer);
                report
            }
            "kube-rs" => {
                use kube::runtime::{WatchStreamExt, reflector, watcher};
                let (reader, writer) = reflector::store::<ConfigMap>();
                let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
                let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).applied_objects();
                let task = tokio::spawn(async move {
                    futures::pin_mut!(stream);
                    while stream.next().await.is_some() {}
                });
                reader.wait_until_ready().await?;
                let sync_s = started.elapsed().as_secs_f64();
                tokio::time::sleep(Duration::from_secs(1)).await;
                let (heap, rss) = (LIVE.load(Ordering::Relaxed) - heap0, rss_bytes().saturating_sub(rss0));
                let report = serde_json::json!({"heap": heap, "rss": rss, "count": reader.state().len(), "sync_s": sync_s});
                task.abort();
                report
            }
            other => bail!("unknown peer {other}"),
        };
        println!("{report}");
        anyhow::Ok(())
    })
}
