//! Builds the wasm guests once per test binary (guests/build.sh) and hands out their paths;
//! under scripts/test.sh, which built them already, it takes the paths from
//! `RECONCILED_GUEST_WASMS` instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Path of the built `name.wasm` (`probe`, `configmap_generator`).
pub fn wasm(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        // scripts/test.sh builds them once for every test binary and says where they are;
        // rebuilding here would recompile stamp's feature variants once per binary.
        if let Ok(paths) = std::env::var("RECONCILED_GUEST_WASMS") {
            return paths
                .lines()
                .map(PathBuf::from)
                .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
                .collect();
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/build.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "guests/build.sh failed ({})",
            out.status
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
            .collect()
    });
    built
        .get(name)
        .unwrap_or_else(|| panic!("guests/build.sh built no {name}.wasm: {built:?}"))
        .clone()
}
