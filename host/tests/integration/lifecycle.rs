//! The host process from start to stop, as a probe and an operator see it: `/readyz` probed
//! every 20 ms from the moment the process starts, and Ctrl-C.

use crate::common;

use common::host::free_port;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reconciled::ops::status::{GuestState, Status};
use testenv::ControlPlane;

/// A `reconciled run` child, killed on drop; its log goes to `log`.
struct Run {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- reconciled run log ---\n{log}");
        }
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_dir_all(self.log.with_extension("cache"));
    }
}

fn run(args: &[&str], addr: SocketAddr, kubeconfig: Option<&Path>) -> Run {
    let log = std::env::temp_dir().join(format!(
        "reconciled-lifecycle-{}-{}.log",
        std::process::id(),
        fastrand::u32(..)
    ));
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reconciled"));
    cmd.arg("run")
        .args(args)
        .arg("--listen")
        .arg(addr.to_string())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    if let Some(k) = kubeconfig {
        // A cold precompile cache: loading takes as long as compiling, as on a fresh host.
        // (Not with the embedded control plane, which finds its binaries under the same dir.)
        cmd.arg("--kubeconfig")
            .arg(k)
            .env("RECONCILED_CACHE_DIR", log.with_extension("cache"));
    }
    Run {
        child: cmd.spawn().unwrap(),
        log,
    }
}

/// One probe: `/readyz`'s answer, then `/status` read right after it.
struct Probe {
    at: Duration,
    readyz: Option<(u16, String)>,
    status: Option<Status>,
}

/// Probes `/readyz` (then `/status`) every 20 ms for `span`, or until `stop` says so.
async fn probe(addr: SocketAddr, span: Duration, stop: impl Fn(&Probe) -> bool) -> Vec<Probe> {
    let started = Instant::now();
    let mut probes = Vec::new();
    while started.elapsed() < span {
        let readyz = reconciled::ops::http::get(addr, "/readyz").await.ok();
        let status = match &readyz {
            Some(_) => reconciled::ops::http::get_status(addr).await.ok(),
            None => None,
        };
        let p = Probe {
            at: started.elapsed(),
            readyz,
            status,
        };
        let done = stop(&p);
        probes.push(p);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    probes
}

/// The state of guest `name`; `None` when the host does not know it.
fn guest_state(status: &Status, name: &str) -> Option<GuestState> {
    status.guest(name).map(|g| g.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_never_ok_before_every_configured_guest_has_loaded_or_been_rejected() {
    // Its own control plane: an operator's `--guest` may read and write every namespace, and
    // the probe guest would answer other tests' `leak-` ConfigMaps on the shared one
    // (isolation.rs read a probe's record where it expected its TypeScript guest's).
    static CP: std::sync::OnceLock<Result<ControlPlane, String>> = std::sync::OnceLock::new();
    let cp = ControlPlane::own(&CP, &[]);
    let addr = free_port();
    let probe_wasm = common::guests::wasm("probe");
    let stamp = common::guests::wasm("stamp_v1");
    let missing = std::env::temp_dir().join("reconciled-lifecycle-no-such-module.wasm");
    let _run = run(
        &[
            "--guest",
            probe_wasm.to_str().unwrap(),
            "--guest",
            stamp.to_str().unwrap(),
            "--guest",
            missing.to_str().unwrap(),
        ],
        addr,
        Some(cp.kubeconfig_path()),
    );
    let probes = probe(addr, Duration::from_secs(60), |p| {
        p.readyz.as_ref().is_some_and(|(code, _)| *code == 200)
    })
    .await;
    let answered: Vec<&Probe> = probes.iter().filter(|p| p.readyz.is_some()).collect();
    let ok = answered
        .iter()
        .find(|p| p.readyz.as_ref().unwrap().0 == 200)
        .unwrap_or_else(|| {
            panic!(
                "never ready within 60 s; last answer {:?}",
                answered.last().map(|p| &p.readyz)
            )
        });
    eprintln!(
        "{} probes, first answer at {:?}, first 200 at {:?}",
        probes.len(),
        answered.first().map(|p| p.at),
        ok.at
    );
    let status = ok.status.as_ref().expect("/status after the first 200");
    assert_eq!(
        guest_state(status, "probe"),
        Some(GuestState::Serving),
        "{status:#?}"
    );
    assert_ne!(
        guest_state(status, "stamp_v1"),
        Some(GuestState::Loading),
        "{status:#?}"
    );
    assert_eq!(
        guest_state(status, "reconciled-lifecycle-no-such-module"),
        Some(GuestState::Rejected),
        "{status:#?}"
    );
    // Every answer before it was a 503 that said why.
    for p in answered
        .iter()
        .take_while(|p| p.readyz.as_ref().unwrap().0 != 200)
    {
        let (code, body) = p.readyz.as_ref().unwrap();
        assert_eq!(*code, 503, "at {:?}: {body}", p.at);
        assert!(
            body.starts_with("not ready:\n") && body.lines().count() > 1,
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_never_ok_for_a_host_that_cannot_sync_what_its_guest_needs() {
    let cp = ControlPlane::shared();
    let nobody = cp.user("reconciled-lifecycle-nobody", &[]).unwrap();
    let addr = free_port();
    let probe_wasm = common::guests::wasm("probe");
    let _run = run(
        &["--guest", probe_wasm.to_str().unwrap()],
        addr,
        Some(&nobody.kubeconfig),
    );
    // Until the guest has loaded and its informer found out, then 3 s more.
    let mut probes = probe(addr, Duration::from_secs(60), |p| {
        p.readyz
            .as_ref()
            .is_some_and(|(_, b)| b.contains("forbidden") || b.starts_with("ok"))
    })
    .await;
    let settled = probe(addr, Duration::from_secs(3), |_| false).await;
    // Answers all along, not a count: a loaded machine answers fewer probes in the same time.
    assert!(
        settled.iter().all(|p| p.readyz.is_some()) && settled.len() >= 5,
        "the 3 s after it settled, /readyz answered {} of {} probes",
        settled.iter().filter(|p| p.readyz.is_some()).count(),
        settled.len()
    );
    probes.extend(settled);
    let answered: Vec<&Probe> = probes.iter().filter(|p| p.readyz.is_some()).collect();
    for p in &answered {
        let (code, body) = p.readyz.as_ref().unwrap();
        assert_eq!(
            *code, 503,
            "a host with no rights answered at {:?}: {body}",
            p.at
        );
    }
    let (_, last) = answered.last().unwrap().readyz.as_ref().unwrap();
    assert!(
        last.contains("guest probe:") && last.contains("forbidden") && last.contains("add rule"),
        "the reason names the rule to add: {last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_host_and_its_embedded_control_plane_quickly_and_quietly() {
    let addr = free_port();
    let probe_wasm = common::guests::wasm("probe");
    // No kubeconfig: the host starts its own control plane, as the demo does.
    let mut run = run(&["--guest", probe_wasm.to_str().unwrap()], addr, None);
    let ready = probe(addr, Duration::from_secs(120), |p| {
        p.readyz.as_ref().is_some_and(|(code, _)| *code == 200)
    })
    .await;
    assert!(
        ready
            .last()
            .and_then(|p| p.readyz.as_ref())
            .is_some_and(|(code, _)| *code == 200),
        "the host with an embedded control plane never became ready"
    );
    let pid = run.child.id() as libc::pid_t;
    let sent = Instant::now();
    // SAFETY: signalling our own child, which has not been reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "still running 30 s after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    let log = std::fs::read_to_string(&run.log).unwrap();
    eprintln!("Ctrl-C to exit: {took:?} ({status})");
    assert!(status.success(), "{status}\n{log}");
    // Quickly: well before the 30 s a stuck stop would take; the figure is printed above.
    assert!(took < Duration::from_secs(10), "took {took:?}\n{log}");
    let after: Vec<&str> = log
        .lines()
        .skip_while(|l| !l.contains("stopping"))
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        after.is_empty(),
        "warnings while stopping: {after:#?}\n{log}"
    );
}
