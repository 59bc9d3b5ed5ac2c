//! `reconciled run`: the guests of the config file and of `--guest`, tenants' guests from
//! labelled ConfigMaps, and the replicas the host shares them with, until Ctrl-C or SIGTERM.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use reconciled::config::{Config, GuestConfig};
use reconciled::controller::Settings;
use reconciled::sources::configmap::{self, ConfigMapSource, TenantPolicy};
use reconciled::sources::oci::watch::{LoginSource, Target, Watch};
use reconciled::sources::oci::{ModuleRef, Registry};
use reconciled::sources::offer::offer_of;
use reconciled::sources::reconciler::{self, ReconcilerSource};
use reconciled::supervisor::{Source, Supervisor};

use crate::cli::host::{ClusterArgs, ConfineArgs, Host, Wiring, stopped_or_refused};
use crate::cli::record::RecordArgs;

/// `reconciled run`.
#[derive(Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Host config file: guests, grants, limits, tenants (see `reconciled::config`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A guest module to run with a full grant, a file or `oci://registry/repo:tag[@sha256:…]`;
    /// repeatable. Named after its file or repository.
    #[arg(long = "guest")]
    guests: Vec<PathBuf>,
    #[command(flatten)]
    confine: ConfineArgs,
    /// Load tenants' guests from ConfigMaps labelled reconciled.dev/reconciler=true, each
    /// confined to its namespace (the config file's [tenants] section tunes this).
    #[arg(long)]
    configmaps: bool,
    /// Load tenants' guests from `Reconciler` objects (reconciled.dev/v1alpha1) too, under the
    /// same tenant policy as --configmaps (which it implies): `reconcilers = true` under
    /// [tenants]. Needs the CRDs of deploy/reconcilers.yaml, which the embedded control plane
    /// installs itself.
    #[arg(long)]
    reconcilers: bool,
    /// Kinds tenants' guests may declare and write (`v1/ConfigMap`, `apps/v1/*`, `*`), comma
    /// separated or repeated; with --configmaps (or --reconcilers) and no [tenants] in --config. None by default:
    /// tenants' guests are then rejected, naming the kind to allow. A wildcard never allows
    /// RBAC kinds, Secrets or Pods; name them.
    #[arg(long = "tenant-kinds", value_delimiter = ',')]
    tenant_kinds: Vec<String>,
    /// Registries (host or host:port) tenants' `.wasm.ref` keys and Reconcilers may pull from,
    /// comma separated or repeated; with --configmaps (or --reconcilers) and no [tenants] in
    /// --config. None by default.
    #[arg(long = "tenant-registries", value_delimiter = ',')]
    tenant_registries: Vec<String>,
    /// This replica's name among the replicas sharing the guests (with [replicas] in --config):
    /// unique, a DNS label. Defaults to $POD_NAME, else <hostname>-<pid>.
    #[arg(long = "replica-id")]
    replica_id: Option<String>,
    #[command(flatten)]
    record: RecordArgs,
}

impl RunArgs {
    /// The config file as messages name it.
    fn config_path(&self) -> &Path {
        self.config.as_deref().unwrap_or(Path::new("the config"))
    }
}

/// Runs the host until Ctrl-C or SIGTERM, then stops it in order.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let guests = guests(&config, &args)?;
    let tenants = tenant_policy(&config, &args)?;
    if guests.is_empty() && tenants.is_none() {
        anyhow::bail!(
            "no guests: pass --guest <file.wasm>, --config <host.toml>, --configmaps to load tenants' ConfigMaps, or --reconcilers to load their Reconcilers too"
        );
    }
    let replicas = replicas(&config, &args)?;
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
    // A guest may record where it ran (the replica tests' marker guest does).
    let environment = (replicas.iter())
        .map(|r| ("RECONCILED_REPLICA".to_string(), r.identity.clone()))
        .collect();
    let wiring = Wiring {
        fair_share: config.fair_share(),
        replicas,
        record: args.record.recorder()?,
        environment,
    };
    let mut host = Host::connect(&args.cluster, wiring).await?;
    for g in &guests {
        host.supervisor.expect(&g.name, source_of(g), g.settings());
    }
    host.serve(&args.cluster).await?;
    let sup = &host.supervisor;
    let pulls = load(sup, &registry, &guests).await?;
    let (configmaps, reconcilers) = match tenants {
        Some(policy) => {
            tracing::info!(label = %format!("{}=true", configmap::LABEL), "loading tenants' guests from labelled ConfigMaps");
            let reconcilers = match policy.reconcilers {
                true => {
                    tracing::info!(
                        "loading tenants' guests from Reconcilers (reconciled.dev/v1alpha1)"
                    );
                    Some(ReconcilerSource::start(
                        sup.factory(),
                        sup.clone(),
                        policy.clone(),
                        registry.clone(),
                        reconciler::Options::default(),
                    )?)
                }
                false => None,
            };
            let source = ConfigMapSource::start_with(sup.factory(), sup.clone(), policy, registry);
            (Some(source?), reconcilers)
        }
        None => (None, None),
    };
    tracing::info!(guests = ?sup.names(), "host running; Ctrl-C or SIGTERM stops");
    let outcome = stopped_or_refused(sup).await;
    tracing::info!("stopping");
    drop((configmaps, reconcilers, pulls));
    host.stop().await;
    outcome
}

/// The config file's guests and those of `--guest`, each with a name of its own.
fn guests(config: &Config, args: &RunArgs) -> anyhow::Result<Vec<GuestConfig>> {
    let mut guests = config.guests.clone();
    let grant = args.confine.grant()?;
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
            shard_keys: false,
            grant: grant.clone(),
            limits: s.limits,
            service_account: None,
            shadow: None,
            settings: s.guest_settings,
            rollout: s.rollout,
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(g) = guests.iter().find(|g| !seen.insert(g.name.as_str())) {
        anyhow::bail!(
            "two guests are named {:?} (--guest names a guest after its file or repository); give one of them another name in a [[guest]] of --config",
            g.name
        );
    }
    Ok(guests)
}

/// What tenants' guests may do: the config's `[tenants]`, or the command line's, never both;
/// `None` without tenants.
fn tenant_policy(config: &Config, args: &RunArgs) -> anyhow::Result<Option<TenantPolicy>> {
    let flags = !args.tenant_kinds.is_empty() || !args.tenant_registries.is_empty();
    let tenants = args.configmaps || args.reconcilers;
    let policy = match (&config.tenants, tenants) {
        (Some(_), _) if flags => anyhow::bail!(
            "--tenant-kinds or --tenant-registries, and a [tenants] section in {}, both say what tenants may do: use `kinds` and `registries` under [tenants] only",
            args.config_path().display()
        ),
        (Some(p), _) => TenantPolicy {
            reconcilers: p.reconcilers || args.reconcilers,
            ..p.clone()
        },
        (None, true) => TenantPolicy {
            kinds: args.tenant_kinds.iter().cloned().collect(),
            registries: args.tenant_registries.iter().cloned().collect(),
            reconcilers: args.reconcilers,
            ..TenantPolicy::default()
        },
        (None, false) if flags => anyhow::bail!(
            "--tenant-kinds and --tenant-registries apply to tenants' guests: add --configmaps or --reconcilers"
        ),
        (None, false) => return Ok(None),
    };
    let no_kinds = policy.kinds.is_empty()
        && (policy.grants.values()).all(|g| g.kinds.as_ref().is_none_or(|k| k.is_empty()));
    if no_kinds {
        tracing::warn!(
            "tenants may declare no kind, so every tenant guest will be rejected; allow kinds with `kinds` under [tenants] in the config, or --tenant-kinds v1/ConfigMap"
        );
    }
    Ok(Some(policy))
}

/// The replicas this host shares its guests with, from the config's `[replicas]`, named by
/// `--replica-id` or the pod; `None` without the section.
fn replicas(
    config: &Config,
    args: &RunArgs,
) -> anyhow::Result<Option<reconciled::replicas::Config>> {
    let Some(r) = &config.replicas else {
        if args.replica_id.is_some() {
            anyhow::bail!(
                "--replica-id names this host among replicas: add a [replicas] section to --config"
            );
        }
        return Ok(None);
    };
    let identity = match &args.replica_id {
        Some(id) => id.clone(),
        None => reconciled::replicas::identity::default_identity(),
    };
    let replicas = r.resolve(&identity, &reconciled::replicas::identity::own_namespace());
    (replicas.validate()).map_err(|e| anyhow::anyhow!("{}: {e}", args.config_path().display()))?;
    Ok(Some(replicas))
}

/// Loads the configured guests: files now, registry references pulled (and followed, for a
/// tag) by the returned watches. A guest that cannot load is reported and skipped: the others
/// still run.
async fn load(
    sup: &Arc<Supervisor>,
    registry: &Arc<Registry>,
    guests: &[GuestConfig],
) -> anyhow::Result<Vec<Watch>> {
    let mut pulls = Vec::new();
    for g in guests {
        if let Some(reference) = g.reference() {
            if g.shadow.is_some() {
                tracing::warn!(guest = %g.name, "a shadow runs only beside a module given as a file; this one comes from a registry and runs without its shadow");
            }
            pulls.push(pull(sup, registry, g, reference?)?);
            continue;
        }
        let source = Source::File(g.module.clone());
        let bytes = match std::fs::read(&g.module) {
            Ok(b) => b,
            Err(e) => {
                let message = format!("cannot read the module {}: {e}", g.module.display());
                tracing::error!(guest = %g.name, "{message}");
                (sup.reject_unreadable(&g.name, source, g.settings(), "", message)).await;
                continue;
            }
        };
        let settings = sup.with_shadow(g.settings(), g.shadow.as_deref()).await;
        sup.apply(&g.name, source, settings, bytes).await;
    }
    Ok(pulls)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use reconciled::guest::grant::Grant;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(line: &[&str]) -> RunArgs {
        let mut all = vec!["run"];
        all.extend_from_slice(line);
        Line::try_parse_from(all).unwrap().run
    }

    #[test]
    fn reconcilers_with_tenant_kinds_make_one_policy_with_reconcilers_on() {
        let a = args(&["--reconcilers", "--tenant-kinds", "v1/ConfigMap"]);
        let policy = tenant_policy(&Config::default(), &a).unwrap().unwrap();
        assert!(policy.reconcilers);
        assert!(policy.kinds.contains("v1/ConfigMap"));
        // --configmaps alone keeps them off, as before.
        let a = args(&["--configmaps", "--tenant-kinds", "v1/ConfigMap"]);
        let policy = tenant_policy(&Config::default(), &a).unwrap().unwrap();
        assert!(!policy.reconcilers);
        // Kinds with neither is a mistake that says what to add.
        let e = tenant_policy(
            &Config::default(),
            &args(&["--tenant-kinds", "v1/ConfigMap"]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("add --configmaps or --reconcilers"), "{e}");
    }

    #[test]
    fn namespace_confines_the_command_lines_guests_and_refuses_a_bad_name() {
        let config = Config::default();
        let full = guests(&config, &args(&["--guest", "a.wasm"])).unwrap();
        assert_eq!(full[0].grant, Grant::default(), "an operator's full grant");
        let confined = guests(
            &config,
            &args(&["--guest", "a.wasm", "--namespace", "team-a,team-b"]),
        )
        .unwrap();
        assert_eq!(confined[0].grant, Grant::namespaces(["team-a", "team-b"]));
        let e = guests(
            &config,
            &args(&["--guest", "a.wasm", "--namespace", "Team_A"]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--namespace: ") && e.contains("Team_A"),
            "{e}"
        );
    }

    #[test]
    fn reconcilers_with_a_tenants_section_turn_them_on_there() {
        let config = Config {
            tenants: Some(TenantPolicy::default()),
            ..Config::default()
        };
        let policy = tenant_policy(&config, &args(&["--reconcilers"]))
            .unwrap()
            .unwrap();
        assert!(policy.reconcilers);
        let policy = tenant_policy(&config, &args(&[])).unwrap().unwrap();
        assert!(!policy.reconcilers, "as the section says");
    }
}
