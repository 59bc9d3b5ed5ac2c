//! `reconciled pack`: the ConfigMap manifest that delivers a module to a tenant namespace.

use std::path::PathBuf;

use clap::Args;

/// `reconciled pack`.
#[derive(Args)]
pub(crate) struct PackArgs {
    /// The module (.wasm component).
    module: PathBuf,
    /// The ConfigMap's name.
    #[arg(long)]
    name: String,
    /// The tenant namespace.
    #[arg(long, short = 'n')]
    namespace: String,
    /// The module's key in the ConfigMap, without `.wasm`: the last part of the guest's name
    /// (`<namespace>/<configmap>/<key>`). Keep it across versions, or an edit loads a second
    /// guest instead of reloading the first. Defaults to the module's file name.
    #[arg(long)]
    key: Option<String>,
}

/// Prints the manifest on stdout, for `kubectl apply --server-side -f -`.
pub(crate) fn pack(args: PackArgs) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.module)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.module.display()))?;
    let stem = args.key.clone().unwrap_or_else(|| {
        args.module
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".wasm").to_string())
            .unwrap_or_else(|| "module".into())
    });
    let manifest = reconciled::sources::configmap::pack(&args.namespace, &args.name, &stem, &bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.module.display()))?;
    println!("{}", serde_json::to_string_pretty(&manifest)?);
    Ok(())
}
