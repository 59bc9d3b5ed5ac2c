//! The image: its size, and how long a container of it takes from `podman run` to ready and
//! from SIGTERM to gone, against the same binary started natively.
//!
//! ```text
//! scripts/image.sh && cargo build --release -p reconciled
//! cargo run --release -p reconciled-bench --bin image_start -- [--rounds 10]
//! ```
//!
//! One loopback control plane with `deploy/reconciled.yaml` applied. Each round starts, in
//! turn:
//! - *container*: the image, with podman, as the Deployment runs it (`testenv::pod`: in-cluster
//!   ServiceAccount token, `host.toml` mounted, read-only root, dropped capabilities);
//! - *native musl*: the binary inside the image (`target/x86_64-unknown-linux-musl/image/`), as
//!   a plain process with the same arguments, env and token (through a kubeconfig);
//! - *native glibc*: `target/release/reconciled`, the same way, if it was built.
//!
//! Each is timed from spawning (`podman run` or the process) to `/readyz` answering 200, and
//! from SIGTERM to exit (`podman stop` returning, or the process reaped); its resident set is
//! read once ready. Medians over the rounds, and each as a ratio to native musl.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testenv::pod::{Pod, http_get};
use testenv::podman::{self, Podman};

const HOST_NS: &str = "reconciled-system";

#[derive(Default)]
struct Samples {
    ready_ms: Vec<f64>,
    stop_ms: Vec<f64>,
    rss_mib: Vec<f64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut rounds = 10usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--rounds" => rounds = it.next().unwrap_or_default().parse()?,
            other => anyhow::bail!("unknown argument {other}; usage: image_start [--rounds N]"),
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let musl = root.join("target/x86_64-unknown-linux-musl/image/reconciled");
    let glibc = root.join("target/release/reconciled");
    let archive = podman::image_archive()?;
    anyhow::ensure!(musl.exists(), "no {}: run scripts/image.sh", musl.display());
    let podman = Podman::new()?;
    let cp = testenv::ControlPlane::start()?;
    let out = cp
        .kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(root.join("deploy/reconciled.yaml"))
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ca = cp.dir().join("pki/ca.crt");
    let pod = Pod::new(
        &cp.admin_client(),
        HOST_NS,
        "reconciled",
        cp.server_addr(),
        &ca,
        podman.dir(),
    )
    .await?;
    let loaded = podman.run(["load".as_ref(), "--input".as_ref(), archive.as_os_str()])?;
    let image = loaded
        .lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .ok_or_else(|| anyhow::anyhow!("podman load said {loaded:?}"))?
        .trim()
        .to_string();
    let size: f64 = podman.inspect_image(&image, "{{.Size}}")?.parse()?;
    let archive_bytes = std::fs::metadata(&archive)?.len() as f64;

    // The natives: the same args, the token in a kubeconfig instead of in-cluster files.
    let token = std::fs::read_to_string(podman.dir().join("serviceaccount/token"))?;
    let kubeconfig = podman.dir().join("native.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{}\", certificate-authority: \"{}\"}}}}]\nusers: [{{name: u, user: {{token: \"{}\"}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
            cp.server_url(),
            ca.display(),
            token.trim()
        ),
    )?;
    let config = podman.dir().join("volumes/config/host.toml");
    let mut peers: Vec<(&str, Option<PathBuf>)> =
        vec![("container", None), ("native musl", Some(musl))];
    if glibc.exists() {
        peers.push(("native glibc", Some(glibc)));
    } else {
        eprintln!(
            "image_start: no {}; build it for the glibc row",
            glibc.display()
        );
    }
    let mut samples: Vec<Samples> = peers.iter().map(|_| Samples::default()).collect();
    for round in 0..rounds {
        for (peer, ((label, bin), s)) in peers.iter().zip(samples.iter_mut()).enumerate() {
            let name = format!("reconciled-{round}");
            let port = free_port();
            let cache = podman.dir().join(format!("native-cache-{round}-{peer}"));
            std::fs::create_dir_all(&cache)?;
            let started = Instant::now();
            let (pid, mut child) = match bin {
                None => {
                    podman.start(
                        &format!("{name}-c"),
                        &pod.flags(&format!("{name}-c"))?,
                        &image,
                        &pod.args(port)?,
                    )?;
                    (None, None)
                }
                Some(bin) => {
                    let child = Command::new(bin)
                        .args(["run", "--config"])
                        .arg(&config)
                        .args(["--listen", &format!("127.0.0.1:{port}"), "--kubeconfig"])
                        .arg(&kubeconfig)
                        .env("POD_NAME", &name)
                        .env("POD_NAMESPACE", HOST_NS)
                        .env("RECONCILED_CACHE_DIR", &cache)
                        .env("RUST_LOG", "info")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()?;
                    (Some(child.id()), Some(child))
                }
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while http_get(port, "/readyz")
                .await
                .is_none_or(|(c, _)| c != 200)
            {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{label} not ready in 60 s: {}",
                    podman.logs()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            s.ready_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let pid = match pid {
                Some(pid) => pid.to_string(),
                None => podman.inspect(&format!("{name}-c"), "{{.State.Pid}}")?,
            };
            s.rss_mib.push(rss_kib(&pid)? / 1024.0);
            let stopping = Instant::now();
            match child.as_mut() {
                None => {
                    podman.run(["stop", "--time", "10", &format!("{name}-c")])?;
                }
                Some(child) => {
                    Command::new("kill").args(["-TERM", &pid]).status()?;
                    child.wait()?;
                }
            }
            s.stop_ms.push(stopping.elapsed().as_secs_f64() * 1000.0);
        }
        eprintln!("image_start: round {}/{rounds}", round + 1);
    }

    println!(
        "image {image}: {:.1} MB unpacked, {:.1} MB as an OCI archive (gzipped layers)\n",
        size / 1e6,
        archive_bytes / 1e6
    );
    println!(
        "| {rounds} rounds, medians | ready after start | ratio | stopped after SIGTERM | ratio | RSS when ready |"
    );
    println!("|---|---|---|---|---|---|");
    let medians: Vec<(f64, f64, f64)> = samples
        .iter_mut()
        .map(|s| {
            (
                reconciled_bench::median(&mut s.ready_ms),
                reconciled_bench::median(&mut s.stop_ms),
                reconciled_bench::median(&mut s.rss_mib),
            )
        })
        .collect();
    // Native musl is the base: the container row is what the container costs, the glibc row
    // what musl costs.
    let (base_ready, base_stop, _) = medians[1];
    for ((label, _), (ready, stop, rss)) in peers.iter().zip(&medians) {
        println!(
            "| {label} | {ready:.0} ms | {:.2} | {stop:.0} ms | {:.2} | {rss:.1} MiB |",
            ready / base_ready,
            stop / base_stop
        );
    }
    Ok(())
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))?;
    Ok(line.trim().trim_end_matches("kB").trim().parse()?)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    l.local_addr().expect("its address").port()
}
