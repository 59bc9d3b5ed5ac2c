//! Rollouts: how fast a failing revision is taken back, and what a rollout costs the serving
//! revision's round trip.
//!
//! ```text
//! cargo run --release -p reconciled-bench --bin rollout -- [--objects 50] [--edits 100] [--cycles 3] [--rollbacks 10]
//! ```
//!
//! One host (a supervisor in this process, against a loopback control plane) runs `stamp_v1`
//! over `--objects` stamped ConfigMaps.
//!
//! - **Round trip.** One edit at a time, to objects outside the 10% canary share: from the
//!   PATCH to the watch showing the serving revision's stamp. Three phases of `--edits` each,
//!   taking turns `--cycles` times: no rollout, a shadow step (the new revision runs dry before
//!   the serving one, in its slot), and a canary step at 10% (the serving revision keeps these
//!   keys). The peer is the same host with no rollout, in the same run.
//! - **Rollback.** `--rollbacks` times, a revision that fails about 30% of its keys is staged
//!   with one step, a canary at 50% judged on 20 reconciles, while every object is edited in
//!   turn. The breach is the first moment the candidate's own counts (read every millisecond)
//!   fail the analysis; the rollback is the moment the host reports the revision fenced, its
//!   reconciles in flight ended and its keys requeued. A rollback already reported when the
//!   breach is first seen happened within one poll, and counts as 0 ms. Also: from staging to
//!   rollback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use reconciled::controller::Settings;
use reconciled::guest::Runtime;
use reconciled::guest::identity::Identities;
use reconciled::guest::settings::GuestSettings;
use reconciled::informer::factory::InformerFactory;
use reconciled::rollout::decide::{Verdict, decide};
use reconciled::rollout::progress::Phase;
use reconciled::rollout::share::in_share;
use reconciled::rollout::spec::{CanaryStep, Rollout, ShadowStep, Step, Strategy};
use reconciled::supervisor::{Applied, Source, Supervisor};

const NS: &str = "bench-rollout";
const LABEL: &str = "stamp.reconciled.dev/enabled";
const SEEN: &str = "stamp.reconciled.dev/seen";
const GUEST: &str = "stamp";

fn main() -> anyhow::Result<()> {
    let (mut objects, mut edits, mut cycles, mut rollbacks) = (50usize, 100usize, 3usize, 10usize);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || -> anyhow::Result<usize> { Ok(it.next().unwrap_or_default().parse()?) };
        match flag.as_str() {
            "--objects" => objects = value()?,
            "--edits" => edits = value()?,
            "--cycles" => cycles = value()?,
            "--rollbacks" => rollbacks = value()?,
            other => anyhow::bail!(
                "unknown argument {other}; usage: rollout [--objects 50] [--edits 100] [--cycles 3] [--rollbacks 10]"
            ),
        }
    }
    let wasms = reconciled_bench::guest_wasms(&[])?;
    let v1 = std::fs::read(reconciled_bench::wasm(&wasms, "stamp_v1")?)?;
    let v2 = std::fs::read(reconciled_bench::wasm(&wasms, "stamp_v2")?)?;
    let cp = testenv::ControlPlane::start()?;
    let out = cp.kubectl().args(["create", "namespace", NS]).output()?;
    anyhow::ensure!(out.status.success(), "kubectl create namespace {NS}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let work = std::env::temp_dir().join(format!("reconciled-rollout-{}", std::process::id()));
    let result = rt.block_on(run(
        &cp,
        &work,
        &v1,
        &v2,
        objects,
        (edits, cycles),
        rollbacks,
    ));
    let _ = std::fs::remove_dir_all(&work);
    let r = result?;
    let base = |f: fn(&Trips) -> f64| f(&r.trips[0]);
    println!(
        "\n| phase | edits | round trip p50 ms | p99 ms | p50 / no rollout | p99 / no rollout |"
    );
    println!("|---|---|---|---|---|---|");
    for t in &r.trips {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.2} | {:.2} |",
            t.phase,
            t.n,
            t.p50,
            t.p99,
            t.p50 / base(|t| t.p50),
            t.p99 / base(|t| t.p99)
        );
    }
    let mut after_breach = r.after_breach.clone();
    let mut after_staging = r.after_staging.clone();
    println!(
        "\n| rollbacks | breach to rollback, median ms | max ms | of them within one 1 ms poll | staging to rollback, median ms | max ms | caught in step 0 |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} | {:.1} | {:.1} | {} | {:.0} | {:.0} | {}/{} |",
        r.after_breach.len(),
        reconciled_bench::median(&mut after_breach),
        r.after_breach.iter().copied().fold(0.0, f64::max),
        r.within_one_poll,
        reconciled_bench::median(&mut after_staging),
        r.after_staging.iter().copied().fold(0.0, f64::max),
        r.in_first_step,
        r.after_breach.len()
    );
    Ok(())
}

/// Round trips of one phase, in milliseconds.
struct Trips {
    phase: &'static str,
    n: usize,
    p50: f64,
    p99: f64,
}

struct Measured {
    trips: Vec<Trips>,
    after_breach: Vec<f64>,
    after_staging: Vec<f64>,
    in_first_step: usize,
    /// Rollbacks seen in the very look at the candidate's counts that first failed them: the
    /// breach and the rollback fell within one 1 ms poll (counted as 0 ms above).
    within_one_poll: usize,
}

fn settings(guest_settings: &str, rollout: Rollout) -> anyhow::Result<Settings> {
    let mut s = Settings::new(GUEST);
    s.workers = 2;
    s.guest_settings = GuestSettings::parse(guest_settings)?;
    s.rollout = rollout;
    Ok(s)
}

fn one_step(step: Step) -> Rollout {
    Rollout {
        strategy: Strategy::Progressive,
        steps: vec![step],
        ..Rollout::default()
    }
}

async fn run(
    cp: &testenv::ControlPlane,
    work: &std::path::Path,
    v1: &[u8],
    v2: &[u8],
    objects: usize,
    (edits, cycles): (usize, usize),
    rollbacks: usize,
) -> anyhow::Result<Measured> {
    let admin = cp.admin_client();
    let names: Vec<String> = (0..objects).map(|i| format!("work-{i}")).collect();
    reconciled_bench::fill_stamped(&admin, NS, LABEL, names.clone()).await?;
    let identities = Identities::new(cp.admin_config())?;
    let factory = Arc::new(InformerFactory::new(
        identities.host().clone(),
        Default::default(),
    ));
    let runtime = Runtime::new()?.with_artifact_cache(&work.join("compiled"))?;
    let sup = Arc::new(Supervisor::new(
        runtime,
        factory,
        identities,
        Default::default(),
    ));
    let source = || Source::File("stamp.wasm".into());
    let immediate = settings("{}", Rollout::default())?;
    let applied = sup
        .apply(GUEST, source(), immediate.clone(), v1.to_vec())
        .await;
    anyhow::ensure!(matches!(applied, Applied::Loaded { .. }), "{applied:?}");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    reconciled_bench::watch_stamps(&admin, NS, LABEL, SEEN, move |seen| {
        let _ = tx.send(seen);
    });
    let outside: Vec<String> = (names.iter())
        .filter(|n| !in_share(NS, n, 10))
        .cloned()
        .collect();
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), NS);
    let mut round = 0u64;
    let phases: [(&'static str, Option<Rollout>); 3] = [
        ("no rollout", None),
        (
            "shadow step",
            Some(one_step(Step::Shadow(ShadowStep {
                min_reconciles: u64::MAX,
                max_divergence: 1.0,
            }))),
        ),
        (
            "canary step at 10%, keys outside it",
            Some(one_step(Step::Canary(CanaryStep {
                percent: 10,
                min_reconciles: u64::MAX,
                pause: None,
            }))),
        ),
    ];
    // The phases take turns, `cycles` times, so that the machine's drift falls on each alike.
    let mut took: Vec<Vec<f64>> = vec![Vec::new(); phases.len()];
    for cycle in 0..cycles {
        for (i, (phase, rollout)) in phases.iter().enumerate() {
            let applied = match rollout {
                // A build that writes what v1 writes, staged beside it.
                Some(r) => {
                    let s = format!(r#"{{"version":"v1","cycle":{cycle},"phase":{i}}}"#);
                    let s = settings(&s, r.clone())?;
                    sup.apply(GUEST, source(), s, v2.to_vec()).await
                }
                // The serving revision asked for again: a candidate, if any, is taken back.
                None => {
                    sup.apply(GUEST, source(), immediate.clone(), v1.to_vec())
                        .await
                }
            };
            eprintln!("rollout bench: cycle {cycle}, {phase}: {applied:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            for e in 0..edits {
                round += 1;
                let name = &outside[e % outside.len()];
                let v = round.to_string();
                let patch = serde_json::json!({ "data": { "v": v } });
                let sent = Instant::now();
                cms.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                let want = format!("v1:{v}");
                let deadline = sent + Duration::from_secs(30);
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let seen = tokio::time::timeout(left, rx.recv())
                        .await
                        .map_err(|_| anyhow::anyhow!("{phase}: {name} not stamped {want} in 30 s"))?
                        .ok_or_else(|| anyhow::anyhow!("the watch ended"))?;
                    if &seen.name == name && seen.stamp.as_deref() == Some(want.as_str()) {
                        took[i].push((seen.at - sent).as_secs_f64() * 1000.0);
                        break;
                    }
                }
            }
        }
    }
    let trips: Vec<Trips> = (phases.iter().zip(&mut took))
        .map(|((phase, _), took)| {
            took.sort_by(f64::total_cmp);
            let at =
                |q: f64| took[((took.len() as f64 * q).ceil() as usize).clamp(1, took.len()) - 1];
            Trips {
                phase,
                n: took.len(),
                p50: at(0.5),
                p99: at(0.99),
            }
        })
        .collect();
    // The serving revision alone again, for the rollbacks.
    sup.apply(GUEST, source(), immediate.clone(), v1.to_vec())
        .await;

    // Rollbacks, under edits of every object in turn.
    let traffic = tokio::spawn({
        let (cms, names) = (cms.clone(), names.clone());
        async move {
            for round in 1u64.. {
                for name in &names {
                    let patch = serde_json::json!({ "data": { "v": format!("t{round}") } });
                    let _ = cms
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    });
    let bad = one_step(Step::Canary(CanaryStep {
        percent: 50,
        min_reconciles: 20,
        pause: None,
    }));
    let controller = sup
        .controller(GUEST)
        .ok_or_else(|| anyhow::anyhow!("the guest is not running"))?;
    let (mut after_breach, mut after_staging) = (Vec::new(), Vec::new());
    let (mut in_first_step, mut within_one_poll) = (0, 0);
    for r in 0..rollbacks {
        let s = settings(&format!(r#"{{"fail_percent":30,"run":{r}}}"#), bad.clone())?;
        let staged = Instant::now();
        let applied = sup.apply(GUEST, source(), s, v2.to_vec()).await;
        anyhow::ensure!(matches!(applied, Applied::Staged { .. }), "{applied:?}");
        let mut breach: Option<Instant> = None;
        let deadline = staged + Duration::from_secs(60);
        let done = loop {
            anyhow::ensure!(Instant::now() < deadline, "rollback {r}: not within 60 s");
            if breach.is_none()
                && let Some(o) = controller.rollout_observed(false)
                && matches!(decide(&bad, 0, &o), Verdict::RollBack(_))
            {
                breach = Some(Instant::now());
            }
            // Staging replaced the tracker: what it reports is this run's.
            if let Some(p) = sup.rollout(GUEST).filter(|p| p.ended()) {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let now = Instant::now();
        anyhow::ensure!(done.phase == Phase::RolledBack, "rollback {r}: {done:?}");
        if done.step == 0 {
            in_first_step += 1;
        }
        // Seen rolled back in the same look that would have seen the breach: within one poll.
        let after = breach.map_or(0.0, |b| (now - b).as_secs_f64() * 1000.0);
        if breach.is_none() {
            within_one_poll += 1;
        }
        after_breach.push(after);
        after_staging.push((now - staged).as_secs_f64() * 1000.0);
        eprintln!(
            "rollout bench: rollback {r}: {} after the breach, {:.0} ms after staging",
            breach.map_or("within one poll".to_string(), |_| format!("{after:.1} ms")),
            (now - staged).as_secs_f64() * 1000.0
        );
    }
    traffic.abort();
    sup.shutdown().await;
    Ok(Measured {
        trips,
        after_breach,
        after_staging,
        in_first_step,
        within_one_poll,
    })
}
