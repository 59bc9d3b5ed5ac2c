//! Builds the wasm guests once per test binary (guests/build.sh) and hands out their paths;
//! under scripts/test.sh, which built them already, it takes the paths from
//! `RECONCILED_GUEST_WASMS` instead. The modules built against older WIT versions are not built:
//! they are the components `guests/compat/` keeps ([`compat`]).

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

/// A module built against the released `reconciled:runtime@<version>`, as `guests/compat/` keeps
/// it: its bytes, checked against the digest its `provenance.toml` records, so that a test never
/// runs a component other than the one kept.
pub fn compat(version: &str) -> Vec<u8> {
    use sha2::Digest as _;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guests/compat")
        .join(version);
    let bytes = std::fs::read(dir.join("stamp.wasm"))
        .unwrap_or_else(|e| panic!("guests/compat/{version}/stamp.wasm: {e}"));
    let provenance = std::fs::read_to_string(dir.join("provenance.toml"))
        .unwrap_or_else(|e| panic!("guests/compat/{version}/provenance.toml: {e}"));
    let recorded = provenance
        .lines()
        .find_map(|l| l.strip_prefix("sha256 = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("guests/compat/{version}/provenance.toml records no sha256"));
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        digest, recorded,
        "guests/compat/{version}/stamp.wasm is not the component its provenance records"
    );
    bytes
}
