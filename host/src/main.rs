//! `reconciled`: run wasm reconcilers against a Kubernetes cluster.

mod cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use reconciled::config::{Config, GuestConfig};
use reconciled::controller::Settings;
use reconciled::guest::Runtime;
use reconciled::guest::artifact_cache::ArtifactCache;
use reconciled::guest::identity::Identities;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;
use reconciled::sources::configmap::{self, ConfigMapSource, TenantPolicy};
use reconciled::sources::dir::{Change, DirSource, Settle};
use reconciled::sources::offer::offer_of;
use reconciled::sources::oci::watch::{LoginSource, Target, Watch};
use reconciled::sources::oci::{ModuleRef, Registry};
use reconciled::supervisor::{self, Offer, Source, Supervisor};

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
    /// Run every .wasm in a folder and reload each when it changes (the development loop).
    Dev(DevArgs),
    /// Show the guests of a running host: version, source, load time, errors, reconciles.
    Status(StatusArgs),
    /// Print a ConfigMap manifest that delivers a module to a namespace (gzipped if needed).
    Pack(PackArgs),
    /// Publish a module to an OCI registry as a Wasm artifact; prints the reference pinned by
    /// digest.
    Push(cli::push::PushArgs),
    /// Write a new reconciler project (Rust, TypeScript or Python): a CRD, the reconciler, a
    /// test and a README; it builds with ./build.sh and runs with `reconciled dev`.
    New(cli::new::NewArgs),
    /// Run a guest against fixtures (objects, request, expected writes and Events) with no
    /// cluster; exits non-zero when an outcome differs from its expected.yaml.
    Test(cli::test::TestArgs),
    /// Replay reconciles recorded with `run --record` against another version of the guest,
    /// offline; report per request the writes, Events and reads that differ.
    Replay(cli::replay::ReplayArgs),
}

#[derive(Args)]
struct ClusterArgs {
    /// Kubeconfig to use. Without it (and without $KUBECONFIG) an embedded loopback control
    /// plane is started, for trying things out.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With the embedded control plane: also write its admin kubeconfig here.
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    /// Serve /healthz, /readyz, /metrics and /status here ("off" to disable).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Host config file: guests, grants, limits, tenants (see `reconciled::config`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A guest module to run with a full grant, a file or `oci://registry/repo:tag[@sha256:…]`;
    /// repeatable. Named after its file or repository.
    #[arg(long = "guest")]
    guests: Vec<PathBuf>,
    /// Load tenants' guests from ConfigMaps labelled reconciled.dev/reconciler=true, each
    /// confined to its namespace (the config file's [tenants] section tunes this).
    #[arg(long)]
    configmaps: bool,
    /// Kinds tenants' guests may declare and write (`v1/ConfigMap`, `apps/v1/*`, `*`), comma
    /// separated or repeated; with --configmaps and no [tenants] in --config. None by default:
    /// tenants' guests are then rejected, naming the kind to allow. A wildcard never allows
    /// RBAC kinds, Secrets or Pods; name them.
    #[arg(long = "tenant-kinds", value_delimiter = ',')]
    tenant_kinds: Vec<String>,
    /// Registries (host or host:port) tenants' `.wasm.ref` keys may pull from, comma separated
    /// or repeated; with --configmaps and no [tenants] in --config. None by default.
    #[arg(long = "tenant-registries", value_delimiter = ',')]
    tenant_registries: Vec<String>,
    /// This replica's name among the replicas sharing the guests (with [replicas] in --config):
    /// unique, a DNS label. Defaults to $POD_NAME, else <hostname>-<pid>.
    #[arg(long = "replica-id")]
    replica_id: Option<String>,
    #[command(flatten)]
    record: cli::record::RecordArgs,
}

#[derive(Args)]
struct DevArgs {
    /// The folder of .wasm files to run and watch.
    dir: PathBuf,
    /// A guest crate to rebuild (cargo build --release --target wasm32-wasip2) when its
    /// sources change; the built module is installed into the folder.
    #[arg(long)]
    build: Option<PathBuf>,
    #[command(flatten)]
    cluster: ClusterArgs,
}

#[derive(Args)]
struct StatusArgs {
    /// Where the host listens (its --listen).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Print the raw JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PackArgs {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `reconciled test` and `replay` print their report on stdout: logs (the guests' own included, with
    // RUST_LOG=info) go to stderr, and only warnings by default.
    let testing = matches!(cli.command, Command::Test(_) | Command::Replay(_));
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // kube's request builder logs every failed request at ERROR, including the
                // embedded control plane's readiness polls; our own modules log failures with
                // their context, so its lines are only noise.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(if testing {
                        "warn"
                    } else {
                        "info,kube_client::client::builder=off"
                    })
                }),
        )
        .with_writer(move || -> Box<dyn std::io::Write> {
            if testing {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::stdout())
            }
        })
        .init();
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
        Command::Dev(args) => rt.block_on(dev(args)),
        Command::Status(args) => rt.block_on(status(args)),
        Command::Pack(args) => pack(args),
        Command::Push(args) => rt.block_on(cli::push::push(args)),
        Command::New(args) => cli::new::new(args),
        Command::Test(args) => rt.block_on(cli::test::test(args)),
        Command::Replay(args) => rt.block_on(cli::replay::replay(args)),
    };
    // Everything was stopped in order already; a blocking task still running (storing a
    // compiled artifact) must not hold the exit up.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reconciled: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The embedded loopback control plane, in builds that have one.
#[cfg(feature = "embedded-control-plane")]
type Embedded = testenv::ControlPlane;
/// This build has no embedded control plane (`--no-default-features`): there is never one.
#[cfg(not(feature = "embedded-control-plane"))]
type Embedded = std::convert::Infallible;

/// The host's connection settings: guests acting as a ServiceAccount get clients built from
/// them, impersonating it.
async fn config(args: &ClusterArgs) -> anyhow::Result<(kube::Config, Option<Embedded>)> {
    if let Some(path) = &args.kubeconfig {
        let kc = kube::config::Kubeconfig::read_from(path)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        return Ok((cfg, None));
    }
    if std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
    {
        return Ok((kube::Config::infer().await?, None));
    }
    #[cfg(not(feature = "embedded-control-plane"))]
    anyhow::bail!(
        "no kubeconfig: pass --kubeconfig <file> or set KUBECONFIG (this build has no embedded control plane; build with the embedded-control-plane feature to try things out without a cluster)"
    );
    #[cfg(feature = "embedded-control-plane")]
    embedded(args).await
}

#[cfg(feature = "embedded-control-plane")]
async fn embedded(args: &ClusterArgs) -> anyhow::Result<(kube::Config, Option<Embedded>)> {
    tracing::info!("no kubeconfig given: starting an embedded control plane on loopback");
    let cp = tokio::task::spawn_blocking(testenv::ControlPlane::start).await??;
    if let Some(out) = &args.write_kubeconfig {
        std::fs::copy(cp.kubeconfig_path(), out)?;
    }
    tracing::info!(kubeconfig = %cp.kubeconfig_path().display(), "embedded control plane ready; try: kubectl --kubeconfig {} get configmaps -A", cp.kubeconfig_path().display());
    Ok((cp.admin_config(), Some(cp)))
}

/// A connected host: the supervisor and, once [`Host::serve`] is called, the endpoints.
struct Host {
    supervisor: Arc<Supervisor>,
    endpoints: Option<tokio::task::AbortHandle>,
    // Never `Some` in a build without the embedded control plane.
    #[cfg_attr(not(feature = "embedded-control-plane"), allow(dead_code))]
    embedded: Option<Embedded>,
}

async fn host(
    args: &ClusterArgs,
    fair_share: reconciled::controller::fair_share::Config,
    replicas: Option<reconciled::replicas::Config>,
    record: Option<(String, reconciled::guest::tape::RecorderRef)>,
) -> anyhow::Result<Host> {
    let (config, embedded) = config(args).await?;
    let identities = Identities::new(config)?;
    let replicas = match replicas {
        Some(r) => Some(Arc::new(
            reconciled::replicas::Replicas::start(identities.host().clone(), r)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
        None => None,
    };
    let mut runtime = Runtime::new()?;
    if let Err(e) = runtime.use_artifact_cache(&ArtifactCache::default_dir()) {
        tracing::warn!("{e}");
    }
    let factory = Arc::new(InformerFactory::new(
        identities.host().clone(),
        Options::default(),
    ));
    let supervisor = Arc::new(Supervisor::new(
        runtime,
        factory,
        identities,
        supervisor::Options {
            fair_share,
            replicas,
            record,
            ..supervisor::Options::default()
        },
    ));
    Ok(Host {
        supervisor,
        endpoints: None,
        embedded,
    })
}

impl Host {
    /// Serves /healthz, /readyz, /metrics and /status on `args.listen`. Call it once every
    /// configured guest is announced ([`Supervisor::expect`]), so that /readyz never answers
    /// before the host has tried them all.
    async fn serve(&mut self, args: &ClusterArgs) -> anyhow::Result<()> {
        if args.listen == "off" {
            return Ok(());
        }
        let addr: SocketAddr = args.listen.parse().map_err(|e| {
            anyhow::anyhow!("--listen {:?} is not an address like 127.0.0.1:8080 ({e}); use \"off\" to disable the endpoints", args.listen)
        })?;
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            anyhow::anyhow!("cannot listen on {addr} for /healthz, /readyz, /metrics and /status: {e}; pick another with --listen, or --listen off")
        })?;
        tracing::info!(%addr, "serving /healthz /readyz /metrics /status");
        let endpoints: Arc<dyn reconciled::ops::http::Endpoints> = self.supervisor.clone();
        let task = tokio::spawn(reconciled::ops::http::serve(listener, endpoints));
        self.endpoints = Some(task.abort_handle());
        Ok(())
    }

    /// Stops in the order that keeps shutdown quiet and quick: (the caller has stopped the
    /// sources,) then every guest's workers, then the endpoints, then the informers, and only
    /// then the embedded control plane, so that no watch sees its server vanish.
    async fn stop(mut self) {
        // Shards first, so that the other replicas take over while this one winds down.
        if let Some(r) = self.supervisor.replicas() {
            r.shutdown().await;
        }
        self.supervisor.shutdown().await;
        if let Some(endpoints) = self.endpoints.take() {
            endpoints.abort();
        }
        let factory = self.supervisor.factory().clone();
        drop(self.supervisor);
        // Informers stop when their last subscriber goes, which an aborted task does at its
        // next turn on the runtime: give that a moment, bounded.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        while !factory.active().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        #[cfg(feature = "embedded-control-plane")]
        if let Some(cp) = self.embedded.take() {
            // Stopping waits for the processes to exit: off the async runtime.
            let _ = tokio::task::spawn_blocking(move || drop(cp)).await;
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let mut guests = config.guests.clone();
    for path in &args.guests {
        let name = match path.to_str().filter(|p| p.starts_with("oci://")) {
            Some(text) => {
                let r: ModuleRef = text.parse().map_err(|e| anyhow::anyhow!("--guest: {e}"))?;
                let last = r.repository().rsplit('/').next().unwrap_or("guest");
                reconciled::sources::dir::guest_name(Path::new(last))
            }
            None => reconciled::sources::dir::guest_name(path),
        };
        let s = Settings::new(&name);
        guests.push(GuestConfig {
            name,
            module: path.clone(),
            workers: s.workers,
            read_your_writes: None,
            grant: s.grant,
            limits: s.limits,
            service_account: None,
            shadow: None,
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(g) = guests.iter().find(|g| !seen.insert(g.name.as_str())) {
        anyhow::bail!(
            "two guests are named {:?} (--guest names a guest after its file or repository); give one of them another name in a [[guest]] of --config",
            g.name
        );
    }
    let tenants = match (&config.tenants, args.configmaps) {
        (Some(_), _) if !args.tenant_kinds.is_empty() || !args.tenant_registries.is_empty() => {
            anyhow::bail!(
                "--tenant-kinds or --tenant-registries, and a [tenants] section in {}, both say what tenants may do: use `kinds` and `registries` under [tenants] only",
                args.config
                    .as_deref()
                    .unwrap_or(Path::new("the config"))
                    .display()
            )
        }
        (Some(p), _) => Some(p.clone()),
        (None, true) => Some(TenantPolicy {
            kinds: args.tenant_kinds.iter().cloned().collect(),
            registries: args.tenant_registries.iter().cloned().collect(),
            ..TenantPolicy::default()
        }),
        (None, false) if !args.tenant_kinds.is_empty() || !args.tenant_registries.is_empty() => {
            anyhow::bail!(
                "--tenant-kinds and --tenant-registries apply to tenants' guests: add --configmaps"
            )
        }
        (None, false) => None,
    };
    if let Some(policy) = &tenants
        && policy.kinds.is_empty()
        && policy
            .grants
            .values()
            .all(|g| g.kinds.as_ref().is_none_or(|k| k.is_empty()))
    {
        tracing::warn!(
            "tenants may declare no kind, so every tenant guest will be rejected; allow kinds with `kinds` under [tenants] in the config, or --tenant-kinds v1/ConfigMap"
        );
    }
    if guests.is_empty() && tenants.is_none() {
        anyhow::bail!(
            "no guests: pass --guest <file.wasm>, --config <host.toml>, or --configmaps to load tenants' ConfigMaps"
        );
    }
    let replicas = match &config.replicas {
        Some(r) => {
            let identity = match &args.replica_id {
                Some(id) => id.clone(),
                None => default_replica_id(),
            };
            let replicas = r.resolve(&identity, &default_namespace());
            replicas.validate().map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e}",
                    args.config
                        .as_deref()
                        .unwrap_or(Path::new("config"))
                        .display()
                )
            })?;
            // A guest may record where it ran (the replica tests' marker guest does).
            reconciled::guest::imports::set_environment(vec![(
                "RECONCILED_REPLICA".into(),
                replicas.identity.clone(),
            )]);
            Some(replicas)
        }
        None if args.replica_id.is_some() => anyhow::bail!(
            "--replica-id names this host among replicas: add a [replicas] section to --config"
        ),
        None => None,
    };
    let registry = Arc::new(Registry::new(config.registry.clone())?);
    if let Some(name) = &args.record.record_guest
        && !guests.iter().any(|g| &g.name == name)
    {
        let names: Vec<&str> = guests.iter().map(|g| g.name.as_str()).collect();
        if tenants.is_none() {
            anyhow::bail!(
                "--record-guest {name:?} names no guest of this host (its guests: {names:?}); name one of them"
            );
        }
        tracing::warn!(guest = %name, "--record-guest names none of the configured guests ({names:?}): only a tenant's guest of that name will be recorded");
    }
    let record = args.record.recorder()?;
    let mut host = host(&args.cluster, config.fair_share(), replicas, record).await?;
    for g in &guests {
        host.supervisor.expect(&g.name, source_of(g), g.settings());
    }
    host.serve(&args.cluster).await?;
    let sup = &host.supervisor;
    let mut pulls = Vec::new();
    for g in &guests {
        if let Some(reference) = g.reference() {
            if g.shadow.is_some() {
                tracing::warn!(guest = %g.name, "a shadow runs only beside a module given as a file; this one comes from a registry and runs without its shadow");
            }
            pulls.push(pull(sup, &registry, g, reference?)?);
            continue;
        }
        // A guest that cannot load is reported and skipped: the others still run.
        let bytes = match std::fs::read(&g.module) {
            Ok(b) => b,
            Err(e) => {
                let message = format!("cannot read the module {}: {e}", g.module.display());
                tracing::error!(guest = %g.name, "{message}");
                sup.reject_unreadable(
                    &g.name,
                    Source::File(g.module.clone()),
                    g.settings(),
                    "",
                    message,
                )
                .await;
                continue;
            }
        };
        let settings = sup.with_shadow(g.settings(), g.shadow.as_deref()).await;
        sup.apply(&g.name, Source::File(g.module.clone()), settings, bytes)
            .await;
    }
    let configmaps = match tenants {
        Some(policy) => {
            tracing::info!(label = %format!("{}=true", configmap::LABEL), "loading tenants' guests from labelled ConfigMaps");
            Some(ConfigMapSource::start_with(
                sup.factory(),
                sup.clone(),
                policy,
                registry.clone(),
            )?)
        }
        None => None,
    };
    tracing::info!(guests = ?sup.names(), "host running; Ctrl-C or SIGTERM stops");
    stopped().await?;
    tracing::info!("stopping");
    drop((configmaps, pulls));
    host.stop().await;
    Ok(())
}

fn source_of(g: &GuestConfig) -> Source {
    match g.reference() {
        Some(Ok(r)) => Source::Registry(r.to_string()),
        _ => Source::File(g.module.clone()),
    }
}

/// Keeps guest `g` at what `reference` names: pulled now, and followed if it is a tag.
fn pull(
    sup: &Arc<Supervisor>,
    registry: &Arc<Registry>,
    g: &GuestConfig,
    reference: ModuleRef,
) -> anyhow::Result<Watch> {
    let login = match &registry.settings().pull_secret {
        None => LoginSource::Anonymous,
        Some(text) => {
            let (namespace, name) = text.split_once('/').ok_or_else(|| {
                anyhow::anyhow!("[registry] pull_secret {text:?} is not namespace/name")
            })?;
            LoginSource::Secret {
                client: sup.identities().host().clone(),
                namespace: namespace.into(),
                name: name.into(),
            }
        }
    };
    let target = Target {
        registry: registry.clone(),
        reference,
        login,
        // The operator's own guests: as large as anything the runtime accepts.
        max_bytes: 256 << 20,
    };
    let (sup, name, settings, source) = (
        Arc::downgrade(sup),
        g.name.clone(),
        g.settings(),
        source_of(g),
    );
    Ok(Watch::start(target, move |outcome| {
        if let Some(sup) = sup.upgrade() {
            let offer = offer_of(
                outcome,
                source.clone(),
                settings.clone(),
                std::time::Duration::ZERO,
            );
            sup.offer(&name, offer);
        }
    }))
}

async fn dev(args: DevArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| anyhow::anyhow!("cannot create the dev folder {}: {e}", args.dir.display()))?;
    let build = match &args.build {
        Some(krate) => Some(reconciled::sources::cargo_build::CargoBuild::start(
            krate, &args.dir,
        )?),
        None => None,
    };
    let mut host = host(&args.cluster, Default::default(), None, None).await?;
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
                    ..
                } => {
                    let offer = Offer::Load {
                        source: Source::DevFolder(path),
                        settings: Settings::new(&name),
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

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends a pod it stops).
async fn stopped() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// `$POD_NAME`, else `<hostname>-<pid>`, made a DNS label: unique per process, as a replica's
/// identity must be.
fn default_replica_id() -> String {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.is_empty()
    {
        return name;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let label: String = host
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let label = label.trim_matches('-');
    let label = if label.is_empty() {
        "reconciled"
    } else {
        label
    };
    let pid = std::process::id().to_string();
    let keep = 62 - pid.len();
    format!("{}-{pid}", &label[..label.len().min(keep)]).replace("--", "-")
}

/// The namespace this host runs in: `$POD_NAMESPACE`, the pod's service account namespace, or
/// `default`.
fn default_namespace() -> String {
    if let Ok(ns) = std::env::var("POD_NAMESPACE")
        && !ns.is_empty()
    {
        return ns;
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    if args.json {
        // As served, unparsed: it also works against a host whose document this version
        // cannot read.
        let (code, body) = reconciled::ops::http::get(args.addr, "/status").await?;
        if code != 200 {
            anyhow::bail!("{} answered /status with {code}: {body}", args.addr);
        }
        print!("{body}");
        return Ok(());
    }
    print!(
        "{}",
        reconciled::ops::http::get_status(args.addr).await?.table()
    );
    Ok(())
}

fn pack(args: PackArgs) -> anyhow::Result<()> {
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
