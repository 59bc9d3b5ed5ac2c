//! `reconciled dev` as a developer runs it: the binary, a folder of modules, the real apiserver.
//! A rewrite of the module reloads it once, however many file-system events the write makes;
//! `/status`, `/metrics`, `/healthz`, `/readyz` and `reconciled status` report it.

use crate::common;

use common::host::free_port;
use common::wait::{guest, wait_guest};

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reconciled::guest::digest_of;
use reconciled::ops::status::GuestState;
use testenv::ControlPlane;

struct Dev {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The host's log only matters when the test failed.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("dev.log")).unwrap_or_default();
            eprintln!("--- reconciled dev log ---\n{log}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(cp: &ControlPlane) -> Dev {
    start_with(cp, &[])
}

/// `reconciled dev <dir>/modules` with `args` more.
fn start_with(cp: &ControlPlane, args: &[&std::ffi::OsStr]) -> Dev {
    let dir = std::env::temp_dir().join(format!(
        "reconciled-dev-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(dir.join("modules")).unwrap();
    let addr = free_port();
    let log = std::fs::File::create(dir.join("dev.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .arg("dev")
        .arg(dir.join("modules"))
        .args(args)
        // The stamp guests would otherwise stamp every labelled ConfigMap on the shared control
        // plane, other tests' included.
        .args(["--namespace", "dev-loop"])
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .arg("--listen")
        .arg(addr.to_string())
        .env("RECONCILED_CACHE_DIR", dir.join("cache"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Dev { child, addr, dir }
}

async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    reconciled::ops::http::get(addr, path).await.ok()
}

/// Writes `bytes` the way a slow writer does: truncate, then chunks with pauses, flushed one
/// by one, so the watcher sees a burst of events (one per chunk) for one change.
fn write_in_chunks(path: &Path, bytes: &[u8], chunks: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    for chunk in bytes.chunks(bytes.len().div_ceil(chunks)) {
        f.write_all(chunk).unwrap();
        f.sync_data().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_a_module_reloads_it_once_and_the_endpoints_report_it() {
    let cp = ControlPlane::shared();
    let v1 = std::fs::read(common::guests::wasm("stamp_v1")).unwrap();
    let v2 = std::fs::read(common::guests::wasm("stamp_v2")).unwrap();
    let dev = start(cp);
    let module = dev.dir.join("modules/stamp.wasm");
    let addr = dev.addr;

    // Present before the folder is watched or after: either way it loads.
    std::fs::write(&module, &v1).unwrap();
    let g = wait_guest(addr, "stamp", Duration::from_secs(60), |g| {
        g.state == GuestState::Serving
    })
    .await;
    assert_eq!(g.digest, Some(digest_of(&v1)));
    assert_eq!(g.loads, 1);

    // One rewrite, written as a burst of events: one reload.
    tokio::task::spawn_blocking({
        let (module, v2) = (module.clone(), v2.clone());
        move || write_in_chunks(&module, &v2, 8)
    })
    .await
    .unwrap();
    wait_guest(addr, "stamp", Duration::from_secs(60), |g| {
        g.digest.as_deref() == Some(&digest_of(&v2))
    })
    .await;
    // Give stray events time to cause a second load, if they were going to.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let g = guest(addr, "stamp").await.unwrap();
    assert_eq!(g.loads, 2, "{g:#?}");
    assert_eq!(g.rejections, 0, "{g:#?}");

    // The same bytes again (a touch, a no-op rebuild): no load.
    std::fs::write(&module, &v2).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(guest(addr, "stamp").await.unwrap().loads, 2);

    // A half-finished file that is not a module is rejected; v2 keeps serving.
    std::fs::write(&module, &v2[..v2.len() / 2]).unwrap();
    let g = wait_guest(addr, "stamp", Duration::from_secs(60), |g| {
        g.rejections == 1
    })
    .await;
    assert_eq!(g.state, GuestState::Serving);
    assert_eq!(g.digest, Some(digest_of(&v2)));
    assert!(
        g.last_error
            .as_deref()
            .is_some_and(|e| e.contains("not a valid wasm component")),
        "{g:#?}"
    );

    // The endpoints.
    assert_eq!(get(addr, "/healthz").await.unwrap(), (200, "ok\n".into()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(addr, "/readyz").await.unwrap().0 != 200 {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            get(addr, "/readyz").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, metrics) = get(addr, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    for line in [
        "reconciled_module_loads_total{guest=\"stamp\"} 2",
        "reconciled_module_rejections_total{guest=\"stamp\",reason=\"invalid\"} 1",
        "reconciled_guest_serving{guest=\"stamp\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }
    assert!(
        metrics.contains(&format!("digest=\"{}\"", digest_of(&v2))),
        "{metrics}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .args(["status", "--addr", &addr.to_string()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(
        table.contains("stamp")
            && table.contains("serving")
            && table.contains(&digest_of(&v2)[..12]),
        "{table}"
    );

    // v2 written whole again: nothing to load, and the half file's rejection no longer
    // stands, since the folder asks for what serves.
    std::fs::write(&module, &v2).unwrap();
    let g = wait_guest(addr, "stamp", Duration::from_secs(60), |g| {
        g.last_error.is_none()
    })
    .await;
    assert_eq!(g.loads, 2, "{g:#?}");

    // Settings beside the module: a reload with them, and a bad file refused by its name.
    let settings = dev.dir.join("modules/stamp.settings.json");
    std::fs::write(&settings, br#"{"version": "dev"}"#).unwrap();
    let g = wait_guest(addr, "stamp", Duration::from_secs(60), |g| g.loads == 3).await;
    assert_eq!(
        g.digest,
        Some(digest_of(&v2)),
        "the same module, new settings"
    );
    std::fs::write(&settings, b"[1]").unwrap();
    let g = wait_guest(addr, "stamp", Duration::from_secs(60), |g| {
        g.rejections == 2
    })
    .await;
    assert!(
        g.last_error
            .as_deref()
            .is_some_and(|e| e.contains("stamp.settings.json") && e.contains("not a JSON object")),
        "{g:#?}"
    );
    assert_eq!(g.state, GuestState::Serving, "the settings serving stay");

    // Removing the file unloads the guest.
    std::fs::remove_file(&module).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while guest(addr, "stamp").await.is_some() {
        assert!(Instant::now() < deadline, "not unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Lines of `dev`'s log holding `what`.
fn logged(dev: &Dev, what: &str) -> Vec<String> {
    (std::fs::read_to_string(dev.dir.join("dev.log")).unwrap_or_default())
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_sh_project_builds_once_at_start_and_once_per_edit_never_without_one_and_says_which()
 {
    let cp = ControlPlane::shared();
    // A project whose build gives new bytes every time, as componentize-js's does: the stamp
    // module with a custom section holding the time of the build.
    let project = std::env::temp_dir().join(format!(
        "reconciled-dev-project-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(project.join("src")).unwrap();
    let stamp = common::guests::wasm("stamp_v1");
    std::fs::write(
        project.join("build.sh"),
        format!(
            "#!/usr/bin/env bash\nset -eu\nout=\"$RECONCILED_OUT_DIR/stamp.wasm\"\n\
             cp {} \"$out.tmp\"\n\
             # A custom section (id 0): its size, name \"t\", then the time of this build.\n\
             t=$(date +%s%N); size=$(printf %02x $((${{#t}} + 2)))\n\
             printf \"\\\\x00\\\\x$size\\\\x01t%s\" \"$t\" >> \"$out.tmp\"\n\
             mv \"$out.tmp\" \"$out\"\n",
            stamp.display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(project.join("build.sh"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(project.join("build.sh"), perms).unwrap();
    std::fs::write(project.join("src/index.ts"), "export const v = 1;\n").unwrap();
    let dev = start_with(cp, &["--build".as_ref(), project.as_os_str()]);
    let addr = dev.addr;
    // The build at start, and its load.
    wait_guest(addr, "stamp", Duration::from_secs(60), |g| {
        g.state == GuestState::Serving && g.loads == 1
    })
    .await;

    // What is no edit builds nothing: rewrites of the same bytes, opens for writing.
    let index = project.join("src/index.ts");
    for _ in 0..3 {
        let same = std::fs::read(&index).unwrap();
        std::fs::write(&index, &same).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&index)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let builds = logged(&dev, "building guest project");
    assert_eq!(builds.len(), 1, "no edit, no build: {builds:#?}");
    assert!(builds[0].contains("cause=start"), "{builds:#?}");
    assert_eq!(guest(addr, "stamp").await.unwrap().loads, 1);

    // One edit: one build, one load, and the log names the edit and the module it made.
    std::fs::write(&index, "export const v = 2;\n").unwrap();
    let g = wait_guest(addr, "stamp", Duration::from_secs(60), |g| g.loads == 2).await;
    let digest = g.digest.unwrap();
    // The folder may load the module before the build's end is logged.
    common::wait::wait_until("the install logged", Duration::from_secs(30), || {
        (logged(&dev, "module installed").last()).is_some_and(|l| l.contains(&digest))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let builds = logged(&dev, "building guest project");
    assert_eq!(builds.len(), 2, "{builds:#?}");
    assert!(builds[1].contains("src/index.ts changed"), "{builds:#?}");
    let installed = logged(&dev, "module installed");
    assert!(
        installed
            .last()
            .is_some_and(|l| l.contains(&digest) && l.contains("src/index.ts changed")),
        "the build that made the module serving names the edit: {installed:#?}"
    );
    assert_eq!(guest(addr, "stamp").await.unwrap().loads, 2, "one load");
    let _ = std::fs::remove_dir_all(&project);
}
