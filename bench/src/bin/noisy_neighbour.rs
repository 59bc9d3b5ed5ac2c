//! Noisy neighbour: does one tenant's flood, or one tenant's runaway guest, cost another tenant
//! its latency?
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin noisy_neighbour -- [FLOOD] [EDITS]
//! ```
//!
//! Defaults: FLOOD = 10 000 ConfigMaps for tenant A, EDITS = 300 edits by tenant B per case (one
//! every 100 ms). About three minutes.
//!
//! One host in this process, one loopback control plane, every case in one run:
//! - **B alone**: tenant B's guest (`stamp_v1`, namespace `bench-noisy-b`) stamps its one
//!   ConfigMap; the bench edits `data.v` every 100 ms and times each edit (from just before the
//!   PATCH) to the moment a watch sees the stamp of that value. The host runs default fair-share
//!   settings: one slot per core.
//! - **B with A flooding**: tenant A's guest (`stamp_burn`, namespace `bench-noisy-a`, 4
//!   workers) is loaded over FLOOD labelled ConfigMaps, each reconcile spinning through about
//!   5 ms of CPU, and B's edits are timed again while A's queue still holds thousands of keys.
//! - **B with A flooding, slots unlimited** (the peer): the same on a host with 1000 slots,
//!   so that every worker of every guest runs at once, as before guests shared the host's
//!   slots; A's guest starts over on this host, with all FLOOD keys queued again.
//! - **B with a guest spinning, under a CPU budget**: a second host whose tenants have a budget
//!   of 6000 ms of CPU per minute runs tenant C's `stamp_spin` (namespace `bench-noisy-c`, 10
//!   ConfigMaps, 2 workers, a 500 ms deadline): every call loops until its deadline interrupts
//!   it. B's edits are timed again, and C's CPU over the window is compared with its budget.
//!
//! An edit made while B's previous one is still queued is reconciled with it and only the later
//! value is stamped; its latency runs to the first stamp of its value or a later one.
//!
//! What it prints (stdout, markdown): latency percentiles per case, B's p99 ratio to B alone,
//! where B's time went inside the host (queue, slot, reconcile), and the CPU each noisy tenant
//! used as the host measured it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use reconciled::controller::fair_share;
use reconciled::guest::Runtime;
use reconciled::guest::identity::Identities;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;
use reconciled::ops::status::TenantStatus;
use reconciled::sources::configmap::TenantPolicy;
use reconciled::supervisor::{self, Applied, Source, Supervisor};

const A: &str = "bench-noisy-a";
const B: &str = "bench-noisy-b";
const C: &str = "bench-noisy-c";
const ENABLED: &str = "stamp.reconciled.dev/enabled";
const SEEN: &str = "stamp.reconciled.dev/seen";
const EDIT_EVERY: Duration = Duration::from_millis(100);
const BUDGET_MS_PER_MINUTE: u64 = 6000;

fn main() -> anyhow::Result<()> {
    let arg = |i: usize, default: usize| -> anyhow::Result<usize> {
        Ok(std::env::args()
            .nth(i)
            .map(|a| a.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (flood, edits) = (arg(1, 10_000)?, arg(2, 300)?);
    let wasms = reconciled_bench::guest_wasms(&[])?;
    let cp = testenv::ControlPlane::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(&cp, &wasms, flood, edits))
}

async fn run(
    cp: &testenv::ControlPlane,
    wasms: &HashMap<String, PathBuf>,
    flood: usize,
    edits: usize,
) -> anyhow::Result<()> {
    let client = cp.admin_client();
    for ns in [A, B, C] {
        create_namespace(&client, ns).await?;
        tenant_rbac(cp, ns)?;
    }
    fill(&client, A, flood).await?;
    fill(&client, C, 10).await?;
    fill(&client, B, 0).await?;
    let module = |name: &str| -> anyhow::Result<Vec<u8>> {
        Ok(std::fs::read(reconciled_bench::wasm(wasms, name)?)?)
    };
    let edits_seen = Seen::watch(&client).await;

    let sup = host(cp, fair_share::Config::default())?;
    load(&sup, &client, B, module("stamp_v1")?, 1, None).await?;
    let b = format!("{B}/guest/rec.wasm");
    let t = InHost::of(&sup, &b);
    let alone = edit(&client, &edits_seen, "alone", edits).await?;
    let alone_in_host = InHost::of(&sup, &b).since(&t);

    load(&sup, &client, A, module("stamp_burn")?, 4, None).await?;
    let a = format!("{A}/guest/rec.wasm");
    wait(
        &format!("{A} reconciling"),
        Duration::from_secs(120),
        || {
            sup.controller(&a)
                .is_some_and(|c| c.snapshot().reconciles_ok >= 100)
        },
    )
    .await?;
    let before = tenant(&sup, A);
    let reconciled_before = reconciles(&sup, &a);
    let t = InHost::of(&sup, &b);
    let flooded = edit(&client, &edits_seen, "flood", edits).await?;
    let flooded_in_host = InHost::of(&sup, &b).since(&t);
    let after = tenant(&sup, A);
    let reconciled = reconciles(&sup, &a) - reconciled_before;
    let queued = sup.controller(&a).map_or(0, |c| c.snapshot().queued);
    let a_cpu = after.cpu_seconds - before.cpu_seconds;
    sup.shutdown().await;

    // The peer: the same flood on a host whose slots never run out, so every worker of every
    // guest runs at once, as each guest's workers did before they shared the host's slots.
    let unshared = host(
        cp,
        fair_share::Config {
            slots: 1000,
            ..fair_share::Config::default()
        },
    )?;
    load(&unshared, &client, B, module("stamp_v1")?, 1, None).await?;
    load(&unshared, &client, A, module("stamp_burn")?, 4, None).await?;
    wait(
        &format!("{A} reconciling"),
        Duration::from_secs(120),
        || {
            unshared
                .controller(&a)
                .is_some_and(|c| c.snapshot().reconciles_ok >= 100)
        },
    )
    .await?;
    let t = InHost::of(&unshared, &b);
    let flooded_unshared = edit(&client, &edits_seen, "unshared", edits).await?;
    let unshared_in_host = InHost::of(&unshared, &b).since(&t);
    unshared.shutdown().await;

    let budgeted = host(
        cp,
        fair_share::Config {
            cpu_budget_ms_per_minute: Some(BUDGET_MS_PER_MINUTE),
            ..fair_share::Config::default()
        },
    )?;
    load(&budgeted, &client, B, module("stamp_v1")?, 1, None).await?;
    let deadline = Duration::from_millis(500);
    load(
        &budgeted,
        &client,
        C,
        module("stamp_spin")?,
        2,
        Some(deadline),
    )
    .await?;
    wait(&format!("{C} throttled"), Duration::from_secs(60), || {
        tenant(&budgeted, C).throttled.is_some()
    })
    .await?;
    let c_before = tenant(&budgeted, C);
    let window = Instant::now();
    let t = InHost::of(&budgeted, &b);
    let spun = edit(&client, &edits_seen, "spin", edits).await?;
    let spun_in_host = InHost::of(&budgeted, &b).since(&t);
    let window = window.elapsed();
    let c_after = tenant(&budgeted, C);
    budgeted.shutdown().await;

    let p99 = |l: &Latencies| l.percentile(0.99);
    println!("## Noisy neighbour\n");
    println!(
        "B edits one ConfigMap every {} ms, {edits} edits per case; latency from the edit to the stamp seen by a watch.\n",
        EDIT_EVERY.as_millis()
    );
    println!(
        "| case | p50 ms | p90 ms | p99 ms | max ms | p99 / alone | edits reconciled / stamped on their own |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (case, l) in [
        ("B alone", &alone),
        ("B while A floods", &flooded),
        (
            "B while A floods, slots unlimited (peer)",
            &flooded_unshared,
        ),
        ("B while C spins (budget)", &spun),
    ] {
        println!(
            "| {case} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {} / {} of {edits} |",
            l.percentile(0.5),
            l.percentile(0.9),
            p99(l),
            l.percentile(1.0),
            p99(l) / p99(&alone),
            l.ms.len(),
            l.stamped,
        );
    }
    println!(
        "\nWhere B's time went inside the host (means over the case's reconciles of B, from its controller's work queue and reconcile histograms): waiting in B's queue; waiting for a slot; the reconcile itself, which includes its PATCH to the API server.\n"
    );
    println!("| case | queue ms | slot ms | reconcile ms | reconciles |");
    println!("|---|---|---|---|---|");
    for (case, t) in [
        ("B alone", &alone_in_host),
        ("B while A floods", &flooded_in_host),
        (
            "B while A floods, slots unlimited (peer)",
            &unshared_in_host,
        ),
        ("B while C spins (budget)", &spun_in_host),
    ] {
        let n = t.reconciles.max(1) as f64;
        println!(
            "| {case} | {:.1} | {:.1} | {:.1} | {} |",
            t.queue * 1e3 / t.taken.max(1) as f64,
            (t.work - t.reconcile) * 1e3 / n,
            t.reconcile * 1e3 / n,
            t.reconciles,
        );
    }
    let window_a = flooded.took.as_secs_f64();
    println!(
        "\nA during B's edits: {reconciled} reconciles in {window_a:.1} s, {:.1} ms of CPU each as measured, {:.2} cores; {queued} keys still queued at the end.",
        a_cpu * 1000.0 / reconciled.max(1) as f64,
        a_cpu / window_a,
    );
    let c_cpu = c_after.cpu_seconds - c_before.cpu_seconds;
    println!(
        "C during B's edits: {:.0} ms of CPU in {:.1} s, {:.0} ms per minute against a budget of {BUDGET_MS_PER_MINUTE} ms per minute; throttled for {:.1} s of it, {} spell(s) in all.",
        c_cpu * 1000.0,
        window.as_secs_f64(),
        c_cpu * 60_000.0 / window.as_secs_f64(),
        c_after.throttled_seconds - c_before.throttled_seconds,
        c_after.throttles,
    );
    Ok(())
}

/// Sums of B's in-host timings, in seconds, and their counts.
#[derive(Default)]
struct InHost {
    queue: f64,
    taken: u64,
    work: f64,
    reconcile: f64,
    reconciles: u64,
}

impl InHost {
    fn of(sup: &Supervisor, guest: &str) -> Self {
        let Some(s) = sup.controller(guest).map(|c| c.snapshot()) else {
            return Self::default();
        };
        Self {
            queue: s.queue.queue_duration.sum(),
            taken: s.queue.queue_duration.count(),
            work: s.queue.work_duration.sum(),
            reconcile: s.reconciles.time.sum(),
            reconciles: s.reconciles.time.count(),
        }
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            queue: self.queue - before.queue,
            taken: self.taken - before.taken,
            work: self.work - before.work,
            reconcile: self.reconcile - before.reconcile,
            reconciles: self.reconciles - before.reconciles,
        }
    }
}

/// A host with `fair_share`, as `reconciled run` builds it.
fn host(
    cp: &testenv::ControlPlane,
    fair_share: fair_share::Config,
) -> anyhow::Result<Arc<Supervisor>> {
    let identities = Identities::new(cp.admin_config())?;
    let factory = Arc::new(InformerFactory::new(
        identities.host().clone(),
        Options::default(),
    ));
    Ok(Arc::new(Supervisor::new(
        Runtime::new()?,
        factory,
        identities,
        supervisor::Options {
            fair_share,
            ..supervisor::Options::default()
        },
    )))
}

/// Loads `module` as the guest of tenant `ns`, delivered in ConfigMap `guest` there.
async fn load(
    sup: &Supervisor,
    client: &kube::Client,
    ns: &str,
    module: Vec<u8>,
    workers: usize,
    deadline: Option<Duration>,
) -> anyhow::Result<()> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let cm = match api.get_opt("guest").await? {
        Some(cm) => cm,
        None => {
            let meta = ObjectMeta {
                name: Some("guest".into()),
                ..Default::default()
            };
            let cm = ConfigMap {
                metadata: meta,
                ..Default::default()
            };
            api.create(&PostParams::default(), &cm).await?
        }
    };
    let source = Source::ConfigMap {
        namespace: ns.into(),
        name: "guest".into(),
        key: "rec.wasm".into(),
        uid: cm.metadata.uid.unwrap_or_default(),
    };
    let name = format!("{ns}/guest/rec.wasm");
    let mut settings = TenantPolicy {
        kinds: ["v1/ConfigMap".to_string()].into(),
        ..TenantPolicy::default()
    }
    .settings(&name, ns);
    settings.workers = workers;
    if let Some(d) = deadline {
        settings.limits.deadline = d;
    }
    match sup.apply(&name, source, settings, module).await {
        Applied::Loaded { .. } => Ok(()),
        other => anyhow::bail!("{name}: {other:?}"),
    }
}

fn tenant(sup: &Supervisor, ns: &str) -> TenantStatus {
    sup.status()
        .tenants
        .into_iter()
        .find(|t| t.tenant == ns)
        .expect("a loaded guest's tenant is in /status")
}

fn reconciles(sup: &Supervisor, guest: &str) -> u64 {
    sup.controller(guest)
        .map_or(0, |c| c.snapshot().reconciles_ok)
}

async fn wait(what: &str, timeout: Duration, f: impl Fn() -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    while !f() {
        anyhow::ensure!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// What a platform team creates for a tenant (`deploy/tenant.yaml`): the ServiceAccount its
/// guests act as, with the rules they need.
fn tenant_rbac(cp: &testenv::ControlPlane, ns: &str) -> anyhow::Result<()> {
    let tenant = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tenant.yaml");
    let out = cp
        .kubectl()
        .args(["apply", "--server-side", "-n", ns, "-f"])
        .arg(&tenant)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply -n {ns} -f {}: {}",
        tenant.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn create_namespace(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let meta = ObjectMeta {
        name: Some(ns.into()),
        ..Default::default()
    };
    let namespace = Namespace {
        metadata: meta,
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    Ok(())
}

/// Creates `work-0…` (labelled for stamp) in `ns`, 32 at a time, plus `edit` in B.
async fn fill(client: &kube::Client, ns: &str, n: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let names: Vec<String> = if ns == B {
        vec!["edit".into()]
    } else {
        (0..n).map(|i| format!("work-{i:05}")).collect()
    };
    reconciled_bench::fill_stamped(client, ns, ENABLED, names).await?;
    eprintln!("filled {ns} in {:.1?}", started.elapsed());
    Ok(())
}

/// When a watch on B's namespace first saw each stamp.
#[derive(Clone)]
struct Seen(Arc<Mutex<HashMap<String, Instant>>>);

impl Seen {
    async fn watch(client: &kube::Client) -> Self {
        let seen = Self(Arc::default());
        let api = Api::<ConfigMap>::namespaced(client.clone(), B);
        let map = seen.0.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(cm)) = event else {
                    continue;
                };
                let stamp = cm.metadata.annotations.and_then(|a| a.get(SEEN).cloned());
                if let Some(stamp) = stamp {
                    map.lock()
                        .unwrap()
                        .entry(stamp)
                        .or_insert_with(Instant::now);
                }
            }
        });
        seen
    }

    fn at(&self, stamp: &str) -> Option<Instant> {
        self.0.lock().unwrap().get(stamp).copied()
    }
}

/// Edit latencies of one case, in milliseconds.
struct Latencies {
    ms: Vec<f64>,
    /// Edits whose own value was stamped (the rest were reconciled with a later edit).
    stamped: usize,
    /// How long the case's edits took, from the first to the last seen.
    took: Duration,
}

impl Latencies {
    fn percentile(&self, p: f64) -> f64 {
        let mut v = self.ms.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        if v.is_empty() {
            return f64::NAN;
        }
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    }
}

/// Edits B's ConfigMap `edits` times, one every [`EDIT_EVERY`], and times each to its stamp.
async fn edit(
    client: &kube::Client,
    seen: &Seen,
    case: &str,
    edits: usize,
) -> anyhow::Result<Latencies> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), B);
    let started = Instant::now();
    let mut sent = Vec::new();
    let mut tick = tokio::time::interval(EDIT_EVERY);
    for i in 0..edits {
        tick.tick().await;
        let v = format!("{case}-{i}");
        let t0 = Instant::now();
        let patch = serde_json::json!({ "data": { "v": v } });
        api.patch("edit", &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        sent.push((format!("v1:{v}"), t0));
    }
    // The last edits' stamps may still be on their way.
    let last = &sent.last().expect("at least one edit").0;
    let _ = wait("the last stamp", Duration::from_secs(10), || {
        seen.at(last).is_some()
    })
    .await;
    // An edit made while the previous one was still queued is reconciled together with it, and
    // only the later value is stamped: an edit's latency runs to the first stamp of it or of
    // any later edit.
    let seen_at: Vec<Option<Instant>> = sent.iter().map(|(stamp, _)| seen.at(stamp)).collect();
    let ms = sent
        .iter()
        .enumerate()
        .filter_map(|(i, (_, t0))| {
            let first = seen_at[i..].iter().flatten().min()?;
            Some((*first - *t0).as_secs_f64() * 1e3)
        })
        .collect();
    let stamped = seen_at.iter().flatten().count();
    eprintln!("case {case}: done in {:.1?}", started.elapsed());
    Ok(Latencies {
        ms,
        stamped,
        took: started.elapsed(),
    })
}
