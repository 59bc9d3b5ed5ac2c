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
//! - **Verdicts.** With `--verdicts` objects more (200 in all by default), while every object
//!   is edited in turn: `--verdicts` rollouts of a good revision that stamps its own version
//!   (`good<n>:`), with the default analysis and three canary steps (10%, 50%, 100%, 10 to 20
//!   reconciles of live changes each, a bake time of 2 s); then as many of a revision that fails
//!   about 10% of its keys. Counted: good revisions rolled back (the bar is none), bad ones
//!   rolled back in their first canary step, and bad ones whose stamp reached the watch more
//!   than a second after their recorded fence (the watch's own delay allowed).

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
    let mut verdicts = 20usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || -> anyhow::Result<usize> { Ok(it.next().unwrap_or_default().parse()?) };
        match flag.as_str() {
            "--objects" => objects = value()?,
            "--edits" => edits = value()?,
            "--cycles" => cycles = value()?,
            "--rollbacks" => rollbacks = value()?,
            "--verdicts" => verdicts = value()?,
            other => anyhow::bail!(
                "unknown argument {other}; usage: rollout [--objects 50] [--edits 100] [--cycles 3] [--rollbacks 10] [--verdicts 20]"
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
        (rollbacks, verdicts),
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
    let v = &r.verdicts;
    println!(
        "\n| rollouts | good, rolled back | bad, rolled back in the first canary step | bad, a write after the fence | good, median s to promotion |"
    );
    println!("|---|---|---|---|---|");
    let mut promoted = v.promoted_after.clone();
    println!(
        "| {} + {} | {}/{} | {}/{} | {}/{} | {:.1} |",
        v.good,
        v.bad,
        v.good_rolled_back,
        v.good,
        v.bad_in_first_step,
        v.bad,
        v.bad_wrote_after_fence,
        v.bad,
        reconciled_bench::median(&mut promoted)
    );
    for why in &v.good_reasons {
        println!("good revision rolled back: {why}");
    }
    Ok(())
}

/// What the verdicts phase counted.
#[derive(Default)]
struct Verdicts {
    good: usize,
    bad: usize,
    good_rolled_back: usize,
    /// Why each good revision rolled back was.
    good_reasons: Vec<String>,
    bad_in_first_step: usize,
    bad_wrote_after_fence: usize,
    /// Seconds from staging to promotion, for the good revisions promoted.
    promoted_after: Vec<f64>,
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
    verdicts: Verdicts,
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
    (rollbacks, verdicts): (usize, usize),
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
                ignore_paths: Vec::new(),
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
    let verdicts = judged(&sup, &admin, rx, (objects, verdicts), v2).await?;
    sup.shutdown().await;
    Ok(Measured {
        trips,
        after_breach,
        after_staging,
        in_first_step,
        within_one_poll,
        verdicts,
    })
}

/// The verdicts phase (see the module docs): `n` good rollouts, then `n` bad ones, over
/// `objects` objects and as many more, every one edited in turn meanwhile; `stamps` are the
/// watch's deliveries.
async fn judged(
    sup: &Arc<Supervisor>,
    admin: &kube::Client,
    mut stamps: tokio::sync::mpsc::UnboundedReceiver<reconciled_bench::Seen>,
    (objects, n): (usize, usize),
    module: &[u8],
) -> anyhow::Result<Verdicts> {
    let mut verdicts = Verdicts::default();
    if n == 0 {
        return Ok(verdicts);
    }
    let more: Vec<String> = (objects..objects + 150)
        .map(|i| format!("work-{i}"))
        .collect();
    reconciled_bench::fill_stamped(admin, NS, LABEL, more).await?;
    let names: Vec<String> = (0..objects + 150).map(|i| format!("work-{i}")).collect();
    let seen: Arc<std::sync::Mutex<Vec<(Instant, String)>>> = Arc::default();
    let collector = tokio::spawn({
        let seen = seen.clone();
        async move {
            while let Some(s) = stamps.recv().await {
                if let Some(stamp) = s.stamp {
                    seen.lock().unwrap().push((s.at, stamp));
                }
            }
        }
    });
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), NS);
    let traffic = tokio::spawn(async move {
        for round in 1u64.. {
            for name in &names {
                let patch = serde_json::json!({ "data": { "v": format!("j{round}") } });
                let _ = cms
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let rollout = Rollout {
        strategy: Strategy::Progressive,
        steps: [(10, 10), (50, 20), (100, 20)]
            .into_iter()
            .map(|(percent, min_reconciles)| {
                Step::Canary(CanaryStep {
                    percent,
                    min_reconciles,
                    pause: None,
                })
            })
            .collect(),
        bake_time: Duration::from_secs(2),
        ..Rollout::default()
    };
    for (good, count) in [(true, n), (false, n)] {
        for r in 0..count {
            let version = if good {
                format!("good{r}")
            } else {
                format!("bad{r}")
            };
            let s = match good {
                true => format!(r#"{{"version":"{version}"}}"#),
                false => format!(r#"{{"version":"{version}","fail_percent":10}}"#),
            };
            let staged = Instant::now();
            let applied = sup
                .apply(
                    GUEST,
                    Source::File("stamp.wasm".into()),
                    settings(&s, rollout.clone())?,
                    module.to_vec(),
                )
                .await;
            anyhow::ensure!(matches!(applied, Applied::Staged { .. }), "{applied:?}");
            let deadline = staged + Duration::from_secs(120);
            let done = loop {
                anyhow::ensure!(Instant::now() < deadline, "{version}: not over in 120 s");
                if let Some(p) = sup
                    .rollout(GUEST)
                    .filter(|p| p.ended() && p.settings_hash == settings_hash_of(&s))
                {
                    break p;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            eprintln!(
                "rollout bench: {version}: {:?} at step {} after {:.1} s{}",
                done.phase,
                done.step,
                staged.elapsed().as_secs_f64(),
                done.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            );
            if good {
                verdicts.good += 1;
                match done.phase {
                    Phase::Promoted => verdicts.promoted_after.push(staged.elapsed().as_secs_f64()),
                    _ => {
                        verdicts.good_rolled_back += 1;
                        verdicts
                            .good_reasons
                            .push(format!("{version}: {}", done.message.unwrap_or_default()));
                    }
                }
                continue;
            }
            verdicts.bad += 1;
            if done.phase == Phase::RolledBack && done.step == 0 {
                verdicts.bad_in_first_step += 1;
            }
            // The fence on this machine's clock, then any of this revision's stamps delivered
            // more than a second after it.
            let fence: k8s_openapi::jiff::Timestamp = done.since.parse()?;
            let fence = std::time::SystemTime::from(fence);
            tokio::time::sleep(Duration::from_secs(2)).await;
            let (now, wall) = (Instant::now(), std::time::SystemTime::now());
            let prefix = format!("{version}:");
            let late = (seen.lock().unwrap().iter())
                .filter(|(at, stamp)| {
                    stamp.starts_with(&prefix)
                        && wall - (now - *at) > fence + Duration::from_secs(1)
                })
                .count();
            if late > 0 {
                verdicts.bad_wrote_after_fence += 1;
                eprintln!(
                    "rollout bench: {version}: {late} writes after the fence {}",
                    done.since
                );
            }
        }
    }
    traffic.abort();
    collector.abort();
    Ok(verdicts)
}

/// The hash a rollout's progress records for `settings`.
fn settings_hash_of(settings: &str) -> String {
    let parsed = GuestSettings::parse(settings).unwrap_or_default();
    reconciled::rollout::progress::settings_hash(parsed.as_str())
}
