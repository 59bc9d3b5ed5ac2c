//! Failover: from the death of the replica doing the work to the first reconcile by another one,
//! for a controller-runtime manager with leader election and for reconciled's Lease replicas,
//! against one API server in one run.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin failover -- [--objects N] [--kills K]
//!     [--lease-duration-ms L] [--renew-deadline-ms D] [--retry-period-ms R]
//!     [--only peer|host|cold] [--host-bin PATH]
//! ```
//!
//! Defaults: N = 10 000 labelled ConfigMaps, K = 3 kills per scenario, and client-go's leader
//! election timings (L = 15 000, D = 10 000, R = 2000), for both; L must be whole seconds, as
//! a Lease records it. The host is `target/release/reconciled` (build it first:
//! `cargo build --release -p reconciled`); the peer is built by `bench/peers/build.sh`. About
//! 6 minutes at the defaults, most of it Leases expiring and each side stamping N objects.
//!
//! One loopback control plane; the namespace `bench-failover` holds the N ConfigMaps, labelled
//! `stamp.reconciled.dev/enabled=true` with `data.v` and a KiB of padding (a LIST costs what it
//! costs for real objects), one of them the probe; the Leases live in
//! `bench-failover-leases`. Each scenario runs two replicas, `a` and `b`:
//! - **controller-runtime** (the peer, `bench/peers/controller-runtime`): a manager with Lease
//!   leader election whose one controller stamps `cr:<data.v>`, as the stamp guest does.
//!   controller-runtime starts a controller's informers only once elected, so a new leader
//!   LISTs all N objects before its first reconcile.
//! - **reconciled**: two `reconciled run --replica-id` processes with `[replicas] shards = 1`
//!   (plain leader election), running `stamp_v1` (stamps `v1:<data.v>`). The follower keeps
//!   its informers synced (warm standby), so a new owner should need no LIST.
//! - **reconciled, cold standby**: the same with `[replicas] standby = "cold"`: the follower
//!   loads nothing, so a new owner loads the guest (its compiled artifact from the disk cache)
//!   and syncs all N objects before its first reconcile, as controller-runtime's does. What it
//!   saves is the follower's memory, recorded for every scenario just before each kill.
//!
//! Each round waits until every object carries the scenario's stamp and both replicas are up
//! (the follower has had two retry periods to see the Lease), finds the replica holding the
//! Lease (`holderIdentity`), SIGKILLs it, and at once changes the probe's `data.v`. The
//! failover time runs from the kill to the moment the bench's watch sees the probe stamped with
//! the new value by the survivor. The killed replica is then started again, as a follower.
//!
//! Also recorded: the controller-runtime survivor's own milestones (elected, cache synced, first
//! reconcile; from its JSON lines, on the wall clock), and the reconciled survivor's ConfigMap
//! relists and LIST requests during the failover (from its `/metrics`).
//!
//! Where the figures may surprise: nobody may take over before the Lease expires, a lease
//! duration after the last renewal the survivor saw, so where the kill falls in the renew cycle
//! moves each failover by up to one renew interval. client-go renews every retry period;
//! reconciled renews every third of the lease duration, so its Lease has less left at an
//! average kill. The report therefore also gives the Lease left at each kill (from the last
//! `renewTime` the bench's watch saw; the holders write it with this machine's clock) and the
//! failover beyond it, which is what the survivor itself took: for controller-runtime a poll of
//! the Lease every 1 to 2.2 retry periods (client-go's jitter), then a LIST of every object;
//! for reconciled, its elector's wake-up at expiry with its cache already synced. With a retry
//! period under a second the controller-runtime figure beyond expiry can come out negative, by
//! up to a second: client-go notices a renewal only when the Lease's record changes as it
//! compares it, with `renewTime` in whole seconds, so a follower misses renewals made within
//! the second it last saw.
//!
//! The replicas' logs are kept in a temp folder named on stderr.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "bench-failover";
const LEASE_NS: &str = "bench-failover-leases";
const ENABLED: &str = "stamp.reconciled.dev/enabled";
const SEEN: &str = "stamp.reconciled.dev/seen";
const PROBE: &str = "probe";
/// The peer's Lease (its `--lease-name`).
const PEER_LEASE: &str = "controller-runtime-peer";
/// The label reconciled puts on a shard's Lease (`host/src/replicas/lease.rs`, `ROLE_LABEL`).
const HOST_SHARD_LEASES: &str = "reconciled.dev/lease=shard";
const IDS: [&str; 2] = ["a", "b"];

const USAGE: &str = "usage: failover [--objects N] [--kills K] [--lease-duration-ms L] [--renew-deadline-ms D] [--retry-period-ms R] [--only peer|host|cold] [--host-bin PATH]";

/// Leader election timings, the same for both scenarios.
#[derive(Debug, Clone, Copy)]
struct Timings {
    lease_ms: u64,
    renew_ms: u64,
    retry_ms: u64,
}

impl Timings {
    fn retry(&self) -> Duration {
        Duration::from_millis(self.retry_ms)
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
}

#[derive(Debug)]
struct Args {
    objects: usize,
    kills: usize,
    timings: Timings,
    only: Option<Scenario>,
    host_bin: PathBuf,
}

impl Args {
    fn parse() -> anyhow::Result<Self> {
        let mut args = Args {
            objects: 10_000,
            kills: 3,
            timings: Timings {
                lease_ms: 15_000,
                renew_ms: 10_000,
                retry_ms: 2_000,
            },
            only: None,
            host_bin: reconciled_bench::release_host_bin(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| anyhow::anyhow!("{flag} needs a value\n{USAGE}"))
            };
            let number = |v: String| -> anyhow::Result<u64> {
                v.parse().map_err(|e| {
                    anyhow::anyhow!("{flag} {v:?} is not a whole number ({e})\n{USAGE}")
                })
            };
            match flag.as_str() {
                "--objects" => args.objects = number(value()?)? as usize,
                "--kills" => args.kills = number(value()?)? as usize,
                "--lease-duration-ms" => args.timings.lease_ms = number(value()?)?,
                "--renew-deadline-ms" => args.timings.renew_ms = number(value()?)?,
                "--retry-period-ms" => args.timings.retry_ms = number(value()?)?,
                "--host-bin" => args.host_bin = PathBuf::from(value()?),
                "--only" => {
                    args.only = Some(match value()?.as_str() {
                        "peer" => Scenario::Peer,
                        "host" => Scenario::Host,
                        "cold" => Scenario::Cold,
                        other => {
                            anyhow::bail!("--only {other:?}: expected peer, host or cold\n{USAGE}")
                        }
                    })
                }
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => anyhow::bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        anyhow::ensure!(
            args.objects >= 1,
            "--objects must be at least 1 (the probe)"
        );
        anyhow::ensure!(args.kills >= 1, "--kills must be at least 1");
        // A Lease records its duration in whole seconds, and both sides judge expiry from that.
        anyhow::ensure!(
            args.timings.lease_ms >= 1000 && args.timings.lease_ms.is_multiple_of(1000),
            "--lease-duration-ms {} is not a whole number of seconds: Leases record whole seconds, so the rest would be lost",
            args.timings.lease_ms
        );
        let t = args.timings;
        // Both sides refuse timings outside these bounds, each in its own words, after the fill.
        anyhow::ensure!(
            t.renew_ms < t.lease_ms && t.retry_ms > 0 && t.retry_ms * 2 <= t.renew_ms,
            "--renew-deadline-ms ({}) must be shorter than --lease-duration-ms ({}), and --retry-period-ms ({}) more than 0 and at most half the renew deadline, as reconciled's replicas require",
            t.renew_ms,
            t.lease_ms,
            t.retry_ms
        );
        Ok(args)
    }

    fn runs(&self, s: Scenario) -> bool {
        self.only.is_none_or(|o| o == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// controller-runtime, leader election.
    Peer,
    /// reconciled, Lease replicas with one shard, warm standby.
    Host,
    /// The same under cold standby: the follower loads nothing until it takes the shard.
    Cold,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Peer => "controller-runtime",
            Scenario::Host => "reconciled",
            Scenario::Cold => "reconciled, cold standby",
        }
    }

    /// Names its probe values: the warm and cold scenarios stamp alike, and each must see
    /// values of its own.
    fn tag(self) -> &'static str {
        match self {
            Scenario::Peer => "cr",
            Scenario::Host => "warm",
            Scenario::Cold => "cold",
        }
    }

    fn is_host(self) -> bool {
        matches!(self, Scenario::Host | Scenario::Cold)
    }

    /// What its reconciler stamps before the `:`.
    fn stamp(self) -> &'static str {
        match self {
            Scenario::Peer => "cr",
            Scenario::Host => "v1",
            // The same guest: each scenario's probe values are its own (see `round`).
            Scenario::Cold => "v1",
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    let peer_bin = args
        .runs(Scenario::Peer)
        .then(reconciled_bench::build_peer)
        .transpose()?;
    let host = if args.runs(Scenario::Host) || args.runs(Scenario::Cold) {
        anyhow::ensure!(
            args.host_bin.is_file(),
            "no host binary at {}: build it with `cargo build --release -p reconciled`, or pass --host-bin",
            args.host_bin.display()
        );
        let wasms = reconciled_bench::guest_wasms(&[])?;
        Some((
            args.host_bin.clone(),
            reconciled_bench::wasm(&wasms, "stamp_v1")?,
        ))
    } else {
        None
    };
    let logs = std::env::temp_dir().join(format!("reconciled-failover-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    eprintln!("failover: replicas' logs go to {}", logs.display());
    let cp = testenv::ControlPlane::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(&cp, &args, peer_bin, host, &logs))
}

async fn run(
    cp: &testenv::ControlPlane,
    args: &Args,
    peer_bin: Option<PathBuf>,
    host: Option<(PathBuf, PathBuf)>,
    logs: &Path,
) -> anyhow::Result<()> {
    let client = cp.admin_client();
    for ns in [NS, LEASE_NS] {
        create_namespace(&client, ns).await?;
    }
    let started = Instant::now();
    let names =
        std::iter::once(PROBE.to_string()).chain((1..args.objects).map(|i| format!("cm-{i:05}")));
    // A KiB each, as real objects are: the peer's takeover lists them all.
    reconciled_bench::fill_stamped_sized(&client, NS, ENABLED, names, 1024).await?;
    eprintln!(
        "failover: filled {NS} with {} ConfigMaps in {:.1?}",
        args.objects,
        started.elapsed()
    );
    let stamps = Stamps::watch(&client).await;
    let leases = Leases::watch(&client).await;
    let bench = Bench {
        client: &client,
        stamps: &stamps,
        leases: &leases,
        args,
    };

    let mut results: Vec<(Scenario, Vec<Kill>)> = Vec::new();
    if let Some(bin) = peer_bin {
        let launch = Launch {
            scenario: Scenario::Peer,
            bin,
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            timings: args.timings,
            config: None,
            logs: logs.to_path_buf(),
            spawned: 0,
        };
        results.push((Scenario::Peer, bench.scenario(launch).await?));
    }
    if let Some((bin, module)) = host {
        for (s, standby) in [(Scenario::Host, "warm"), (Scenario::Cold, "cold")] {
            if !args.runs(s) {
                continue;
            }
            let config = logs.join(format!("host-{standby}.toml"));
            std::fs::write(&config, host_toml(&module, args.timings, standby))?;
            let launch = Launch {
                scenario: s,
                bin: bin.clone(),
                kubeconfig: cp.kubeconfig_path().to_path_buf(),
                timings: args.timings,
                config: Some(config),
                logs: logs.to_path_buf(),
                spawned: 0,
            };
            results.push((s, bench.scenario(launch).await?));
        }
    }
    report(args, &results);
    Ok(())
}

/// The host config: the stamp guest, over every labelled ConfigMap in the cluster (as the peer
/// caches them), one shard. The module path is quoted as Rust debug-prints it, which is a TOML
/// basic string for any path without control characters or non-ASCII.
fn host_toml(module: &Path, t: Timings, standby: &str) -> String {
    format!(
        r#"[[guest]]
name = "stamp"
module = {module:?}

[guest.grant]
kinds = ["v1/ConfigMap"]

[replicas]
namespace = "{LEASE_NS}"
shards = 1
lease_duration_ms = {}
renew_deadline_ms = {}
retry_period_ms = {}
standby = "{standby}"
"#,
        t.lease_ms,
        t.renew_ms,
        t.retry_ms,
        module = module.display().to_string(),
    )
}

/// One kill, as measured.
#[derive(Debug, Default)]
struct Kill {
    /// From the SIGKILL to the probe's new stamp, seen by the bench's watch.
    failover: Duration,
    /// How much of the Lease was left at the kill: its duration less the time since the last
    /// renewal the bench saw. No one may take over before that; what the failover takes
    /// beyond it is the survivor's own doing.
    lease_left: Option<f64>,
    /// controller-runtime's survivor: seconds from the kill to its milestones (wall clock).
    elected: Option<f64>,
    synced: Option<f64>,
    first_reconcile: Option<f64>,
    /// reconciled's survivor: ConfigMap relists and LIST requests during the failover.
    relists: Option<f64>,
    lists: Option<f64>,
    /// Resident memory just before the kill, MiB: of the replica about to take over (the
    /// follower), and of the one doing the work.
    follower_rss: Option<f64>,
    leader_rss: Option<f64>,
}

impl Kill {
    /// The failover less the Lease left at the kill: what the survivor took once it could.
    fn beyond_expiry(&self) -> Option<f64> {
        Some(self.failover.as_secs_f64() - self.lease_left?)
    }
}

/// What every round uses: the cluster and the bench's two watches.
struct Bench<'a> {
    client: &'a kube::Client,
    stamps: &'a Stamps,
    leases: &'a Leases,
    args: &'a Args,
}

impl Bench<'_> {
    /// How long the replicas may take to stamp every object: one PATCH each, by one worker.
    fn converge(&self) -> Duration {
        Duration::from_secs(120) + Duration::from_millis(30) * self.args.objects as u32
    }

    /// Runs one scenario: two replicas, `args.kills` rounds of kill and restart.
    async fn scenario(&self, mut launch: Launch) -> anyhow::Result<Vec<Kill>> {
        let s = launch.scenario;
        eprintln!("failover: {}: starting replicas a and b", s.name());
        let mut replicas = Vec::new();
        for id in IDS {
            replicas.push(launch.spawn(id)?);
        }
        let mut kills = Vec::new();
        for round in 1..=self.args.kills {
            self.stamps
                .converged(s.stamp(), self.args.objects, self.converge(), &mut replicas)
                .await?;
            for r in &mut replicas {
                r.ready(launch.timings).await?;
            }
            if s == Scenario::Cold {
                // The objects may carry the warm scenario's stamps already: what says the
                // holder serves is its informer synced.
                serving(&mut replicas).await?;
            }
            let (kill, killed) = self.round(s, &mut replicas, round).await?;
            kills.push(kill);
            // The killed process is reaped as its Replica drops; its successor joins as a
            // follower, as a restarted pod would.
            let id = replicas[killed].id.clone();
            replicas[killed] = launch.spawn(&id)?;
            replicas[killed].ready(launch.timings).await?;
        }
        Ok(kills)
    }

    /// Kills the replica holding the Lease, edits the probe, and waits for the survivor's
    /// stamp. Returns the measurement and the index of the replica killed.
    async fn round(
        &self,
        s: Scenario,
        replicas: &mut [Replica],
        round: usize,
    ) -> anyhow::Result<(Kill, usize)> {
        let holder = self.leases.holder(s, replicas)?;
        let owner = replicas.iter().position(|r| r.id == holder.id).unwrap();
        let survivor = 1 - owner;
        let before = match s {
            Scenario::Peer => None,
            _ => Some(replicas[survivor].lists().await?),
        };
        let (follower_rss, leader_rss) = (replicas[survivor].rss(), replicas[owner].rss());
        // Named after the scenario too: the probe keeps the last scenario's value, which the
        // next one stamps while it converges, and a stamp seen then is no failover.
        let value = format!("{}-kill-{round}", s.tag());
        let stamp = format!("{}:{value}", s.stamp());
        eprintln!(
            "failover: {}: round {round}: killing {} (holds the Lease), setting {PROBE} to {value}",
            s.name(),
            replicas[owner].describe()
        );

        let killed_unix = unix_ms();
        let killed = Instant::now();
        replicas[owner].child.kill()?;
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), NS);
        let patch = serde_json::json!({ "data": { "v": value } });
        api.patch(PROBE, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        // Read after the PATCH's round trip, so that a renewal written just before the kill has
        // reached the bench's watch.
        let renewed = holder.lease.as_deref().and_then(|l| self.leases.renewed(l));
        let timeout = self.args.timings.lease() + self.converge();
        let seen = loop {
            if let Some(at) = self.stamps.probe_seen(&stamp) {
                anyhow::ensure!(
                    at > killed,
                    "{}: {PROBE} was stamped {stamp:?} before the kill; this bench reused a value",
                    s.name()
                );
                break at;
            }
            replicas[survivor].alive()?;
            anyhow::ensure!(
                killed.elapsed() < timeout,
                "{}: {PROBE} was not stamped {stamp:?} within {timeout:?} of killing {}; see {}",
                s.name(),
                replicas[owner].id,
                replicas[survivor].log.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };

        let lease_ms = self.args.timings.lease_ms as i64;
        let mut kill = Kill {
            failover: seen - killed,
            lease_left: renewed.map(|ms| (lease_ms - (killed_unix - ms)) as f64 / 1e3),
            follower_rss,
            leader_rss,
            ..Kill::default()
        };
        match s {
            Scenario::Host | Scenario::Cold => {
                let after = replicas[survivor].lists().await?;
                let before = before.unwrap_or_default();
                kill.relists = Some(after.relists - before.relists);
                kill.lists = Some(after.lists - before.lists);
            }
            Scenario::Peer => {
                let since = |event: &str| {
                    replicas[survivor]
                        .milestone(event, killed_unix)
                        .map(|ms| (ms - killed_unix) as f64 / 1e3)
                };
                kill.elected = since("leader");
                kill.synced = since("synced");
                kill.first_reconcile = since("reconciled");
            }
        }
        eprintln!(
            "failover: {}: round {round}: {stamp} seen {:.2} s after the kill",
            s.name(),
            kill.failover.as_secs_f64()
        );
        Ok((kill, owner))
    }
}

/// Starts replicas of one scenario.
struct Launch {
    scenario: Scenario,
    bin: PathBuf,
    kubeconfig: PathBuf,
    timings: Timings,
    /// The host config (reconciled only).
    config: Option<PathBuf>,
    logs: PathBuf,
    spawned: usize,
}

impl Launch {
    fn spawn(&mut self, id: &str) -> anyhow::Result<Replica> {
        self.spawned += 1;
        let t = self.timings;
        let log = self.logs.join(format!(
            "{}-{id}-{}.log",
            self.scenario.name(),
            self.spawned
        ));
        // Append mode for both streams, so the host's stdout and stderr never overwrite each other.
        let log_file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut cmd = Command::new(&self.bin);
        let mut listen = None;
        match self.scenario {
            Scenario::Peer => {
                cmd.arg("--kubeconfig")
                    .arg(&self.kubeconfig)
                    .args(["--id", id, "--lease-namespace", LEASE_NS])
                    .args(["--lease-name", PEER_LEASE])
                    .arg(format!("--lease-duration-ms={}", t.lease_ms))
                    .arg(format!("--renew-deadline-ms={}", t.renew_ms))
                    .arg(format!("--retry-period-ms={}", t.retry_ms))
                    .stdout(Stdio::piped());
            }
            Scenario::Host | Scenario::Cold => {
                let addr = free_addr()?;
                listen = Some(addr);
                let config = self.config.as_ref().expect("a host scenario has a config");
                cmd.arg("run")
                    .arg("--kubeconfig")
                    .arg(&self.kubeconfig)
                    .arg("--config")
                    .arg(config)
                    .arg("--listen")
                    .arg(addr.to_string())
                    .args(["--replica-id", id])
                    .stdout(log_file.try_clone()?);
            }
        }
        let child = cmd
            .stdin(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.bin.display()))?;
        let mut replica = Replica {
            id: id.to_string(),
            scenario: self.scenario,
            child,
            started: Instant::now(),
            log,
            milestones: Arc::default(),
            listen,
        };
        if let Some(stdout) = replica.child.stdout.take() {
            let milestones = replica.milestones.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(m) = Milestone::parse(&line) {
                        milestones.lock().unwrap().push(m);
                    }
                }
            });
        }
        Ok(replica)
    }
}

/// One milestone line of the peer (see `bench/peers/controller-runtime/main.go`, which writes
/// them): `{"event": …, "id": …, "unix_ms": …, "key"?: …}`.
#[derive(Debug, Clone)]
struct Milestone {
    event: String,
    unix_ms: i64,
}

impl Milestone {
    fn parse(line: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        Some(Self {
            event: v["event"].as_str()?.to_string(),
            unix_ms: v["unix_ms"].as_i64()?,
        })
    }
}

/// One replica process; killed and reaped on drop, so a failed run leaves none behind.
struct Replica {
    id: String,
    scenario: Scenario,
    child: Child,
    started: Instant,
    log: PathBuf,
    /// The peer's milestones, as its stdout delivers them.
    milestones: Arc<Mutex<Vec<Milestone>>>,
    /// Where the host serves `/metrics` (reconciled only).
    listen: Option<SocketAddr>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The survivor's ConfigMap informer counters.
#[derive(Debug, Default, Clone, Copy)]
struct Lists {
    relists: f64,
    lists: f64,
}

impl Replica {
    fn describe(&self) -> String {
        format!(
            "{} replica {} (pid {})",
            self.scenario.name(),
            self.id,
            self.child.id()
        )
    }

    /// An error naming its log if the process has exited.
    fn alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!(
                "{} exited ({status}); the end of its log {}:\n{}",
                self.describe(),
                self.log.display(),
                tail(&self.log, 15)
            );
        }
        Ok(())
    }

    /// The first `event` it printed at or after `since` (unix ms).
    fn milestone(&self, event: &str, since: i64) -> Option<i64> {
        self.milestones
            .lock()
            .unwrap()
            .iter()
            .find(|m| m.event == event && m.unix_ms >= since)
            .map(|m| m.unix_ms)
    }

    /// Waits until it could take over: it is running (the peer said `started`; the host serves
    /// `/metrics` with its ConfigMap informer synced, as a warm follower should) and has had two
    /// retry periods to see the Lease, so its expiry clock runs from a renewal it saw.
    async fn ready(&mut self, t: Timings) -> anyhow::Result<()> {
        let timeout = Duration::from_secs(120);
        loop {
            self.alive()?;
            let up = match self.scenario {
                Scenario::Peer => self.milestone("started", 0).is_some(),
                Scenario::Host => self.metrics().await.is_ok_and(|m| {
                    configmap_samples(&m, "reconciled_informer_synced") == Some(1.0)
                }),
                // A cold follower has no informer to sync: serving /metrics is all it does.
                Scenario::Cold => self.metrics().await.is_ok(),
            };
            if up && self.started.elapsed() >= t.retry() * 2 {
                return Ok(());
            }
            anyhow::ensure!(
                self.started.elapsed() < timeout,
                "{} is not ready after {timeout:?}: {}; see {}",
                self.describe(),
                match self.scenario {
                    Scenario::Peer => "it never printed {\"event\":\"started\"}",
                    Scenario::Host =>
                        "its /metrics never showed its v1/ConfigMap informer synced (a warm follower should sync it)",
                    Scenario::Cold => "it never served /metrics",
                },
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        let addr = self.listen.expect("only a host serves /metrics");
        http_get(addr, "/metrics").await
    }

    /// Its resident memory now, MiB, from `/proc`; `None` once it has exited.
    fn rss(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    async fn lists(&self) -> anyhow::Result<Lists> {
        let m = self.metrics().await?;
        let count = |family: &str| {
            // A cold follower has no ConfigMap informer yet: it has listed nothing.
            if self.scenario == Scenario::Cold && !m.contains("kind=\"v1/ConfigMap\"") {
                return Ok(0.0);
            }
            configmap_samples(&m, family).ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: /metrics has no {family} for v1/ConfigMap",
                    self.describe()
                )
            })
        };
        Ok(Lists {
            relists: count("reconciled_informer_relists_total")?,
            lists: count("reconciled_informer_lists_total")?,
        })
    }
}

/// Waits until one of the cold scenario's replicas has synced its ConfigMap informer: the
/// holder has loaded the guest.
async fn serving(replicas: &mut [Replica]) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        for r in replicas.iter_mut() {
            r.alive()?;
            if r.metrics()
                .await
                .is_ok_and(|m| configmap_samples(&m, "reconciled_informer_synced") == Some(1.0))
            {
                return Ok(());
            }
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no cold replica synced its v1/ConfigMap informer within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sum of `family`'s samples labelled `kind="v1/ConfigMap"`; for a gauge of flags such as
/// `reconciled_informer_synced`, their minimum. `None` if there are none.
fn configmap_samples(metrics: &str, family: &str) -> Option<f64> {
    let values: Vec<f64> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix(family)?.strip_prefix('{'))
        .filter(|l| l.contains("kind=\"v1/ConfigMap\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(if family.ends_with("_synced") {
        values.iter().copied().fold(f64::INFINITY, f64::min)
    } else {
        values.iter().sum()
    })
}

/// The replica holding a scenario's Lease, and that Lease's name.
#[derive(Debug)]
struct Holder {
    id: String,
    /// `None` when no Lease named a replica and the holder is a guess.
    lease: Option<String>,
}

/// The Leases in [`LEASE_NS`] as the bench's watch last saw them.
#[derive(Clone, Default)]
struct Leases(Arc<Mutex<HashMap<String, LeaseSeen>>>);

#[derive(Debug, Clone)]
struct LeaseSeen {
    holder: Option<String>,
    /// `spec.renewTime`, in unix ms. Written with the holder's clock, which is this machine's.
    renewed: Option<i64>,
    /// Labelled as one of reconciled's shards.
    shard: bool,
}

impl Leases {
    async fn watch(client: &kube::Client) -> Self {
        let leases = Self::default();
        let api = Api::<Lease>::namespaced(client.clone(), LEASE_NS);
        let map = leases.0.clone();
        let (role, shard) = HOST_SHARD_LEASES
            .split_once('=')
            .expect("a label selector key=value");
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let lease = match event {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => l,
                    _ => continue,
                };
                let name = lease.metadata.name.unwrap_or_default();
                let shard = lease
                    .metadata
                    .labels
                    .is_some_and(|l| l.get(role).map(String::as_str) == Some(shard));
                let spec = lease.spec.unwrap_or_default();
                let seen = LeaseSeen {
                    holder: spec.holder_identity.filter(|h| !h.is_empty()),
                    renewed: spec.renew_time.map(|t| t.0.as_millisecond()),
                    shard,
                };
                map.lock().unwrap().insert(name, seen);
            }
        });
        leases
    }

    /// When `lease` was last renewed, in unix ms.
    fn renewed(&self, lease: &str) -> Option<i64> {
        self.0.lock().unwrap().get(lease)?.renewed
    }

    /// Which replica holds the scenario's Lease: its `holderIdentity`, which for both is the
    /// replica id. For the host, should no shard Lease name a replica, the one started first,
    /// with a warning.
    fn holder(&self, s: Scenario, replicas: &[Replica]) -> anyhow::Result<Holder> {
        let leases = self.0.lock().unwrap().clone();
        let holders: Vec<(&String, &str)> = leases
            .iter()
            .filter(|(name, l)| match s {
                Scenario::Peer => *name == PEER_LEASE,
                Scenario::Host | Scenario::Cold => l.shard,
            })
            .filter_map(|(name, l)| Some((name, l.holder.as_deref()?)))
            .collect();
        if let Some((lease, id)) = holders
            .iter()
            .find(|(_, id)| replicas.iter().any(|r| r.id == *id))
        {
            return Ok(Holder {
                id: id.to_string(),
                lease: Some(lease.to_string()),
            });
        }
        anyhow::ensure!(
            s.is_host(),
            "Lease {LEASE_NS}/{PEER_LEASE} is held by {holders:?}, none of the peers {IDS:?}; is the peer's --id its holderIdentity?"
        );
        let first = replicas.iter().min_by_key(|r| r.started).unwrap();
        eprintln!(
            "failover: no Lease labelled {HOST_SHARD_LEASES} in {LEASE_NS} names a replica (holders: {holders:?}); killing the one started first, {}",
            first.id
        );
        Ok(Holder {
            id: first.id.clone(),
            lease: None,
        })
    }
}

/// What the bench's watch has seen: each object's `data.v` and stamp, and when each stamp of
/// the probe first appeared.
#[derive(Clone, Default)]
struct Stamps(Arc<Mutex<StampsInner>>);

#[derive(Default)]
struct StampsInner {
    /// name → (data.v, stamp).
    objects: HashMap<String, (String, Option<String>)>,
    probe: HashMap<String, Instant>,
}

impl Stamps {
    async fn watch(client: &kube::Client) -> Self {
        let stamps = Self::default();
        let inner = stamps.0.clone();
        reconciled_bench::watch_stamps(client, NS, ENABLED, SEEN, move |seen| {
            let mut inner = inner.lock().unwrap();
            if seen.name == PROBE
                && let Some(stamp) = &seen.stamp
            {
                inner.probe.entry(stamp.clone()).or_insert(seen.at);
            }
            inner.objects.insert(seen.name, (seen.v, seen.stamp));
        });
        stamps
    }

    fn probe_seen(&self, stamp: &str) -> Option<Instant> {
        self.0.lock().unwrap().probe.get(stamp).copied()
    }

    /// How many of the objects carry `<prefix>:<their data.v>`.
    fn stamped(&self, prefix: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .objects
            .values()
            .filter(|(v, stamp)| {
                stamp
                    .as_deref()
                    .and_then(|s| s.strip_prefix(prefix)?.strip_prefix(':'))
                    == Some(v.as_str())
            })
            .count()
    }

    /// Waits until all `n` objects carry `<prefix>:<data.v>`, with progress on stderr.
    async fn converged(
        &self,
        prefix: &str,
        n: usize,
        timeout: Duration,
        replicas: &mut [Replica],
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut shown = Instant::now();
        loop {
            let done = self.stamped(prefix);
            if done == n {
                return Ok(());
            }
            for r in replicas.iter_mut() {
                r.alive()?;
            }
            if shown.elapsed() >= Duration::from_secs(5) {
                eprintln!("failover: {done}/{n} objects stamped {prefix}:…");
                shown = Instant::now();
            }
            anyhow::ensure!(
                started.elapsed() < timeout,
                "only {done} of {n} objects were stamped {prefix}:… within {timeout:?}; see the replicas' logs in {}",
                replicas
                    .first()
                    .and_then(|r| r.log.parent())
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn report(args: &Args, results: &[(Scenario, Vec<Kill>)]) {
    let t = args.timings;
    let command: Vec<String> = std::env::args().skip(1).collect();
    println!("## Failover at {} objects\n", args.objects);
    println!(
        "Command: `cargo run --release -p reconciled-bench --bin failover -- {}`\n",
        command.join(" ")
    );
    println!(
        "Lease duration {} ms, renew deadline {} ms, retry period {} ms. Two replicas per scenario; the Lease's holder is SIGKILLed and the probe edited at once. Failover: from the kill to the probe's new stamp, seen by a watch. Lease left: the Lease's duration less the time since its last renewal, before which no one may take over. Beyond expiry: the failover less the Lease left, the survivor's own part. RSS: resident memory just before the kill, from /proc.\n",
        t.lease_ms, t.renew_ms, t.retry_ms
    );
    println!(
        "| scenario | kill | failover s | Lease left at the kill s | beyond expiry s | survivor: elected / cache synced / first reconcile, s after the kill | survivor: ConfigMap relists / LIST requests | RSS MiB: follower / leader |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (s, kills) in results {
        for (i, k) in kills.iter().enumerate() {
            let milestones = match s {
                Scenario::Peer => format!(
                    "{} / {} / {}",
                    secs(k.elected),
                    secs(k.synced),
                    secs(k.first_reconcile)
                ),
                _ => "—".into(),
            };
            let lists = match s {
                Scenario::Peer => "—".into(),
                _ => format!("{} / {}", count(k.relists), count(k.lists)),
            };
            println!(
                "| {} | {} | {:.2} | {} | {} | {milestones} | {lists} | {} / {} |",
                s.name(),
                i + 1,
                k.failover.as_secs_f64(),
                secs(k.lease_left),
                secs(k.beyond_expiry()),
                mib(k.follower_rss),
                mib(k.leader_rss),
            );
        }
    }
    let of = |s: Scenario| results.iter().find(|(r, _)| *r == s).map(|(_, k)| k);
    type Figure = fn(&Kill) -> Option<f64>;
    let median = |s: Scenario, f: Figure| {
        let mut v: Vec<f64> = of(s)?.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| reconciled_bench::median(&mut v))
    };
    let rows: [(&str, Figure); 5] = [
        ("failover s", |k| Some(k.failover.as_secs_f64())),
        ("Lease left at the kill s", |k| k.lease_left),
        ("beyond expiry s", Kill::beyond_expiry),
        ("follower RSS MiB", |k| k.follower_rss),
        ("leader RSS MiB", |k| k.leader_rss),
    ];
    println!(
        "\n| median of {} kills | controller-runtime | reconciled | reconciled, cold standby | controller-runtime / reconciled | cold / warm |",
        args.kills
    );
    println!("|---|---|---|---|---|---|");
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => format!("{:.2}x", a / b),
        _ => "—".into(),
    };
    for (what, f) in rows {
        let (p, h, c) = (
            median(Scenario::Peer, f),
            median(Scenario::Host, f),
            median(Scenario::Cold, f),
        );
        let show = |v: Option<f64>| {
            if what.ends_with("MiB") {
                mib(v)
            } else {
                secs(v)
            }
        };
        println!(
            "| {what} | {} | {} | {} | {} | {} |",
            show(p),
            show(h),
            show(c),
            ratio(p, h),
            ratio(c, h)
        );
    }
}

/// MiB with one decimal, or a dash.
fn mib(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.1}"))
}

/// Seconds with two decimals, or a dash.
fn secs(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.2}"))
}

/// A whole count, or a dash.
fn count(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.0}"))
}

/// A loopback address that was free a moment ago.
fn free_addr() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The body of `GET path` on a plain HTTP server, such as the host's `/metrics`.
async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        // HTTP/1.0, so the body ends with the connection and is never chunked.
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .map_err(|_| anyhow::anyhow!("GET http://{addr}{path}: no answer within 5 s"))??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("GET http://{addr}{path}: not an HTTP response"))?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split(' ').nth(1) == Some("200"),
        "GET http://{addr}{path}: {status}"
    );
    Ok(body.to_string())
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The last `n` lines of a log file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

async fn create_namespace(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    Ok(())
}
