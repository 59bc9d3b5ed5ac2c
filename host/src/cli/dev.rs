//! `reconciled dev`: every `.wasm` in a folder runs, and reloads the moment it changes (or its
//! `<name>.settings.json` does); with `--build`, a guest crate is rebuilt into the folder on
//! every edit.

use std::path::PathBuf;

use clap::Args;
use reconciled::controller::Settings;
use reconciled::guest::settings::GuestSettings;
use reconciled::sources::dir::{Change, DirSource, Settle};
use reconciled::sources::offer::refused;
use reconciled::supervisor::{Offer, Source};

use crate::cli::host::{ClusterArgs, ConfineArgs, Host, Wiring};

/// `reconciled dev`.
#[derive(Args)]
pub(crate) struct DevArgs {
    /// The folder of .wasm files to run and watch.
    dir: PathBuf,
    /// A guest crate to rebuild (cargo build --target wasm32-wasip2, in the `reconciled-dev`
    /// profile: release without LTO, incremental) when its sources change; the built module is
    /// installed into the folder.
    #[arg(long)]
    build: Option<PathBuf>,
    #[command(flatten)]
    confine: ConfineArgs,
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Runs the folder's guests until Ctrl-C.
pub(crate) async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let grant = args.confine.grant()?;
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| anyhow::anyhow!("cannot create the dev folder {}: {e}", args.dir.display()))?;
    let build = match &args.build {
        // The kubeconfig written into the project must not look like an edit.
        Some(krate) => Some(reconciled::sources::dev_build::DevBuild::start(
            krate,
            &args.dir,
            args.cluster.write_kubeconfig.as_slice(),
        )?),
        None => None,
    };
    let mut host = Host::connect(&args.cluster, Wiring::default()).await?;
    host.serve(&args.cluster).await?;
    let (watch, mut changes) = DirSource::start(&args.dir, Settle::default())?;
    tracing::info!(dir = %args.dir.display(), "watching for modules; write a .wasm there to load or reload it; Ctrl-C stops");
    let sup = host.supervisor.clone();
    let apply = async move {
        while let Some(change) = changes.recv().await {
            match change {
                Change::Upsert {
                    name,
                    path,
                    bytes,
                    digest,
                    settings: file,
                    ..
                } => {
                    let mut settings = Settings {
                        grant: grant.clone(),
                        ..Settings::new(&name)
                    };
                    if let Some(file) = file {
                        match GuestSettings::parse_bytes(&file.bytes) {
                            Ok(s) => settings.guest_settings = s,
                            Err(e) => {
                                let message = format!("{}: {e}", file.path.display());
                                tracing::warn!(guest = %name, "settings refused; the version serving keeps serving: {message}");
                                let offer = refused(Source::DevFolder(path), settings, message);
                                sup.offer(&name, offer);
                                continue;
                            }
                        }
                    }
                    let offer = Offer::Load {
                        source: Source::DevFolder(path),
                        settings,
                        read: Box::new(move || Ok((bytes, Some(digest)))),
                        // A developer's rebuild loads at once.
                        min_interval: std::time::Duration::ZERO,
                    };
                    sup.offer(&name, offer);
                }
                Change::Remove { name, .. } => sup.offer(&name, Offer::Remove),
            }
        }
    };
    tokio::select! {
        () = apply => anyhow::bail!("stopped watching {}", args.dir.display()),
        r = tokio::signal::ctrl_c() => r?,
    }
    tracing::info!("stopping");
    drop((watch, build));
    host.stop().await;
    Ok(())
}
