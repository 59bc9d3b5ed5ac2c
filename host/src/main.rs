//! `reconciled`: run wasm reconcilers against a Kubernetes cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use reconciled::config::{Config, GuestConfig};
use reconciled::controller::{Controller, Settings};
use reconciled::factory::InformerFactory;
use reconciled::guest::Runtime;
use reconciled::informer::Options;

#[derive(Parser)]
#[command(
    name = "reconciled",
    version,
    about = "A WebAssembly-hosted reconciler runtime for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load guests and reconcile until Ctrl-C.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Kubeconfig to use. Without it (and without $KUBECONFIG) an embedded loopback control
    /// plane is started, for trying things out.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Host config file: guests, grants, limits (see `reconciled::config`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A guest module to run with a full grant; repeatable. Named after its file.
    #[arg(long = "guest")]
    guests: Vec<PathBuf>,
    /// With the embedded control plane: also write its admin kubeconfig here.
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("reconciled: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Run(args) => rt.block_on(run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reconciled: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn client(args: &RunArgs) -> anyhow::Result<(kube::Client, Option<testenv::ControlPlane>)> {
    if let Some(path) = &args.kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        return Ok((kube::Client::try_from(cfg)?, None));
    }
    if std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
    {
        return Ok((kube::Client::try_default().await?, None));
    }
    tracing::info!("no kubeconfig given: starting an embedded control plane on loopback");
    let cp = tokio::task::spawn_blocking(testenv::ControlPlane::start).await??;
    if let Some(out) = &args.write_kubeconfig {
        std::fs::copy(cp.kubeconfig_path(), out)?;
    }
    tracing::info!(kubeconfig = %cp.kubeconfig_path().display(), "embedded control plane ready; try: kubectl --kubeconfig {} get configmaps -A", cp.kubeconfig_path().display());
    Ok((cp.admin_client(), Some(cp)))
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut guests: Vec<GuestConfig> = match &args.config {
        Some(path) => Config::load(path)?.guests,
        None => Vec::new(),
    };
    for path in &args.guests {
        let name = path
            .file_stem()
            .map_or("guest".into(), |s| s.to_string_lossy().replace('_', "-"));
        let s = Settings::new(&name);
        guests.push(GuestConfig {
            name,
            module: path.clone(),
            workers: s.workers,
            read_your_writes: None,
            grant: s.grant,
            limits: s.limits,
        });
    }
    if guests.is_empty() {
        anyhow::bail!("no guests: pass --guest <file.wasm> or --config <host.toml>");
    }
    let (client, _embedded) = client(&args).await?;
    let runtime = Runtime::new()?;
    let factory = InformerFactory::new(client.clone(), Options::default());
    let mut running: Vec<Arc<Controller>> = Vec::new();
    for g in &guests {
        // A guest that cannot load is reported and skipped: the others still run.
        let bytes = match std::fs::read(&g.module) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(guest = %g.name, module = %g.module.display(), "cannot read the module: {e}");
                continue;
            }
        };
        let module = match runtime.compile(bytes).await {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(guest = %g.name, "{e}");
                continue;
            }
        };
        tracing::info!(guest = %g.name, digest = module.digest(), size = module.size(), compile = ?module.compile_time(), "module compiled");
        match Controller::start(&factory, client.clone(), module, g.settings()).await {
            Ok(c) => running.push(c),
            Err(e) => tracing::error!(guest = %g.name, "not started: {e}"),
        }
    }
    tracing::info!(
        running = running.len(),
        of = guests.len(),
        "guests loaded; Ctrl-C stops"
    );
    tokio::signal::ctrl_c().await?;
    tracing::info!("stopping");
    Ok(())
}
