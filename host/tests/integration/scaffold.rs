//! `reconciled new` in each language: the project it writes builds with its one command, its
//! own test passes, its README's kubectl lines run as written, and `reconciled dev` runs it
//! against the control plane until the sample object is reconciled. Prints how long that took,
//! from `new` to the first reconcile.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::host::TempDir;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use testenv::ControlPlane;

fn ok(what: &str, cmd: &mut Command) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `reconciled dev` child, killed on drop; its log printed if the test fails.
struct Dev(std::process::Child, std::path::PathBuf);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- reconciled dev log ---\n{}",
                std::fs::read_to_string(&self.1).unwrap_or_default()
            );
        }
    }
}

async fn scaffold_builds_tests_and_reconciles(lang: &str, test: &[&str]) {
    let started = Instant::now();
    let cp = ControlPlane::shared();
    let tmp = TempDir::new(&format!("new-{lang}"));
    let name = format!("hello-{lang}");
    let dir = tmp.0.join(&name);
    let reconciled = env!("CARGO_BIN_EXE_reconciled");
    ok(
        "reconciled new",
        Command::new(reconciled)
            .args(["new", &name, "--lang", lang, "--dir"])
            .arg(&dir),
    );
    // The Rust project shares the guests' and the host's compiled dependencies, as a developer's
    // CARGO_TARGET_DIR would; the others use the SDKs' toolchains, installed once.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    ok(
        "./build.sh",
        Command::new("bash")
            .arg(dir.join("build.sh"))
            .env("CARGO_TARGET_DIR", target.join("wasm-guests")),
    );
    let built = started.elapsed();
    ok(
        "the project's test",
        Command::new(test[0])
            .args(&test[1..])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target),
    );
    assert!(dir.join(format!("dev/{name}.wasm")).is_file());
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        readme.lines().count() <= 16,
        "a README of about a dozen lines:\n{readme}"
    );
    assert!(
        !readme.contains("http"),
        "a README links to nothing outside the checkout:\n{readme}"
    );

    // The README's kubectl lines, as written (against this control plane, in the project's
    // folder): the CRD, its wait, the sample; its `get` once the sample is reconciled.
    let kubectl: Vec<Vec<String>> = (readme.lines())
        .filter_map(|l| l.trim().strip_prefix("kubectl --kubeconfig kubeconfig "))
        .map(|rest| {
            let command = rest.split(" #").next().unwrap_or_default();
            command.split_whitespace().map(str::to_string).collect()
        })
        .collect();
    assert_eq!(kubectl.len(), 4, "{readme}");
    let (get, setup) = kubectl.split_last().unwrap();
    for args in setup {
        ok(
            &format!("the README's kubectl {}", args.join(" ")),
            cp.kubectl().args(args).current_dir(&dir),
        );
    }
    let plural_group = std::fs::read_to_string(dir.join("crd.yaml"))
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("name: ").map(str::to_string))
        .unwrap();

    let log = tmp.0.join("dev.log");
    let out = std::fs::File::create(&log).unwrap();
    let addr = common::host::free_port();
    let _dev = Dev(
        Command::new(reconciled)
            .arg("dev")
            .arg(dir.join("dev"))
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .args(["--listen", &addr.to_string()])
            .env("RECONCILED_CACHE_DIR", tmp.0.join("cache"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap(),
        log,
    );
    let group = plural_group.split_once('.').unwrap().1.to_string();
    let kind: String = name
        .split('-')
        .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
        .collect();
    let gvk = GroupVersionKind::gvk(&group, "v1alpha1", &kind);
    let api = Api::<DynamicObject>::namespaced_with(
        cp.admin_client(),
        "default",
        &ApiResource::from_gvk(&gvk),
    );
    common::wait::wait_until_async(
        "the sample reconciled",
        Duration::from_secs(120),
        async || {
            api.get("sample").await.ok().is_some_and(|o| {
                o.data["status"]["message"] == "reconciled: hello"
                    && o.data["status"]["observedGeneration"] == 1
            })
        },
    )
    .await;
    let out = cp.kubectl().args(get).current_dir(&dir).output().unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains("reconciled: hello"),
        "the README's kubectl {}: {listed}{}",
        get.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "reconciled new --lang {lang}: built in {:.1} s, first reconcile {:.1} s after `new` (test and setup included)",
        built.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rust_project_builds_tests_and_reconciles() {
    scaffold_builds_tests_and_reconciles("rust", &["cargo", "test", "--quiet"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_typescript_project_builds_tests_and_reconciles() {
    scaffold_builds_tests_and_reconciles("ts", &["./test.sh"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_python_project_builds_tests_and_reconciles() {
    scaffold_builds_tests_and_reconciles("python", &["./test.sh"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_go_project_builds_tests_and_reconciles() {
    scaffold_builds_tests_and_reconciles("go", &["./test.sh"]).await;
}
