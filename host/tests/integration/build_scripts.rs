//! The guest build scripts as a user runs them: a relative output path works and leaves
//! nothing in the SDK's checkout, unchanged sources give the very same module (the previous
//! build kept, since componentize-js and componentize-py never give the same bytes twice), and
//! the Go tools stay where they were installed whatever `RECONCILED_CACHE_DIR` says.
//!
//! Each build here is of a guest `guests/build.sh` built already, so nothing is componentized
//! again: the scripts' own handling of paths and of their last build is what is tested.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

/// `git status --porcelain` of the checkout: what a build left behind.
fn leftovers(root: &Path) -> String {
    let out = Command::new("git")
        .args([
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--",
            "guests",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stderr}",
        out.status
    );
    stderr
}

#[test]
fn the_typescript_and_python_build_scripts_take_a_relative_output_path_and_keep_an_unchanged_build()
{
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.canonicalize().unwrap();
    let before = leftovers(&root);
    for (built, command) in [
        (
            "configmap_generator_ts",
            vec![
                "guests/js/build.sh",
                "examples/configmap-generator-ts/src/index.ts",
            ],
        ),
        (
            "configmap_generator_py",
            vec![
                "guests/python/build.sh",
                "examples/configmap-generator-py",
                "app",
            ],
        ),
    ] {
        let module = common::guests::wasm(built);
        let bytes = std::fs::read(&module).unwrap();
        // From the module's folder, the output named by its bare file name.
        let folder = module.parent().unwrap();
        let mut cmd = Command::new(root.join(command[0]));
        for arg in &command[1..] {
            cmd.arg(root.join(arg));
        }
        let said = run(
            &format!("{} with a relative output", command[0]),
            cmd.arg(module.file_name().unwrap()).current_dir(folder),
        );
        assert!(said.contains("is up to date"), "{said}");
        assert_eq!(
            std::fs::read(&module).unwrap(),
            bytes,
            "unchanged sources, the very same module"
        );
    }
    assert_eq!(
        leftovers(&root),
        before,
        "the builds left files in the checkout"
    );
}

#[test]
fn the_go_tools_are_found_where_they_were_installed_whatever_reconciled_cache_dir_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tools = |cache: &str| {
        let out = Command::new("bash")
            .arg(root.join("guests/go/tools.sh"))
            .env("RECONCILED_CACHE_DIR", cache)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "tools.sh: {stderr}");
        assert!(!stderr.contains("installing"), "installed again: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a = std::env::temp_dir().join(format!("reconciled-tools-a-{}", std::process::id()));
    let b = std::env::temp_dir().join(format!("reconciled-tools-b-{}", std::process::id()));
    assert_eq!(
        tools(&a.display().to_string()),
        tools(&b.display().to_string())
    );
}
