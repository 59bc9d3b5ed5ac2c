//! `write-wasi-adapter <out.wasm>`: writes wasmtime 48's WASI preview-1 reactor adapter.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: write-wasi-adapter <out.wasm>");
        return ExitCode::from(2);
    };
    let bytes = wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
    // Through a temporary name, so that a reader never sees half an adapter.
    let tmp = std::path::PathBuf::from(format!("{}.tmp", out.to_string_lossy()));
    if let Err(e) = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &out)) {
        eprintln!(
            "write-wasi-adapter: cannot write {}: {e}",
            out.to_string_lossy()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
