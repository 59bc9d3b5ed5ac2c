//! The save loop: from an edit of a reconciler's source to its new version serving, under
//! `reconciled dev --build`, for the project `reconciled new` writes in each language.
//!
//! ```text
//! cargo build --release -p reconciled
//! cargo run --release -p reconciled-bench --bin save_loop -- [ROUNDS] [LANGUAGES]
//! ```
//!
//! Defaults: 5 rounds of each of `rust,ts,python,go`. For each language the benchmark does what
//! the project's README says: writes a project with `target/release/reconciled new` (the SDKs
//! of this checkout), runs its `./build.sh` (timed: the setup), starts `reconciled dev
//! <project>/dev --build <project>` against a loopback control plane, and waits for the first
//! version to serve and for the build `dev` runs at its start to finish. Then each round
//! rewrites the project's status logic with a new message prefix (a real change of the module,
//! so the build cannot come out identical) and polls `/status` every 20 ms: t0 is just before
//! the write, t1 the first poll that shows one more load of the guest, serving. The latency is
//! t1 − t0: the watcher's debounce (200 ms), the build, the folder's settle, the compile (or
//! cache load) and the swap. The first save is shown apart from the others: it is the one a
//! new user meets first.
//!
//! A Rust project builds into a target folder of its own, as a new user's does (so its setup
//! compiles every dependency); the other toolchains are the machine's as they are (what
//! `guests/build.sh` installs), as is the precompile cache. Every edit carries a nonce of the
//! run, so every round's module is new to the precompile cache and its compile cold, as an
//! author's edit is.
//!
//! The peers in the same run: the language's own build alone, timed around the same edit
//! (`cargo build` in the dev profile, or the project's `build.sh`), so the table shows what the
//! host adds on top of the build; and for Rust, the release build (`cargo build --release`)
//! that `--build` ran before it had a profile of its own.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reconciled::ops::status::GuestState;

/// The file of each language's project that holds the status message, and the text in it that
/// a round rewrites.
const EDITS: [(&str, &str); 4] = [
    ("rust", "src/lib.rs"),
    ("ts", "src/status.ts"),
    ("python", "status.py"),
    ("go", "status.go"),
];
const PREFIX: &str = "reconciled: ";

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let langs: Vec<String> = args.next().map_or_else(
        || EDITS.iter().map(|(l, _)| (*l).to_owned()).collect(),
        |a| a.split(',').map(str::to_owned).collect(),
    );
    let host_bin = reconciled_bench::release_host_bin();
    if !host_bin.is_file() {
        bail!(
            "{} is missing; build it first: cargo build --release -p reconciled",
            host_bin.display()
        );
    }
    let work = std::env::temp_dir().join(format!("reconciled-save-loop-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    eprintln!("save_loop: projects and logs in {}", work.display());
    let cp = testenv::ControlPlane::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for lang in &langs {
        let file = EDITS
            .iter()
            .find(|(l, _)| l == lang)
            .map(|(_, f)| *f)
            .with_context(|| format!("unknown language {lang}; one of rust, ts, python, go"))?;
        rows.push(rt.block_on(one_language(&cp, &host_bin, &work, lang, file, rounds))?);
    }
    println!(
        "| language | ./build.sh (setup) | dev started → serving | first save → serving | later saves → serving: median | p90 | max | its build alone: median | release build alone: median | module |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let release = if r.release_builds.is_empty() {
            "—".to_owned()
        } else {
            format!("{:.2} s", pct(&r.release_builds, 50))
        };
        let later = &r.saves[1.min(r.saves.len())..];
        let later = if later.is_empty() {
            &r.saves[..]
        } else {
            later
        };
        println!(
            "| {} | {:.1} s | {:.1} s | {:.2} s | {:.2} s | {:.2} s | {:.2} s | {:.2} s | {release} | {:.1} MB |",
            r.lang,
            r.setup.as_secs_f64(),
            r.first.as_secs_f64(),
            r.saves[0].as_secs_f64(),
            pct(later, 50),
            pct(later, 90),
            pct(later, 100),
            pct(&r.builds, 50),
            r.module_bytes as f64 / 1e6,
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

struct Row {
    lang: String,
    setup: Duration,
    first: Duration,
    saves: Vec<Duration>,
    builds: Vec<Duration>,
    release_builds: Vec<Duration>,
    module_bytes: u64,
}

/// The `p`th percentile of `v`, in seconds (nearest rank).
fn pct(v: &[Duration], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    let rank = (v.len() * p).div_ceil(100).clamp(1, v.len());
    v[rank - 1].as_secs_f64()
}

/// Kills `reconciled dev` when dropped.
struct Dev(Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn one_language(
    cp: &testenv::ControlPlane,
    host_bin: &Path,
    work: &Path,
    lang: &str,
    file: &str,
    rounds: usize,
) -> anyhow::Result<Row> {
    let name = format!("save-{lang}");
    let project = work.join(&name);
    let out = Command::new(host_bin)
        .args(["new", &name, "--lang", lang, "--dir"])
        .arg(&project)
        .output()?;
    if !out.status.success() {
        bail!(
            "reconciled new {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let source = project.join(file);
    let original = std::fs::read_to_string(&source)?;
    if !original.contains(PREFIX) {
        bail!(
            "{} no longer holds {PREFIX:?}; update EDITS",
            source.display()
        );
    }

    let crd = project.join("crd.yaml");
    let out = cp.kubectl().arg("apply").arg("-f").arg(&crd).output()?;
    if !out.status.success() {
        bail!(
            "kubectl apply {}: {}",
            crd.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The README's first step; a Rust project into a target folder of its own.
    let target = project.join("target");
    let t0 = Instant::now();
    let out = Command::new(project.join("build.sh"))
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .output()?;
    if !out.status.success() {
        bail!(
            "{lang}: ./build.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let setup = t0.elapsed();
    eprintln!("save_loop: {lang}: ./build.sh took {setup:.1?}");

    let addr = free_port()?;
    let log_path = work.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let started = Instant::now();
    let _dev = Dev(Command::new(host_bin)
        .arg("dev")
        .arg(project.join("dev"))
        .arg("--build")
        .arg(&project)
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .arg("--listen")
        .arg(addr.to_string())
        .env("NO_COLOR", "1")
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?);
    // cargo names the module after its crate (`save_rust.wasm`); the guest is still `save-rust`.
    let guest = name.clone();
    wait_loads(addr, &guest, 1, Duration::from_secs(900)).await?;
    let first = started.elapsed();
    eprintln!("save_loop: {lang}: first version serving after {first:.1?}");
    // The build `dev` runs at start ends before the first edit, as a user's first save comes
    // after it; what it installed, if anything, is loaded by then too.
    let deadline = Instant::now() + Duration::from_secs(900);
    while !std::fs::read_to_string(&log_path)?.contains("build finished") {
        if Instant::now() > deadline {
            bail!("{lang}: dev's first build never finished");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loads = wait_loads(addr, &guest, 1, Duration::from_secs(60)).await?;

    // A nonce of this run in every edit: a module an earlier run built would be in the machine's
    // precompile cache, and its load warm.
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let mut saves = Vec::new();
    for round in 1..=rounds {
        let edited = original.replace(PREFIX, &format!("reconciled {run}-{round}: "));
        let t0 = Instant::now();
        std::fs::write(&source, edited)?;
        wait_loads(addr, &guest, loads + round as u64, Duration::from_secs(300)).await?;
        saves.push(t0.elapsed());
        eprintln!("save_loop: {lang}: round {round}: {:.2?}", t0.elapsed());
        // Quiet between rounds: the requeue after the swap settles.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(_dev);

    // The peers: the build alone, around the same edits; for Rust, the release build too.
    let mut builds = Vec::new();
    let mut release_builds = Vec::new();
    for round in 1..=rounds {
        let edited = original.replace(PREFIX, &format!("reconciled {run}-{}: ", rounds + round));
        std::fs::write(&source, edited)?;
        let t0 = Instant::now();
        build_alone(lang, &project, false)?;
        builds.push(t0.elapsed());
        if lang == "rust" {
            let edited = original.replace(PREFIX, &format!("reconciled {run}-r{round}: "));
            std::fs::write(&source, edited)?;
            let t0 = Instant::now();
            build_alone(lang, &project, true)?;
            release_builds.push(t0.elapsed());
        }
    }
    let module_bytes = std::fs::read_dir(project.join("dev"))?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .max()
        .unwrap_or(0);
    Ok(Row {
        lang: lang.to_owned(),
        setup,
        first,
        saves,
        builds,
        release_builds,
        module_bytes,
    })
}

/// What `reconciled dev --build` runs, without the host: cargo in its dev profile (or with
/// `release`, in the release profile), or the project's `build.sh`.
fn build_alone(lang: &str, project: &Path, release: bool) -> anyhow::Result<()> {
    let mut cmd = if lang == "rust" {
        let mut c = Command::new("cargo");
        c.args(["build", "--quiet", "--target", "wasm32-wasip2"]);
        if release {
            c.arg("--release");
        } else {
            c.args(reconciled::sources::dev_build::dev_profile());
        }
        c
    } else {
        Command::new(project.join("build.sh"))
    };
    let out = cmd
        .current_dir(project)
        .env("CARGO_TARGET_DIR", project.join("target"))
        .env(
            reconciled::sources::dev_build::OUT_DIR_ENV,
            project.join("dev"),
        )
        .output()?;
    if !out.status.success() {
        bail!("{lang} build: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Waits until guest `name` serves with at least `loads` versions loaded.
async fn wait_loads(
    addr: SocketAddr,
    name: &str,
    loads: u64,
    timeout: Duration,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(doc) = reconciled::ops::http::get_status(addr).await
            && let Some(g) = doc.guest(name)
            && g.loads >= loads
            && g.state == GuestState::Serving
        {
            return Ok(g.loads);
        }
        if Instant::now() > deadline {
            bail!("{name}: load {loads} not serving within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn free_port() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}
