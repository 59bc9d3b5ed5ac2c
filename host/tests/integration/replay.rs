//! Record and replay: `reconciled run --record` records 200 reconciles of the ConfigMapGenerator
//! against the loopback control plane; `reconciled replay` finds no difference against the same
//! module, and against a version with one deliberate change (its field manager) reports exactly
//! the writes that change: every apply, and nothing else.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::guests::wasm;
use common::host::{TempDir, free_port, output_text};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use reconciled::guest::tape::{Recording, Write};
use testenv::ControlPlane;

const RECONCILES: usize = 200;

/// The generator's kind, as a write names it (its status is applied).
const GENERATOR: &str = "example.reconciled.dev/v1alpha1/ConfigMapGenerator";

struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/configmap-generator")
}

fn replay(dir: &Path, module: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reconciled"))
        .arg("replay")
        .arg(dir)
        .arg("--guest")
        .arg(module)
        .arg("--crd")
        .arg(example().join("crd.yaml"))
        .args(extra)
        .output()
        .expect("reconciled runs")
}

/// The example with one deliberate change, its field manager, built beside the other guests
/// (same target folder, so only this crate compiles).
fn changed_example(dir: &Path) -> PathBuf {
    let src = dir.join("changed");
    std::fs::create_dir_all(src.join("src")).unwrap();
    for f in ["src/lib.rs", "src/crd.rs", "Cargo.lock"] {
        std::fs::copy(example().join(f), src.join(f)).unwrap();
    }
    let lib = std::fs::read_to_string(src.join("src/lib.rs")).unwrap();
    let changed = lib.replace(
        r#"const FIELD_MANAGER: &str = "configmap-generator";"#,
        r#"const FIELD_MANAGER: &str = "configmap-generator-v2";"#,
    );
    assert_ne!(
        lib, changed,
        "the example names its field manager as the test expects"
    );
    std::fs::write(src.join("src/lib.rs"), changed).unwrap();
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/sdk");
    let manifest = std::fs::read_to_string(example().join("Cargo.toml"))
        .unwrap()
        .replace(
            r#"name = "configmap-generator""#,
            r#"name = "configmap-generator-changed""#,
        )
        .replace(
            r#"path = "../../guests/sdk""#,
            &format!("path = {:?}", sdk.canonicalize().unwrap()),
        );
    std::fs::write(src.join("Cargo.toml"), manifest).unwrap();
    let target = wasm("configmap_generator")
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let status = Command::new("cargo")
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the changed example builds");
    target.join("wasm32-wasip2/release/configmap_generator_changed.wasm")
}

fn summary(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.starts_with("replayed "))
        .unwrap_or("(no summary)")
}

fn recordings(dir: &Path) -> Vec<Recording> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
        .iter()
        .map(|p| serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_recorded_reconciles_replay_the_same_and_a_changed_version_differs_exactly() {
    let cp = ControlPlane::shared();
    let admin = cp.admin_client();
    common::install_example_crd(cp).await;
    let ns = "replay";
    common::namespace(&admin, ns).await;
    let dir = TempDir::new("replay");
    let recorded = dir.0.join("recording");
    let module = wasm("configmap_generator");
    let log = std::fs::File::create(dir.0.join("host.log")).unwrap();
    let host = Host(
        Command::new(env!("CARGO_BIN_EXE_reconciled"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .arg("--listen")
            .arg(free_port().to_string())
            .arg("--guest")
            .arg(&module)
            // Not the generators other tests reconcile on the shared control plane.
            .args(["--namespace", ns])
            .arg("--record")
            .arg(&recorded)
            .args(["--record-guest", "configmap-generator"])
            .env("RECONCILED_CACHE_DIR", dir.0.join("cache"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    // Ten generators, edited round after round (copies up and down, new data) until the
    // recording holds enough reconciles.
    let gvk = GroupVersionKind::gvk("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator");
    let generators =
        Api::<DynamicObject>::namespaced_with(admin.clone(), ns, &ApiResource::from_gvk(&gvk));
    for g in 0..10 {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.reconciled.dev/v1alpha1", "kind": "ConfigMapGenerator",
            "metadata": {"name": format!("gen-{g}")},
            "spec": {"copies": 2, "data": {"round": "0"}}
        }))
        .unwrap();
        generators
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    let mut round = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let kept = |dir: &Path| {
        std::fs::read_dir(dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
                .count()
        })
    };
    while kept(&recorded) < RECONCILES {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} reconciles recorded in 240 s; host log in {}",
            kept(&recorded),
            dir.0.display()
        );
        round += 1;
        for g in 0..10 {
            let patch = serde_json::json!({
                "spec": {"copies": 1 + (round + g) % 3, "data": {"round": round.to_string()}}
            });
            generators
                .patch(
                    &format!("gen-{g}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(host);
    let all = recordings(&recorded);
    assert!(all.len() >= RECONCILES, "{}", all.len());
    let applies: usize = all
        .iter()
        .map(|r| r.writes.iter().filter(|w| w.verb == "apply").count())
        .sum();
    // The generator's own status is applied too, by the same field manager.
    let status_applies: usize = all
        .iter()
        .map(|r| {
            let status =
                |w: &&Write| w.verb == "apply" && w.subresource.as_deref() == Some("status");
            r.writes.iter().filter(status).count()
        })
        .sum();
    let deletes: usize = all
        .iter()
        .map(|r| r.writes.iter().filter(|w| w.verb == "delete").count())
        .sum();
    eprintln!(
        "recorded {} reconciles in {round} rounds: {applies} applies, {deletes} deletes",
        all.len()
    );
    assert!(
        applies > status_applies && status_applies > 0 && deletes > 0,
        "the recording has applies of ConfigMaps and of status, and prunes"
    );

    let same = replay(&recorded, &module, &[]);
    let report = output_text(&same);
    eprintln!("same module: {}", summary(&report));
    assert!(
        same.status.success(),
        "the same module replays the same:\n{report}"
    );
    assert!(
        report.contains(&format!("{} the same, 0 different", all.len())),
        "{report}"
    );

    let changed = changed_example(&dir.0);
    let differs = replay(&recorded, &changed, &[]);
    let report = output_text(&differs);
    eprintln!("changed module: {}", summary(&report));
    assert!(
        !differs.status.success(),
        "a changed version fails the replay:\n{report}"
    );
    let changed_applies = |prefix: &str| {
        let prefix = format!("write changed: apply {prefix}");
        let lines = report.lines();
        lines
            .filter(|l| l.trim_start().starts_with(&prefix))
            .count()
    };
    assert_eq!(
        (changed_applies("v1/ConfigMap"), changed_applies(GENERATOR)),
        (applies - status_applies, status_applies),
        "every recorded apply, of a ConfigMap or of the status, is reported changed:\n{report}"
    );
    for other in [
        "write added",
        "write removed",
        "event ",
        "outcome:",
        "new read",
        "BROKEN",
    ] {
        assert!(
            !report.lines().any(|l| l.trim_start().starts_with(other)),
            "nothing but the applies differ ({other}):\n{report}"
        );
    }
    assert!(
        report.contains("-fieldManager: configmap-generator\n")
            && report.contains("+fieldManager: configmap-generator-v2"),
        "the diff shows the field manager:\n{report}"
    );
    let allowed = replay(
        &recorded,
        &changed,
        &["--allow", "v1/ConfigMap", "--allow", GENERATOR],
    );
    assert!(
        allowed.status.success(),
        "differences named by --allow do not fail:\n{}",
        output_text(&allowed)
    );
}
