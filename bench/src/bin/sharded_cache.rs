//! Cache bytes and initial sync per replica when one kind is split across 1, 2 and 3 replicas by
//! server-side sharding (KEP-5866): each replica's informer asks for one hash range of the uids.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin sharded_cache -- [OBJECTS]
//! ```
//!
//! The parent starts the loopback control plane with `ShardedListAndWatch` on and fills one
//! namespace with OBJECTS ConfigMaps of about 1 KiB (100 000 by default). For k = 1, 2 and 3, each
//! of the k shards then syncs in a child process of its own, one after another, as k replicas
//! would on k machines; 1 is the unsharded informer. A counting allocator gives each child's
//! live heap once synced. Reconcile throughput per replica is not measured here.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reconciled_bench::{Counting, LIVE};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let [_, kubeconfig, ns, index, count] = &args[..] else {
            bail!("usage: --child <kubeconfig> <ns> <index> <count>")
        };
        return child(kubeconfig, ns, index.parse()?, count.parse()?);
    }
    let n: usize = args
        .first()
        .map_or(Ok(100_000), |a| a.parse())
        .context("OBJECTS")?;
    let cp = testenv::ControlPlane::start_with_args(&["--feature-gates=ShardedListAndWatch=true"])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let _in_runtime = rt.enter();
    let ns = format!("sharded-{n}");
    rt.block_on(reconciled_bench::fill(&cp.admin_client(), &ns, n, |_| None))?;
    println!(
        "| replicas | shard | objects | share | heap MiB | heap B per object of the kind | sync s |"
    );
    println!("|---|---|---|---|---|---|---|");
    for count in 1..=3u64 {
        for index in 0..count {
            let out = Command::new(std::env::current_exe()?)
                .arg("--child")
                .arg(cp.kubeconfig_path())
                .args([&ns, &index.to_string(), &count.to_string()])
                .output()?;
            if !out.status.success() {
                bail!(
                    "shard {index} of {count} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            eprintln!("shard {index} of {count}: {v}");
            let objects = v["count"].as_u64().unwrap_or(0);
            let heap = v["heap"].as_f64().unwrap_or(0.0);
            println!(
                "| {count} | {index} | {objects} | {:.3} | {:.1} | {:.0} | {:.2} |",
                objects as f64 / n as f64,
                heap / (1 << 20) as f64,
                heap / n as f64,
                v["sync_s"].as_f64().unwrap_or(0.0),
            );
        }
    }
    Ok(())
}

fn child(kubeconfig: &str, ns: &str, index: u64, count: u64) -> anyhow::Result<()> {
    use reconciled::informer::shard::{ShardKey, ShardRange};
    use reconciled::informer::{Informer, InformerKey, Options, Scope};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let config = testenv::kubeconfig::load(kubeconfig.as_ref())?;
    rt.block_on(async {
        let client = kube::Client::try_from(config)?;
        let heap0 = LIVE.load(Ordering::Relaxed);
        let started = Instant::now();
        let shard = (count > 1)
            .then(|| ShardRange::nth(ShardKey::Uid, index, count))
            .transpose()?;
        let scope = Scope {
            shard: shard.map(Into::into),
            ..Scope::namespace(ns)
        };
        let informer = Informer::start(
            client,
            InformerKey::new("", "v1", "ConfigMap", scope),
            Options::default(),
        );
        informer.wait_synced(Duration::from_secs(600)).await?;
        let sync_s = started.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let heap = LIVE.load(Ordering::Relaxed) - heap0;
        let report =
            serde_json::json!({"heap": heap, "count": informer.store().len(), "sync_s": sync_s});
        println!("{report}");
        anyhow::Ok(())
    })
}
