//! Density: N guests in one host, and what each costs it once idle.
//!
//! ```text
//! cargo build --release -p reconciled
//! cargo run --release -p reconciled-bench --bin density -- [--counts 1,100,1000] \
//!     [--modules distinct|one|both] [--idle-s 10] [--host-bin PATH]
//! ```
//!
//! The guest is the example (`examples/configmap-generator`, ~420 KB), copied N times with a
//! custom section that differs per copy, so that every copy has its own digest and is compiled,
//! cached and loaded as a module of its own, as N tenants' builds would be. Every copy is a
//! `[[guest]]` of one `reconciled run`, granted the same namespace, which holds 1000 ConfigMaps
//! and no ConfigMapGenerator: the guests share one set of informers (one cache), and stay idle.
//! With `--modules one` every guest runs the same copy instead, as many tenants of one
//! published reconciler would: one digest, whose code the host holds once.
//!
//! For each N the host is started twice against the same precompile cache (a folder of this
//! run's own, new for each N): *cold* compiles every copy, *warm* loads each from its precompiled artifact, as a
//! restart does. Reported per N and per pass: the time from spawning the host to `/status`
//! showing all N serving, that time per guest, and the resident set once idle (`--idle-s`, 10 s
//! by default, after the last one serves; past 75 s the host has paged out its idle guests'
//! code, see `guest/code_pager.rs`), in all and split into anonymous memory and pages mapped from files (the
//! precompiled artifacts are mapped from the cache, shared and reclaimable). The memory per
//! guest is the resident set beyond the one-guest host's, divided by N - 1; the shared cache is
//! in the one-guest figure.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "bench-density";

fn main() -> anyhow::Result<()> {
    let mut counts = vec![1usize, 100, 1000];
    let mut idle = Duration::from_secs(10);
    let mut modes = vec![Modules::Distinct, Modules::One];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut host_bin = root.join("target/release/reconciled");
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--counts" => {
                counts = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--host-bin" => host_bin = it.next().unwrap_or_default().into(),
            "--idle-s" => idle = Duration::from_secs(it.next().unwrap_or_default().parse()?),
            "--modules" => {
                modes = match it.next().as_deref() {
                    Some("distinct") => vec![Modules::Distinct],
                    Some("one") => vec![Modules::One],
                    Some("both") => vec![Modules::Distinct, Modules::One],
                    other => anyhow::bail!("--modules takes distinct, one or both, not {other:?}"),
                }
            }
            other => anyhow::bail!(
                "unknown argument {other}; usage: density [--counts 1,100,1000] [--modules distinct|one|both] [--idle-s 10] [--host-bin PATH]"
            ),
        }
    }
    anyhow::ensure!(
        host_bin.exists(),
        "no host binary at {}: build it first (cargo build --release -p reconciled)",
        host_bin.display()
    );
    let example =
        reconciled_bench::wasm(&reconciled_bench::guest_wasms(&[])?, "configmap_generator")?;
    let bytes = std::fs::read(&example)?;
    let work = std::env::temp_dir().join(format!("reconciled-density-{}", std::process::id()));
    let modules = work.join("modules");
    std::fs::create_dir_all(&modules)?;
    let most = counts.iter().copied().max().unwrap_or(1);
    for i in 0..most {
        std::fs::write(
            modules.join(format!("g{i:04}.wasm")),
            with_section(&bytes, i),
        )?;
    }
    eprintln!(
        "density: {most} copies of {} ({} bytes) in {}",
        example.display(),
        bytes.len(),
        modules.display()
    );

    let cp = testenv::ControlPlane::start()?;
    let crd = root.join("examples/configmap-generator/crd.yaml");
    let out = cp.kubectl().args(["apply", "-f"]).arg(&crd).output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply {}: {}",
        crd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    rt.block_on(async {
        let client = cp.admin_client();
        reconciled_bench::fill(&client, NS, 1000, |_| None).await?;
        for &mode in &modes {
            for &n in &counts {
                // One guest is the baseline of both modes: run it once.
                if n == 1 && mode == Modules::One && modes.contains(&Modules::Distinct) {
                    continue;
                }
                for pass in ["cold", "warm"] {
                    // A precompile cache per count and mode: its cold pass compiles them all.
                    let artifacts = work.join(format!("artifacts-{n}-{mode:?}"));
                    let r = run_host(
                        &host_bin,
                        cp.kubeconfig_path(),
                        &work,
                        &modules,
                        &artifacts,
                        (n, mode),
                        idle,
                    )
                    .await?;
                    eprintln!(
                        "density: {n} guests, {mode:?} modules, {pass}: all serving in {:.1?}, {:?}",
                        r.0, r.1
                    );
                    rows.push((n, mode, pass, r.0, r.1));
                }
            }
        }
        anyhow::Ok(())
    })?;

    println!(
        "\n| guests | modules | pass | all serving s | per guest ms | RSS idle MiB | of it anonymous | of it file-backed | RSS per guest beyond one KiB | anonymous per guest KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mib = |b: f64| b / (1 << 20) as f64;
    for (n, mode, pass, took, rss) in &rows {
        let base = rows
            .iter()
            .find(|(bn, _, bp, _, _)| *bn == 1 && bp == pass)
            .map(|r| r.4);
        let per = |f: fn(&Rss) -> u64| match base {
            Some(b) if *n > 1 => format!(
                "{:.0}",
                (f(rss) as f64 - f(&b) as f64) / (*n - 1) as f64 / 1024.0
            ),
            _ => "—".into(),
        };
        let mode = match mode {
            Modules::Distinct => "distinct",
            Modules::One => "one",
        };
        println!(
            "| {n} | {mode} | {pass} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {} | {} |",
            took.as_secs_f64(),
            took.as_secs_f64() * 1e3 / *n as f64,
            mib(rss.all as f64),
            mib(rss.anon as f64),
            mib(rss.file as f64),
            per(|r| r.all),
            per(|r| r.anon),
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// Whether each guest runs a module of its own or all run one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modules {
    Distinct,
    One,
}

/// `component` with a custom section `reconciled-density` holding `i`: a valid component with
/// a digest of its own.
fn with_section(component: &[u8], i: usize) -> Vec<u8> {
    let name = b"reconciled-density";
    let payload = format!("copy {i}");
    let mut body = Vec::new();
    leb128(&mut body, name.len());
    body.extend_from_slice(name);
    body.extend_from_slice(payload.as_bytes());
    let mut out = component.to_vec();
    out.push(0); // custom section id
    leb128(&mut out, body.len());
    out.extend_from_slice(&body);
    out
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Starts a host with the first `n` modules, waits until all serve, waits `idle`, and returns how
/// long they took to serve and the resident set then.
async fn run_host(
    bin: &Path,
    kubeconfig: &Path,
    work: &Path,
    modules: &Path,
    artifacts: &Path,
    (n, mode): (usize, Modules),
    idle: Duration,
) -> anyhow::Result<(Duration, Rss)> {
    let config = work.join(format!("host-{n}-{mode:?}.toml"));
    let mut toml = String::new();
    for i in 0..n {
        let copy = if mode == Modules::One { 0 } else { i };
        toml.push_str(&format!(
            "[[guest]]\nname = \"g{i:04}\"\nmodule = {:?}\n[guest.grant]\nnamespaces = [\"{NS}\"]\nkinds = [\"v1/ConfigMap\", \"example.reconciled.dev/v1alpha1/ConfigMapGenerator\"]\n\n",
            modules.join(format!("g{copy:04}.wasm")).display().to_string()
        ));
    }
    std::fs::write(&config, toml)?;
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let log = std::fs::File::create(work.join(format!("host-{n}-{mode:?}.log")))?;
    let started = Instant::now();
    let child = Command::new(bin)
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--config")
        .arg(&config)
        .args(["--listen", &addr.to_string()])
        .env("RECONCILED_CACHE_DIR", artifacts)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let mut child = Stopper(child);
    let pid = child.0.id();
    let deadline = started + Duration::from_secs(1800);
    let mut last_report = Instant::now();
    let took = loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{n} guests not all serving after 30 minutes"
        );
        if let Some(status) = child.0.try_wait()? {
            anyhow::bail!(
                "the host exited ({status}); its log is in {}",
                work.display()
            );
        }
        let serving = serving(addr).await.unwrap_or(0);
        if serving >= n {
            break started.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "density: {serving} of {n} serving after {:.0?}",
                started.elapsed()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(idle).await;
    let rss = rss_bytes(pid)?;
    Ok((took, rss))
}

/// Kills the host when dropped, so that an error never leaves one running.
struct Stopper(Child);

impl Drop for Stopper {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How many guests `/status` shows serving.
async fn serving(addr: SocketAddr) -> anyhow::Result<usize> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let doc: serde_json::Value = serde_json::from_str(body)?;
    Ok(doc["guests"]
        .as_array()
        .map_or(0, |g| g.iter().filter(|g| g["state"] == "serving").count()))
}

/// The resident set of `pid`: in all, anonymous, and mapped from files (the precompiled
/// artifacts among them, shared and reclaimable).
#[derive(Clone, Copy, Debug)]
struct Rss {
    all: u64,
    anon: u64,
    file: u64,
}

fn rss_bytes(pid: u32) -> anyhow::Result<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/{pid}/status"))
    };
    Ok(Rss {
        all: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
    })
}
