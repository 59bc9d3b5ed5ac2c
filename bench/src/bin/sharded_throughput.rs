//! Reconcile throughput and cache per replica when one guest's keys are split across 1, 2 and 3
//! replicas (`shard_keys = true`), each replica a `reconciled run` process held to a CPU limit,
//! as a pod with `resources.limits.cpu` is.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin sharded_throughput -- [--objects N]
//!     [--rounds R] [--window-s W] [--cpu-milli M] [--host-bin PATH]
//! ```
//!
//! Defaults: N = 100 000 ConfigMaps, R = 3 rounds, a W = 20 s window, M = 500 (half a core per
//! replica). The host is `target/release/reconciled` (build it first: `cargo build --release
//! -p reconciled`). Needs root, for the CPU limit: each replica runs in a cgroup (v1 `cpu`
//! controller) of its own with `cpu.cfs_quota_us` = M × 100 per 100 ms period, which is what
//! the kubelet writes for a container's CPU limit.
//!
//! One loopback control plane with `ShardedListAndWatch` on; N labelled ConfigMaps of about a
//! KiB each. The guest is `stamp_burn`: each reconcile spins through about 5 ms of CPU and
//! writes nothing, so the API server is not what limits anyone and the figure is the replicas'
//! own. For k = 1, 2 and 3 (in turn, R rounds), k replicas start with `[replicas] shards = 12`
//! and the guest's keys spread; once every replica's informer has synced the shards it holds
//! (their objects summing to N), the bench counts each replica's reconciles over W seconds.
//! Every key is queued by the initial list, so workers are never idle in the window.
//!
//! Where the figures may surprise: this machine has 2 cores, so k replicas at M milli-cores
//! must fit in them beside the API server and etcd (3 × 500 = 1.5 cores). Without the limit,
//! three replicas would share the same 2 cores that one replica alone can use, and nothing
//! could scale; with it, what scales is what scales across machines.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use reconciled::informer::shard::{ShardKey, ShardSet};
use reconciled::ops::status::{InformerState, Status};

const NS: &str = "bench-throughput";
const LEASE_NS: &str = "bench-throughput-leases";
const ENABLED: &str = "stamp.reconciled.dev/enabled";
const SHARDS: u32 = 12;
const GUEST: &str = "burn";

struct Args {
    objects: usize,
    rounds: usize,
    window: Duration,
    cpu_milli: u64,
    host_bin: PathBuf,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        objects: 100_000,
        rounds: 3,
        window: Duration::from_secs(20),
        cpu_milli: 500,
        host_bin: reconciled_bench::release_host_bin(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--objects" => a.objects = value.parse()?,
            "--rounds" => a.rounds = value.parse()?,
            "--window-s" => a.window = Duration::from_secs(value.parse()?),
            "--cpu-milli" => a.cpu_milli = value.parse()?,
            "--host-bin" => a.host_bin = value.into(),
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

/// A cgroup (v1 `cpu`) with a CFS quota: the processes started in it share `milli` thousandths
/// of a core. Removed on drop (once its processes are gone).
struct CpuLimit(PathBuf);

impl CpuLimit {
    fn new(name: &str, milli: u64) -> anyhow::Result<Self> {
        let dir = Path::new("/sys/fs/cgroup/cpu").join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir)
            .with_context(|| format!("creating cgroup {} (needs root)", dir.display()))?;
        std::fs::write(dir.join("cpu.cfs_period_us"), "100000")?;
        std::fs::write(dir.join("cpu.cfs_quota_us"), (milli * 100).to_string())?;
        Ok(Self(dir))
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("cgroup {} left behind", self.0.display());
    }
}

/// One replica: a `reconciled run` process in a cgroup of its own; killed on drop.
struct Replica {
    id: String,
    addr: SocketAddr,
    child: Child,
    _limit: CpuLimit,
}

impl Replica {
    fn start(
        a: &Args,
        kubeconfig: &Path,
        config: &Path,
        id: &str,
        logs: &Path,
    ) -> anyhow::Result<Self> {
        let limit = CpuLimit::new(&format!("reconciled-bench-{id}"), a.cpu_milli)?;
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let log = std::fs::File::create(logs.join(format!("{id}.log")))?;
        // The shell joins the cgroup before it becomes the host, so every thread is limited.
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
                limit.0.display()
            ))
            .arg(&a.host_bin)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(config)
            .arg("--listen")
            .arg(addr.to_string())
            .args(["--replica-id", id])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Self {
            id: id.to_string(),
            addr,
            child,
            _limit: limit,
        })
    }

    async fn status(&self) -> Option<Status> {
        reconciled::ops::http::get_status(self.addr).await.ok()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each replica's shards, by the shard Leases of `group`.
async fn holders(client: &kube::Client, group: &str) -> anyhow::Result<BTreeMap<String, Vec<u64>>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for l in api.list(&ListParams::default()).await? {
        let name = l.metadata.name.unwrap_or_default();
        let Some(shard) =
            (name.strip_prefix(&format!("{group}-shard-"))).and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        if let Some(h) = l
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
        {
            out.entry(h).or_default().push(shard);
        }
    }
    Ok(out)
}

/// What one replica says of the guest: its reconciles so far, and the objects and bytes of its
/// synced informer of `shards` (`None` until it watches exactly those and has synced them).
fn seen(status: &Status, shards: &[u64]) -> Option<(u64, usize, u64)> {
    let g = status.guests.iter().find(|g| g.name == GUEST)?;
    let keys = g.key_shards.as_deref()?;
    let held = ShardSet::of(ShardKey::Uid, shards.iter().copied(), u64::from(SHARDS)).ok()?;
    if shards.is_empty() || keys != held.to_string() {
        return None;
    }
    let wanted = format!("shard={keys}");
    let i = status
        .informers
        .iter()
        .find(|i| i.state == InformerState::Synced && i.scope.contains(&wanted))?;
    Some((g.reconciles.ok, i.objects, i.cached_bytes))
}

fn config(dir: &Path, group: &str, module: &Path) -> anyhow::Result<PathBuf> {
    let toml = format!(
        "[replicas]\nnamespace = \"{LEASE_NS}\"\ngroup = \"{group}\"\nshards = {SHARDS}\nlease_duration_ms = 4000\nrenew_deadline_ms = 2500\nretry_period_ms = 500\nrebalance_after_ms = 2000\n\n[scheduler]\nslots = 2\n\n[[guest]]\nname = \"{GUEST}\"\nmodule = {:?}\nworkers = 2\nshard_keys = true\n[guest.grant]\nnamespaces = [\"{NS}\"]\n",
        module.display().to_string()
    );
    let path = dir.join(format!("{group}.toml"));
    std::fs::write(&path, toml)?;
    Ok(path)
}

/// One replica's part of one run.
#[derive(Debug, Clone)]
struct Part {
    rate: f64,
    objects: usize,
    bytes: u64,
}

async fn run(
    a: &Args,
    cp: &testenv::ControlPlane,
    module: &Path,
    logs: &Path,
    k: usize,
    round: usize,
) -> anyhow::Result<Vec<Part>> {
    let group = format!("tp-{round}-{k}");
    let config = config(logs, &group, module)?;
    let replicas: Vec<Replica> = (0..k)
        .map(|i| {
            Replica::start(
                a,
                cp.kubeconfig_path(),
                &config,
                &format!("{group}-{i}"),
                logs,
            )
        })
        .collect::<anyhow::Result<_>>()?;
    let started = Instant::now();
    let client = cp.admin_client();
    let mut last = Vec::new();
    // Settled: the shards spread evenly (12 / k each), every replica watching exactly its own
    // and synced, their objects summing to N.
    let shards = loop {
        last.clear();
        let shards = holders(&client, &group).await?;
        for r in &replicas {
            let mine = shards.get(&r.id).cloned().unwrap_or_default();
            let even = mine.len() == SHARDS as usize / k;
            last.push(
                r.status()
                    .await
                    .as_ref()
                    .and_then(|s| seen(s, &mine))
                    .filter(|_| even),
            );
        }
        let total: usize = last.iter().flatten().map(|s| s.1).sum();
        if last.iter().all(Option::is_some) && total == a.objects {
            break shards;
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!(
                "{k} replicas did not split {} objects within 300 s: {last:?}",
                a.objects
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "{k} replicas split the keys in {:.1} s: {last:?}",
        started.elapsed().as_secs_f64()
    );
    let before: Vec<(u64, usize, u64)> = last.iter().flatten().copied().collect();
    let t0 = Instant::now();
    tokio::time::sleep(a.window).await;
    let mut parts = Vec::new();
    for (r, b) in replicas.iter().zip(&before) {
        let mine = shards.get(&r.id).cloned().unwrap_or_default();
        let s = r
            .status()
            .await
            .as_ref()
            .and_then(|s| seen(s, &mine))
            .with_context(|| {
                format!(
                    "replica {} stopped answering or lost its shards in the window",
                    r.id
                )
            })?;
        parts.push(Part {
            rate: (s.0 - b.0) as f64 / t0.elapsed().as_secs_f64(),
            objects: s.1,
            bytes: s.2,
        });
    }
    drop(replicas);
    Ok(parts)
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    let wasms = reconciled_bench::guest_wasms(&[])?;
    let module = reconciled_bench::wasm(&wasms, "stamp_burn")?;
    anyhow::ensure!(
        a.host_bin.exists(),
        "{} is missing: cargo build --release -p reconciled",
        a.host_bin.display()
    );
    let cp = testenv::ControlPlane::start_with_args(&["--feature-gates=ShardedListAndWatch=true"])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let logs = std::env::temp_dir().join(format!(
        "reconciled-sharded-throughput-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&logs)?;
    eprintln!("replica logs in {}", logs.display());
    rt.block_on(async {
        let client = cp.admin_client();
        for ns in [NS, LEASE_NS] {
            testenv::fixtures::create_namespace(&client, ns).await?;
        }
        let names = (0..a.objects).map(|i| format!("cm-{i:06}"));
        reconciled_bench::fill_stamped_sized(&client, NS, ENABLED, names, 1024).await?;
        eprintln!("{} objects made", a.objects);
        let mut by_k: BTreeMap<usize, Vec<Vec<Part>>> = BTreeMap::new();
        for round in 0..a.rounds {
            for k in 1..=3 {
                let parts = run(&a, &cp, &module, &logs, k, round).await?;
                eprintln!("round {round}, {k} replicas: {parts:?}");
                by_k.entry(k).or_default().push(parts);
            }
        }
        report(&a, &by_k);
        anyhow::Ok(())
    })
}

fn report(a: &Args, by_k: &BTreeMap<usize, Vec<Vec<Part>>>) {
    let total = |parts: &[Part]| parts.iter().map(|p| p.rate).sum::<f64>();
    let mut one: Vec<f64> = by_k
        .get(&1)
        .map_or(Vec::new(), |runs| runs.iter().map(|p| total(p)).collect());
    let one = reconciled_bench::median(&mut one);
    println!(
        "{} objects, {} rounds, {} s windows, {} milli-cores per replica, {SHARDS} shards\n",
        a.objects,
        a.rounds,
        a.window.as_secs(),
        a.cpu_milli
    );
    println!(
        "| replicas | reconciles/s, all (median) | against one | per replica (each round) | objects per replica | share of the objects | cache MiB per replica |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (k, runs) in by_k {
        let mut totals: Vec<f64> = runs.iter().map(|p| total(p)).collect();
        let median = reconciled_bench::median(&mut totals);
        let per: Vec<String> = runs
            .iter()
            .map(|p| {
                p.iter()
                    .map(|p| format!("{:.0}", p.rate))
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        let last = runs.last().cloned().unwrap_or_default();
        let objects: Vec<String> = last.iter().map(|p| p.objects.to_string()).collect();
        let shares: Vec<String> = last
            .iter()
            .map(|p| format!("{:.3}", p.objects as f64 / a.objects as f64))
            .collect();
        let mib: Vec<String> = last
            .iter()
            .map(|p| format!("{:.1}", p.bytes as f64 / f64::from(1 << 20)))
            .collect();
        println!(
            "| {k} | {median:.0} | {:.2}× | {} | {} | {} | {} |",
            median / one,
            per.join(", "),
            objects.join("/"),
            shares.join("/"),
            mib.join("/")
        );
    }
}
