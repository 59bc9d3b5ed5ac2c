//! The host `run` and `dev` share: where it connects (a kubeconfig, in-cluster, or an embedded
//! loopback control plane), its wiring (identities, runtime, informers, supervisor), its
//! endpoints, and its ordered stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use reconciled::controller::fair_share;
use reconciled::guest::Runtime;
use reconciled::guest::artifact_cache::ArtifactCache;
use reconciled::guest::grant::Grant;
use reconciled::guest::identity::Identities;
use reconciled::guest::tape::RecorderRef;
use reconciled::informer::Options;
use reconciled::informer::factory::InformerFactory;
use reconciled::replicas::{self, Replicas};
use reconciled::supervisor::{self, Supervisor};

/// Where the host connects and where it serves its endpoints.
#[derive(Args)]
pub(crate) struct ClusterArgs {
    /// Kubeconfig to use. Without it (and without $KUBECONFIG) an embedded loopback control
    /// plane is started, for trying things out.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With the embedded control plane: also write its admin kubeconfig here.
    #[arg(long)]
    pub(crate) write_kubeconfig: Option<PathBuf>,
    /// Serve /healthz, /readyz, /metrics and /status here ("off" to disable).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
}

/// `--namespace`, for the guests named on the command line (`run --guest`, `dev`'s folder).
#[derive(Args)]
pub(crate) struct ConfineArgs {
    /// Confines the guests named on the command line to these namespaces (comma separated or
    /// repeated): they watch, read and write there only. Without it they have an operator's
    /// full grant, every namespace the kubeconfig's user may reach, which on a shared cluster
    /// includes other people's objects.
    #[arg(long = "namespace", value_delimiter = ',', value_name = "NAMESPACE")]
    namespaces: Vec<String>,
}

impl ConfineArgs {
    /// The grant of a guest named on the command line: the full grant, or confined to
    /// `--namespace`. A name that is not a namespace's is an error naming it.
    pub(crate) fn grant(&self) -> anyhow::Result<Grant> {
        if self.namespaces.is_empty() {
            return Ok(Grant::default());
        }
        for ns in &self.namespaces {
            reconciled::names::namespace(ns).map_err(|e| anyhow::anyhow!("--namespace: {e}"))?;
        }
        Ok(Grant::namespaces(&self.namespaces))
    }
}

/// The embedded loopback control plane, in builds that have one.
#[cfg(feature = "embedded-control-plane")]
type Embedded = testenv::ControlPlane;
/// This build has no embedded control plane (`--no-default-features`): there is never one.
#[cfg(not(feature = "embedded-control-plane"))]
type Embedded = std::convert::Infallible;

/// A connected host: the supervisor and, once [`Host::serve`] is called, the endpoints.
pub(crate) struct Host {
    pub(crate) supervisor: Arc<Supervisor>,
    endpoints: Option<tokio::task::AbortHandle>,
    // Never `Some` in a build without the embedded control plane.
    #[cfg_attr(not(feature = "embedded-control-plane"), allow(dead_code))]
    embedded: Option<Embedded>,
}

/// What a host runs with besides its connection.
#[derive(Default)]
pub(crate) struct Wiring {
    /// How guests share the CPU.
    pub(crate) fair_share: fair_share::Config,
    /// The replicas it shares its guests with, if any.
    pub(crate) replicas: Option<replicas::Config>,
    /// The guest whose reconciles are recorded, and where.
    pub(crate) record: Option<(String, RecorderRef)>,
    /// Environment variables every guest sees.
    pub(crate) environment: Vec<(String, String)>,
}

impl Host {
    /// Connects (starting the embedded control plane if no cluster is named), then wires the
    /// supervisor. Nothing is served and no guest is loaded yet.
    pub(crate) async fn connect(args: &ClusterArgs, wiring: Wiring) -> anyhow::Result<Self> {
        let (config, embedded) = config(args).await?;
        let identities = Identities::new(config)?;
        let replicas = match wiring.replicas {
            Some(r) => Some(Arc::new(
                Replicas::start(identities.host().clone(), r)
                    .await
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
        let options = supervisor::Options {
            fair_share: wiring.fair_share,
            replicas,
            record: wiring.record,
            environment: wiring.environment,
            ..supervisor::Options::default()
        };
        let supervisor = Arc::new(Supervisor::new(runtime, factory, identities, options));
        supervisor.follow_shards();
        Ok(Self {
            supervisor,
            endpoints: None,
            embedded,
        })
    }

    /// Serves /healthz, /readyz, /metrics and /status on `args.listen`. Call it once every
    /// configured guest is announced ([`Supervisor::expect`]), so that /readyz never answers
    /// before the host has tried them all.
    pub(crate) async fn serve(&mut self, args: &ClusterArgs) -> anyhow::Result<()> {
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
    pub(crate) async fn stop(mut self) {
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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        while !factory.active().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        #[cfg(feature = "embedded-control-plane")]
        if let Some(cp) = self.embedded.take() {
            // Stopping waits for the processes to exit: off the async runtime.
            let _ = tokio::task::spawn_blocking(move || drop(cp)).await;
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends a pod it stops).
pub(crate) async fn stopped() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM ([`stopped`]), or for the replicas to refuse to go on because
/// another process holds this replica's identity, which is then the error.
pub(crate) async fn stopped_or_refused(supervisor: &Supervisor) -> anyhow::Result<()> {
    let refused = async {
        match supervisor.replicas() {
            Some(r) => r.refused().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = stopped() => r,
        why = refused => Err(anyhow::anyhow!("{why}")),
    }
}

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
    // The plane is this host's alone: a Reconciler applies there with nothing installed first.
    let client = kube::Client::try_from(cp.admin_config())?;
    reconciled::sources::reconciler::crds::install(&client, std::time::Duration::from_secs(30))
        .await?;
    if let Some(out) = &args.write_kubeconfig {
        std::fs::copy(cp.kubeconfig_path(), out)?;
    }
    tracing::info!(kubeconfig = %cp.kubeconfig_path().display(), "embedded control plane ready, with the Reconciler CRDs; it stops with this host, and its objects with it (`cargo run -p testenv -- up` starts one that outlives it: pass its kubeconfig with --kubeconfig); try: kubectl --kubeconfig {} get configmaps -A", cp.kubeconfig_path().display());
    Ok((cp.admin_config(), Some(cp)))
}
