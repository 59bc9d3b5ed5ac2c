//! reconciled against controller-runtime, doing the same work on the same objects in one run:
//! start-up over N objects, idle cost, the edit → reconcile → patch round trip, a burst, and
//! the CPU each spends per round trip.
//!
//! ```text
//! cargo build --release -p reconciled
//! cargo run --release -p reconciled-bench --bin controller_runtime -- \
//!     [--objects N] [--edits E] [--burst B] [--idle-s S] [--workers 1,4] [--host-bin PATH] \
//!     [--traced]
//! ```
//!
//! Defaults: N = 10 000 ConfigMaps of about 1 KiB, E = 200 sequential edits, a burst of
//! B = 1000 edits at once, S = 20 s idle, each side run with 1 and then 4 workers. About 6
//! minutes.
//!
//! The sides, each a process of its own started fresh for every worker count:
//! - **reconciled**: `reconciled run` with the stamp guest (`stamp_v1`: merge-patches the
//!   annotation `stamp.reconciled.dev/seen` to `v1:<data.v>` when it differs), granted the one
//!   namespace, `workers` and `[scheduler] slots` both set to the worker count.
//! - **controller-runtime** (`bench/peers/controller-runtime --mode reconcile`, v0.25.2): the same
//!   reconciler in Go, stamping `cr:<data.v>`, with `MaxConcurrentReconciles` the worker count,
//!   its cache scoped to the namespace and label as the guest's is, and its defaults otherwise:
//!   protobuf on the wire, no transform.
//! - **controller-runtime, JSON**: the same with `--json`, so that the codec's share is visible.
//! - **reconciled, traced** (with `--traced`, which measures only the two reconciled sides): the
//!   first side again, exporting a span per reconcile and per host call over OTLP/HTTP to a real
//!   Jaeger (v1.75, memory storage, built by testenv) on loopback: what tracing costs per
//!   reconcile, as a ratio to the untraced side in the same run.
//!
//! What each figure is:
//! - *first reconcile*: from spawning the process to the bench's own watch seeing the first
//!   object stamped by it; *all reconciled*: to seeing all N stamped. Both sides pay the same
//!   patch and watch latency in these.
//! - *idle CPU* and *idle RSS*: user + system CPU over S seconds once all N are stamped and
//!   nothing changes, and the resident set at its end (`/proc/<pid>`).
//! - *round trip*: E edits of one object, one at a time, each from the bench's patch of `data.v`
//!   to its watch seeing the new stamp; p50 and p99.
//! - *CPU per round trip*: the process's CPU over those E round trips, divided by E (each round
//!   trip is one reconcile that patches and one that finds nothing to do, and two watch
//!   events). CPU comes in 10 ms ticks, so over 300 round trips one tick is 33 µs of it.
//! - *burst*: B objects edited at once (32 patches in flight); from the first patch sent to the
//!   last new stamp seen.
//!
//! Everything each side prints goes to a log folder named on stderr.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};

const NS: &str = "bench-versus";
const ENABLED: &str = "stamp.reconciled.dev/enabled";
const SEEN: &str = "stamp.reconciled.dev/seen";
const PROBE: &str = "cm-00000";

struct Args {
    objects: usize,
    edits: usize,
    burst: usize,
    idle: Duration,
    workers: Vec<usize>,
    host_bin: PathBuf,
    traced: bool,
}

impl Args {
    fn parse() -> anyhow::Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut args = Args {
            objects: 10_000,
            edits: 200,
            burst: 1000,
            idle: Duration::from_secs(20),
            workers: vec![1, 4],
            host_bin: root.join("target/release/reconciled"),
            traced: false,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
            };
            match flag.as_str() {
                "--objects" => args.objects = value()?.parse()?,
                "--edits" => args.edits = value()?.parse()?,
                "--burst" => args.burst = value()?.parse()?,
                "--idle-s" => args.idle = Duration::from_secs(value()?.parse()?),
                "--workers" => {
                    args.workers = value()?
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()?
                }
                "--host-bin" => args.host_bin = value()?.into(),
                "--traced" => args.traced = true,
                other => anyhow::bail!(
                    "unknown argument {other}; usage: controller_runtime [--objects N] [--edits E] [--burst B] [--idle-s S] [--workers 1,4] [--host-bin PATH] [--traced]"
                ),
            }
        }
        anyhow::ensure!(args.burst < args.objects, "--burst must be below --objects");
        Ok(args)
    }
}

/// One side of the comparison.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Reconciled,
    ReconciledTraced,
    ControllerRuntime,
    ControllerRuntimeJson,
}

impl Side {
    /// The sides a run measures, in order: with `traced`, reconciled with and without tracing,
    /// whose ratio is the question; else reconciled and the two controller-runtimes.
    fn all(traced: bool) -> Vec<Side> {
        if traced {
            vec![Side::Reconciled, Side::ReconciledTraced]
        } else {
            vec![
                Side::Reconciled,
                Side::ControllerRuntime,
                Side::ControllerRuntimeJson,
            ]
        }
    }

    fn name(self) -> &'static str {
        match self {
            Side::Reconciled => "reconciled",
            Side::ReconciledTraced => "reconciled (traced)",
            Side::ControllerRuntime => "controller-runtime",
            Side::ControllerRuntimeJson => "controller-runtime (JSON)",
        }
    }

    /// What this side stamps before `:<data.v>`.
    fn prefix(self) -> &'static str {
        match self {
            Side::Reconciled | Side::ReconciledTraced => "v1",
            _ => "cr",
        }
    }
}

/// What one run of one side measured.
#[derive(Debug, Default, Clone)]
struct Figures {
    first: f64,
    all: f64,
    idle_cpu: f64,
    idle_rss: f64,
    p50: f64,
    p99: f64,
    cpu_per_round_trip_us: f64,
    burst: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    anyhow::ensure!(
        args.host_bin.exists(),
        "no host binary at {}: build it first (cargo build --release -p reconciled)",
        args.host_bin.display()
    );
    let peer = if args.traced {
        PathBuf::new()
    } else {
        reconciled_bench::build_peer()?
    };
    let stamp = reconciled_bench::wasm(&reconciled_bench::guest_wasms(&[])?, "stamp_v1")?;
    let logs = std::env::temp_dir().join(format!("reconciled-versus-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    eprintln!("controller_runtime: logs go to {}", logs.display());
    let cp = testenv::ControlPlane::start()?;
    let jaeger = if args.traced {
        let j = testenv::jaeger::Jaeger::start()?;
        eprintln!(
            "controller_runtime: Jaeger takes traces at {}",
            j.otlp_endpoint()
        );
        Some(j)
    } else {
        None
    };
    let otlp = jaeger.as_ref().map(testenv::jaeger::Jaeger::otlp_endpoint);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = cp.admin_client();
        testenv::fixtures::create_namespace(&client, NS).await?;
        let started = Instant::now();
        let names = (0..args.objects).map(|i| format!("cm-{i:05}"));
        reconciled_bench::fill_stamped_sized(&client, NS, ENABLED, names, 1024).await?;
        eprintln!(
            "controller_runtime: filled {NS} with {} ConfigMaps in {:.1?}",
            args.objects,
            started.elapsed()
        );
        let stamps = Stamps::watch(&client).await;
        let mut results: Vec<(Side, usize, Figures)> = Vec::new();
        for &workers in &args.workers {
            for side in Side::all(args.traced) {
                let launch = Launch {
                    otlp: otlp.as_deref(),
                    side,
                    workers,
                    kubeconfig: cp.kubeconfig_path(),
                    peer: &peer,
                    stamp: &stamp,
                    host_bin: &args.host_bin,
                    logs: &logs,
                };
                let figures = measure(&client, &stamps, &args, launch).await?;
                eprintln!(
                    "controller_runtime: {} × {workers}: {figures:?}",
                    side.name()
                );
                results.push((side, workers, figures));
            }
        }
        report(&args, &results);
        anyhow::Ok(())
    })
}

struct Launch<'a> {
    side: Side,
    /// Where the traced side sends its spans.
    otlp: Option<&'a str>,
    workers: usize,
    kubeconfig: &'a Path,
    peer: &'a Path,
    stamp: &'a Path,
    host_bin: &'a Path,
    logs: &'a Path,
}

impl Launch<'_> {
    /// Unique per side and worker count.
    fn tag(&self) -> String {
        format!("{:?}-{}", self.side, self.workers)
    }

    fn spawn(&self) -> anyhow::Result<Child> {
        let tag = format!("{:?}-{}", self.side, self.workers);
        let log = std::fs::File::create(self.logs.join(format!(
            "{}-w{}.log",
            self.side.name().replace([' ', '(', ')'], ""),
            self.workers
        )))?;
        let mut cmd = match self.side {
            Side::Reconciled | Side::ReconciledTraced => {
                let config = self.logs.join(format!("{tag}.toml"));
                std::fs::write(
                    &config,
                    format!(
                        "[[guest]]\nname = \"stamp\"\nmodule = {:?}\nworkers = {}\n\n\
                         [guest.grant]\nnamespaces = [\"{NS}\"]\nkinds = [\"v1/ConfigMap\"]\n\n\
                         [scheduler]\nslots = {}\n",
                        self.stamp.display().to_string(),
                        self.workers,
                        self.workers.max(1),
                    ),
                )?;
                let mut cmd = Command::new(self.host_bin);
                cmd.arg("run")
                    .arg("--kubeconfig")
                    .arg(self.kubeconfig)
                    .arg("--config")
                    .arg(config)
                    .args(["--listen", "127.0.0.1:0"]);
                if self.side == Side::ReconciledTraced {
                    let otlp = self
                        .otlp
                        .ok_or_else(|| anyhow::anyhow!("the traced side needs Jaeger"))?;
                    cmd.args(["--otlp-endpoint", otlp]);
                }
                cmd
            }
            Side::ControllerRuntime | Side::ControllerRuntimeJson => {
                let mut cmd = Command::new(self.peer);
                cmd.args(["--mode", "reconcile", "--kubeconfig"])
                    .arg(self.kubeconfig)
                    .args(["--namespace", NS])
                    .arg(format!("--workers={}", self.workers));
                if self.side == Side::ControllerRuntimeJson {
                    cmd.arg("--json");
                }
                cmd
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.side.name()))
    }
}

async fn measure(
    client: &kube::Client,
    stamps: &Stamps,
    args: &Args,
    launch: Launch<'_>,
) -> anyhow::Result<Figures> {
    let prefix = launch.side.prefix();
    // Every object must be stamped anew, so no side starts on objects already in its stamp.
    stamps.expect(if prefix == "v1" { "cr" } else { "v1" });
    let other = stamps.unstamp_all(client, prefix).await?;
    if other > 0 {
        eprintln!("controller_runtime: cleared {other} stamps left by an earlier run");
        // Counted from the watch's view: it must show the stamps gone before counting starts.
        let stale = format!("{prefix}:");
        stamps
            .wait(Duration::from_secs(60), |s| {
                s.objects
                    .values()
                    .all(|(_, st)| !st.as_deref().is_some_and(|st| st.starts_with(&stale)))
            })
            .await?;
    }
    stamps.expect(prefix);
    let started = Instant::now();
    let mut child = launch.spawn()?;
    let pid = child.id();
    let result = async {
        let first = stamps
            .wait(Duration::from_secs(300), |s| s.first.is_some())
            .await?
            .first
            .expect("waited for it");
        let all = stamps
            .wait(Duration::from_secs(600), |s| s.current == args.objects)
            .await?
            .all
            .expect("waited for it");
        // Let the last events settle before calling the process idle.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu0 = cpu_seconds(pid)?;
        tokio::time::sleep(args.idle).await;
        let idle_cpu = cpu_seconds(pid)? - cpu0;
        let idle_rss = rss_bytes(pid)? as f64;

        let api = Api::<ConfigMap>::namespaced(client.clone(), NS);
        let cpu0 = cpu_seconds(pid)?;
        let mut trips = Vec::with_capacity(args.edits);
        for e in 0..args.edits {
            let v = format!("e{e}-{}", launch.tag());
            let sent = Instant::now();
            edit(&api, PROBE, &v).await?;
            let want = format!("{prefix}:{v}");
            stamps
                .wait(Duration::from_secs(30), |s| {
                    s.stamp_of(PROBE) == Some(&want)
                })
                .await?;
            trips.push(sent.elapsed().as_secs_f64());
        }
        let cpu_per_round_trip_us = (cpu_seconds(pid)? - cpu0) / args.edits.max(1) as f64 * 1e6;
        trips.sort_by(|a, b| a.total_cmp(b));
        let p50 = trips[trips.len() / 2];
        let p99 = trips[(trips.len() * 99 / 100).min(trips.len() - 1)];

        let burst_started = Instant::now();
        // A value no earlier run wrote: an edit to the value already there is no event at all.
        let round = format!("b-{}-{}", launch.side.prefix(), launch.tag());
        futures::stream::iter(1..=args.burst)
            .map(|i| {
                let api = api.clone();
                let round = round.clone();
                async move { edit(&api, &format!("cm-{i:05}"), &round).await }
            })
            .buffer_unordered(32)
            .try_collect::<()>()
            .await?;
        let want = format!("{prefix}:{round}");
        stamps
            .wait(Duration::from_secs(300), |s| {
                (1..=args.burst).all(|i| s.stamp_of(&format!("cm-{i:05}")) == Some(&want))
            })
            .await?;
        let burst = burst_started.elapsed().as_secs_f64();
        anyhow::Ok(Figures {
            first: (first - started).as_secs_f64(),
            all: (all - started).as_secs_f64(),
            idle_cpu,
            idle_rss,
            p50,
            p99,
            cpu_per_round_trip_us,
            burst,
        })
    }
    .await;
    // SIGTERM, as a pod is stopped; both sides stop on it.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Merge-patches `data.v` of `name`.
async fn edit(api: &Api<ConfigMap>, name: &str, v: &str) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "data": { "v": v } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// User + system CPU seconds of process `pid`, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 2..])
        .ok_or_else(|| anyhow::anyhow!("unreadable /proc/{pid}/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    // USER_HZ is 100 on every Linux this runs on.
    Ok(ticks / 100.0)
}

/// Resident set of process `pid`, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{pid}/status"))
}

/// The bench's own view of the objects, from a watch: each one's `data.v` and stamp, how many
/// carry the expected side's current stamp, and when the first and the last of them did.
#[derive(Clone, Default)]
struct Stamps(Arc<(Mutex<StampState>, tokio::sync::Notify)>);

#[derive(Default)]
struct StampState {
    /// name → (data.v, stamp).
    objects: HashMap<String, (String, Option<String>)>,
    prefix: String,
    /// Objects carrying `<prefix>:<their data.v>`.
    current: usize,
    first: Option<Instant>,
    all: Option<Instant>,
    total: usize,
}

impl StampState {
    fn is_current(&self, v: &str, stamp: Option<&str>) -> bool {
        stamp
            .and_then(|s| s.strip_prefix(self.prefix.as_str())?.strip_prefix(':'))
            .is_some_and(|s| s == v)
    }

    fn stamp_of(&self, name: &str) -> Option<&String> {
        self.objects.get(name).and_then(|(_, s)| s.as_ref())
    }
}

impl Stamps {
    async fn watch(client: &kube::Client) -> Self {
        let stamps = Self::default();
        let inner = stamps.0.clone();
        reconciled_bench::watch_stamps(client, NS, ENABLED, SEEN, move |seen| {
            let (state, notify) = &*inner;
            let mut s = state.lock().unwrap();
            let was = s
                .objects
                .get(&seen.name)
                .is_some_and(|(v, st)| s.is_current(v, st.as_deref()));
            let is = s.is_current(&seen.v, seen.stamp.as_deref());
            if is && !was {
                s.current += 1;
                s.first.get_or_insert(seen.at);
            } else if was && !is {
                s.current -= 1;
            }
            s.objects.insert(seen.name, (seen.v, seen.stamp));
            s.total = s.objects.len();
            if s.current == s.total && s.all.is_none() && s.first.is_some() {
                s.all = Some(seen.at);
            }
            drop(s);
            notify.notify_waiters();
        });
        stamps
    }

    /// From now on, count the objects stamped `<prefix>:<data.v>`.
    fn expect(&self, prefix: &str) {
        let mut s = self.0.0.lock().unwrap();
        s.prefix = prefix.to_string();
        s.current = s
            .objects
            .values()
            .filter(|(v, st)| s.is_current(v, st.as_deref()))
            .count();
        s.first = None;
        s.all = None;
    }

    /// Removes every stamp already in `prefix`, so that the next run must write each one.
    async fn unstamp_all(&self, client: &kube::Client, prefix: &str) -> anyhow::Result<usize> {
        let names: Vec<String> = {
            let s = self.0.0.lock().unwrap();
            s.objects
                .iter()
                .filter(|(_, (_, st))| {
                    st.as_deref()
                        .is_some_and(|st| st.starts_with(&format!("{prefix}:")))
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        let api = Api::<ConfigMap>::namespaced(client.clone(), NS);
        let n = names.len();
        futures::stream::iter(names)
            .map(|name| {
                let api = api.clone();
                async move {
                    let patch =
                        serde_json::json!({ "metadata": { "annotations": { SEEN: null } } });
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(32)
            .try_collect::<()>()
            .await?;
        Ok(n)
    }

    /// Waits until `done` holds of the state, with a deadline.
    async fn wait(
        &self,
        timeout: Duration,
        done: impl Fn(&StampState) -> bool,
    ) -> anyhow::Result<Snapshot> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (state, notify) = &*self.0;
        loop {
            let notified = notify.notified();
            {
                let s = state.lock().unwrap();
                if done(&s) {
                    return Ok(Snapshot {
                        first: s.first,
                        all: s.all,
                    });
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let s = state.lock().unwrap();
                anyhow::bail!(
                    "not done after {timeout:?}: {} of {} objects stamped {}",
                    s.current,
                    s.total,
                    s.prefix
                );
            }
        }
    }
}

struct Snapshot {
    first: Option<Instant>,
    all: Option<Instant>,
}

fn report(args: &Args, results: &[(Side, usize, Figures)]) {
    println!(
        "\n{} ConfigMaps of ~1 KiB, {} sequential edits, a burst of {}, {} s idle\n",
        args.objects,
        args.edits,
        args.burst,
        args.idle.as_secs()
    );
    println!(
        "| workers | side | first reconcile s | all reconciled s | idle CPU s / {} s | idle RSS MiB | round trip p50 ms | p99 ms | CPU per round trip µs | burst s |",
        args.idle.as_secs()
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (side, w, f) in results {
        println!(
            "| {w} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.0} | {:.2} |",
            side.name(),
            f.first,
            f.all,
            f.idle_cpu,
            f.idle_rss / (1 << 20) as f64,
            f.p50 * 1e3,
            f.p99 * 1e3,
            f.cpu_per_round_trip_us,
            f.burst
        );
    }
    if args.traced {
        report_tracing(args, results);
        return;
    }
    println!(
        "\nRatios, reconciled / controller-runtime (protobuf, its default) in the same run:\n"
    );
    println!(
        "| workers | first reconcile | all reconciled | idle CPU | idle RSS | round trip p50 | p99 | CPU per round trip | burst |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &w in &args.workers {
        let (Some(r), Some(c)) = (
            of(results, Side::Reconciled, w),
            of(results, Side::ControllerRuntime, w),
        ) else {
            continue;
        };
        println!(
            "| {w} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ratio(r.first, c.first),
            ratio(r.all, c.all),
            ratio(r.idle_cpu, c.idle_cpu),
            ratio(r.idle_rss, c.idle_rss),
            ratio(r.p50, c.p50),
            ratio(r.p99, c.p99),
            ratio(r.cpu_per_round_trip_us, c.cpu_per_round_trip_us),
            ratio(r.burst, c.burst),
        );
    }
}

fn report_tracing(args: &Args, results: &[(Side, usize, Figures)]) {
    println!("\nWhat tracing costs, reconciled (traced) / reconciled in the same run:\n");
    println!(
        "| workers | all reconciled | idle CPU | round trip p50 | p99 | CPU per round trip | burst |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &w in &args.workers {
        let (Some(t), Some(r)) = (
            of(results, Side::ReconciledTraced, w),
            of(results, Side::Reconciled, w),
        ) else {
            continue;
        };
        println!(
            "| {w} | {} | {} | {} | {} | {} | {} |",
            ratio(t.all, r.all),
            ratio(t.idle_cpu, r.idle_cpu),
            ratio(t.p50, r.p50),
            ratio(t.p99, r.p99),
            ratio(t.cpu_per_round_trip_us, r.cpu_per_round_trip_us),
            ratio(t.burst, r.burst),
        );
    }
}

/// What `side` measured with `workers` workers, if it ran.
fn of(results: &[(Side, usize, Figures)], side: Side, workers: usize) -> Option<&Figures> {
    results
        .iter()
        .find(|(s, w, _)| *s == side && *w == workers)
        .map(|(_, _, f)| f)
}

/// `a / b` to two places, or `a / 0` when `b` is zero (an idle CPU of 0.00 s).
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        format!("{a:.2} / 0")
    }
}
