//! The host config file (TOML): which guests to run, what each is granted, its limits.
//!
//! ```toml
//! [[guest]]
//! name = "cmgen"
//! module = "target/wasm-guests/wasm32-wasip2/release/configmap_generator.wasm"
//! workers = 2
//! read_your_writes = true      # false turns it off whatever the guest declares
//! shard_keys = false           # true: among [replicas], split its keys over every replica
//!
//! [guest.grant]
//! namespaces = ["team-a"]      # omitted: all namespaces
//! kinds = ["v1/ConfigMap", "example.reconciled.dev/v1alpha1/ConfigMapGenerator"]
//! uncached_reads = false
//!
//! [guest.limits]
//! deadline_ms = 10000
//! memory_bytes = 67108864
//!
//! [[guest]]
//! name = "ops"
//! module = "ops.wasm"
//! service_account = "ops/reconciler"  # act as this ServiceAccount, not as the host
//!
//! [[guest]]
//! name = "cmgen-ts"                    # pulled from a registry; a tag is followed as it moves
//! module = "oci://registry.example/platform/cmgen-ts:1.2@sha256:…"
//!
//! # How modules named by OCI reference are pulled (see `sources::oci`).
//! [registry]
//! pull_secret = "reconciled-system/registry-login"  # dockerconfigjson, for the guests above
//! ca_file = "/etc/reconciled/registry-ca.pem"       # trusted beside the system's roots
//! poll_interval_ms = 60000            # how often a tag is checked for a move
//! pull_timeout_ms = 120000
//! verify_key = "/etc/reconciled/cosign.pub"  # omitted: no signature check
//!
//! # Load guests tenants deliver in ConfigMaps labelled reconciled.dev/reconciler=true; each is
//! # confined to its ConfigMap's namespace.
//! [tenants]
//! namespaces = ["team-a", "team-b"]   # omitted: every namespace
//! kinds = ["v1/ConfigMap", "apps/v1/*"]   # omitted or empty: tenants' guests load nothing;
//!                                     # a wildcard never allows RBAC kinds, Secrets or Pods
//! max_module_bytes = 33554432
//! max_guests_per_namespace = 20                # serving or loading; a refused one waits for room
//! max_cached_bytes_per_namespace = 268435456   # omitted: no cap; shared informers split evenly
//! min_reload_interval_ms = 1000
//! service_account = "reconciled-guest"  # each tenant's guests act as this SA of their namespace
//! cpu_budget_ms_per_minute = 6000     # per tenant namespace, compile time included; omitted:
//!                                     # unlimited. Over it, reconciles wait, never fail.
//! registries = ["registry.example"]   # where tenants' .wasm.ref keys may pull from [none]
//! [tenants.limits]
//! deadline_ms = 2000
//! [tenants.weights]                   # CPU shares when tenants compete [1 each]
//! team-a = 2
//! [tenants.grants.team-a]              # team-a's guests may also use namespace "shared"
//! namespaces = ["shared"]
//!
//! # How guests share the host: every reconcile takes one of `slots`, handed out by weighted
//! # fair queuing across tenants (the operator's own guests are one more tenant), then guests.
//! [scheduler]
//! slots = 4                           # guest calls at once, host-wide [number of cores, at least 2]
//! low_priority_max_wait_ms = 30000    # longest an initial-list or resync key waits [30 s]
//! operator_weight = 1                 # the weight of the guests above [1]
//!
//! # Share the guests with other replicas of this host through Leases (see `replicas`): each
//! # guest reconciles on the one replica holding its shard; the others keep it warm. A guest
//! # with `shard_keys = true` has its keys split over all of them instead, by shard.
//! [replicas]
//! namespace = "reconciled-system"     # where the Leases live [POD_NAMESPACE, else "default"]
//! group = "reconciled"                # Lease name prefix; hosts of one group share guests
//! shards = 16                         # 1 is plain leader election; a multiple of the
//!                                     # replicas splits shard_keys guests evenly (12, 24)
//! lease_duration_ms = 15000
//! renew_deadline_ms = 10000           # shorter than lease_duration_ms: stop before others start
//! retry_period_ms = 2000
//! rebalance_after_ms = 15000          # how long a shard is wanted elsewhere before it moves
//! lease_owner = "reconciled-config"   # a ConfigMap of that namespace owning every Lease: deleting
//!                                     # it (an uninstall) deletes them [none]
//! standby = "warm"                    # "cold": load a guest only where its shard is held, so a
//!                                     # replica caches nothing for the others' guests, and a
//!                                     # takeover loads and syncs first [warm]
//! ```
//!
//! The replica's identity is `--replica-id`, else `POD_NAME`, else `<hostname>-<pid>`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::controller::Settings;
use crate::controller::fair_share;
use crate::guest::grant::Grant;
use crate::guest::identity::ServiceAccount;
use crate::guest::imports::Limits;
use crate::guest::settings::GuestSettings;
use crate::rollout::spec::{Invalid, Rollout};
use crate::sources::oci::ModuleRef;

/// Errors reading the config file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A guest's `rollout` block cannot be followed.
    #[error("config {path}: guest {name:?}: {source}")]
    Rollout {
        /// The file.
        path: PathBuf,
        /// The guest.
        name: String,
        /// What is wrong, naming the step.
        #[source]
        source: Invalid,
    },
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid config.
    #[error("config {path} is invalid: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with line and column.
        #[source]
        source: toml::de::Error,
    },
    /// `[tenants] service_account` is not a ServiceAccount name.
    #[error("config {path}: tenants.service_account: {source}")]
    ServiceAccount {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: crate::guest::identity::Error,
    },
    /// A guest's `module = "oci://…"` is no usable reference.
    #[error("config {path}: guest {name:?}: {source}")]
    Reference {
        /// The file.
        path: PathBuf,
        /// The guest.
        name: String,
        /// What is wrong.
        #[source]
        source: crate::sources::oci::reference::Error,
    },
    /// `[registry] pull_secret` is not `namespace/name`.
    #[error(
        "config {path}: [registry] pull_secret {value:?} is not namespace/name (the dockerconfigjson Secret the operator's guests log in with)"
    )]
    PullSecret {
        /// The file.
        path: PathBuf,
        /// What it says.
        value: String,
    },
    /// Two guests share a name.
    #[error(
        "config {path}: guest name {name:?} is used twice; names identify guests in logs and metrics"
    )]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
    },
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The guests.
    #[serde(default, rename = "guest")]
    pub guests: Vec<GuestConfig>,
    /// Tenants' guests delivered in ConfigMaps; absent = not loaded.
    #[serde(default)]
    pub tenants: Option<crate::sources::configmap::TenantPolicy>,
    /// How guests share the host's CPU.
    #[serde(default)]
    pub scheduler: Scheduler,
    /// Replicas sharing the guests; absent = this host runs every guest itself.
    #[serde(default)]
    pub replicas: Option<ReplicasConfig>,
    /// How modules named by OCI reference are pulled: CA, credentials, polling, signatures.
    #[serde(default)]
    pub registry: crate::sources::oci::Settings,
}

/// `[replicas]`: how this host shares its guests with its other replicas (see
/// [`crate::replicas`]). Every field has a default, so `[replicas]` alone turns sharing on.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicasConfig {
    /// Where the Leases live [`POD_NAMESPACE`, else `default`].
    pub namespace: Option<String>,
    /// Lease name prefix and group label \[`reconciled`\].
    pub group: Option<String>,
    /// Shards \[16\].
    pub shards: Option<u32>,
    /// Lease duration, in milliseconds [15 000].
    pub lease_duration_ms: Option<u64>,
    /// Renew deadline, in milliseconds [10 000].
    pub renew_deadline_ms: Option<u64>,
    /// Retry period, in milliseconds [2 000].
    pub retry_period_ms: Option<u64>,
    /// How long a held shard must be planned elsewhere before it moves, in milliseconds
    /// [15 000].
    pub rebalance_after_ms: Option<u64>,
    /// A ConfigMap of the Leases' namespace that owns every Lease \[none\].
    pub lease_owner: Option<String>,
    /// `"warm"` or `"cold"`: whether guests of shards held elsewhere stay loaded \[warm\].
    pub standby: Option<crate::replicas::Standby>,
}

impl ReplicasConfig {
    /// The replicas' settings for a replica called `identity`, with `namespace` unless the
    /// file names one.
    pub fn resolve(&self, identity: &str, namespace: &str) -> crate::replicas::Config {
        use std::time::Duration;
        let mut c =
            crate::replicas::Config::new(identity, self.namespace.as_deref().unwrap_or(namespace));
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        if let Some(g) = &self.group {
            c.group = g.clone();
        }
        c.shards = self.shards.unwrap_or(c.shards);
        c.lease_duration = ms(self.lease_duration_ms, c.lease_duration);
        c.renew_deadline = ms(self.renew_deadline_ms, c.renew_deadline);
        c.retry_period = ms(self.retry_period_ms, c.retry_period);
        c.rebalance_after = ms(self.rebalance_after_ms, c.rebalance_after);
        c.lease_owner = self.lease_owner.clone();
        c.standby = self.standby.unwrap_or_default();
        c
    }
}

/// `[scheduler]`: how guests share the host (see [`crate::controller::fair_share`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scheduler {
    /// Guest calls at once, host-wide [the number of cores, at least 2].
    pub slots: Option<usize>,
    /// Longest a low-priority key waits behind high-priority ones, in milliseconds [30 000].
    pub low_priority_max_wait_ms: Option<u64>,
    /// The weight of the operator's own guests against tenants' \[1\].
    pub operator_weight: Option<u32>,
}

/// One `[[guest]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestConfig {
    /// Unique name.
    pub name: String,
    /// Path to the `.wasm` component, relative to the config file, or an OCI reference
    /// `oci://registry/repo:tag[@sha256:…]` (see [`crate::sources::oci`]): a tag is followed as
    /// it moves, polled every `[registry] poll_interval_ms`.
    ///
    /// Read with the host's own authority, wherever it leads (`..` and symlinks included):
    /// like the config file, it is the operator's word. Files named by others (the dev
    /// folder's, the precompile cache's) are opened beneath their directory instead.
    pub module: PathBuf,
    /// Concurrent reconciles \[1\].
    #[serde(default = "one")]
    pub workers: usize,
    /// `false` turns read-your-writes off.
    #[serde(default)]
    pub read_your_writes: Option<bool>,
    /// Among `[replicas]`, splits its keys over every replica by their objects' uid, each
    /// replica watching and reconciling only its share (see [`crate::replicas`]); needs an API
    /// server with the `ShardedListAndWatch` feature gate. Alone, a host has every key \[false\].
    #[serde(default)]
    pub shard_keys: bool,
    /// What it may do.
    #[serde(default)]
    pub grant: Grant,
    /// Per-call limits.
    #[serde(default)]
    pub limits: Limits,
    /// `namespace/name` of a ServiceAccount its writes and uncached reads impersonate; omitted:
    /// the host's own identity. Its cache reads are then reviewed as that ServiceAccount too.
    #[serde(default)]
    pub service_account: Option<ServiceAccount>,
    /// A second version (a `.wasm` path, relative to the config file) to run beside `module` on
    /// the same requests, its writes sent with `dryRun=All` and compared with the live
    /// version's (see [`crate::controller::shadow`]). Promoting it is one edit: make it the
    /// `module` and drop this line.
    #[serde(default)]
    pub shadow: Option<PathBuf>,
    /// What the guest reads through the `settings` import: a table, handed over as a JSON
    /// object \[`{}`\]. A change of these alone reloads the guest without a compile.
    #[serde(default)]
    pub settings: GuestSettings,
    /// How a new version of `module` replaces the serving one (see [`crate::rollout`]): at
    /// once by default, or step by step with `strategy = "Progressive"`. The keys are those of
    /// a Reconciler's `spec.rollout`, camelCase included, so one block reads the same in both:
    /// `steps = [{ shadow = { minReconciles = 50 } }, { canary = { percent = 10 } }]`.
    #[serde(default)]
    pub rollout: Rollout,
}

fn one() -> usize {
    1
}

impl GuestConfig {
    /// The OCI reference `module` holds, if it is one (starts with `oci://`).
    pub fn reference(&self) -> Option<Result<ModuleRef, crate::sources::oci::reference::Error>> {
        let text = self.module.to_str()?;
        text.starts_with("oci://").then(|| text.parse())
    }

    /// The controller settings this guest runs with.
    pub fn settings(&self) -> Settings {
        Settings {
            name: self.name.clone(),
            grant: self.grant.clone(),
            limits: self.limits,
            workers: self.workers,
            read_your_writes: self.read_your_writes,
            shard_keys: self.shard_keys,
            identity: self.service_account.clone(),
            recorder: None,
            shadow: None,
            environment: Vec::new(),
            guest_settings: self.settings.clone(),
            rollout: self.rollout.clone(),
        }
    }
}

impl Config {
    /// The fair share this config asks for: `[scheduler]`, with the weights and CPU budget of
    /// `[tenants]`.
    pub fn fair_share(&self) -> fair_share::Config {
        let defaults = fair_share::Config::default();
        let mut weights = self
            .tenants
            .as_ref()
            .map(|t| t.weights.clone())
            .unwrap_or_default();
        if let Some(w) = self.scheduler.operator_weight {
            weights.insert(fair_share::OPERATOR.to_string(), w);
        }
        fair_share::Config {
            slots: self.scheduler.slots.unwrap_or(defaults.slots),
            weights,
            cpu_budget_ms_per_minute: self
                .tenants
                .as_ref()
                .and_then(|t| t.cpu_budget_ms_per_minute),
            low_priority_max_wait_ms: self
                .scheduler
                .low_priority_max_wait_ms
                .unwrap_or(defaults.low_priority_max_wait_ms),
        }
    }

    /// Reads and validates `path`; module paths become relative to the file's directory.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.into(),
            source,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|source| Error::Parse {
            path: path.into(),
            source,
        })?;
        if let Some(t) = &config.tenants {
            // Checked here, once, with any valid namespace: each tenant's namespace is valid.
            ServiceAccount::new("default", &t.service_account).map_err(|source| {
                Error::ServiceAccount {
                    path: path.into(),
                    source,
                }
            })?;
        }
        if let Some(secret) = &config.registry.pull_secret
            && !secret
                .split_once('/')
                .is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        {
            return Err(Error::PullSecret {
                path: path.into(),
                value: secret.clone(),
            });
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut names = std::collections::HashSet::new();
        for g in &mut config.guests {
            if !names.insert(g.name.clone()) {
                return Err(Error::Duplicate {
                    path: path.into(),
                    name: g.name.clone(),
                });
            }
            match g.reference() {
                Some(Err(source)) => {
                    return Err(Error::Reference {
                        path: path.into(),
                        name: g.name.clone(),
                        source,
                    });
                }
                Some(Ok(_)) => {}
                None if g.module.is_relative() => g.module = base.join(&g.module),
                None => {}
            }
            g.rollout.validate().map_err(|source| Error::Rollout {
                path: path.into(),
                name: g.name.clone(),
                source,
            })?;
            if let Some(shadow) = &mut g.shadow
                && shadow.is_relative()
            {
                *shadow = base.join(&*shadow);
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grants_and_limits_and_rejects_typos() {
        let dir = std::env::temp_dir().join(format!("reconciled-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("host.toml");
        std::fs::write(&path, "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\nread_your_writes = false\n[guest.grant]\nnamespaces = [\"team-a\"]\n[guest.limits]\ndeadline_ms = 250\n").unwrap();
        let c = Config::load(&path).unwrap();
        let g = &c.guests[0];
        assert_eq!(g.module, dir.join("a.wasm"));
        assert!(g.grant.allows_namespace("team-a") && !g.grant.allows_namespace("team-b"));
        assert_eq!(g.limits.deadline, std::time::Duration::from_millis(250));
        assert_eq!(g.limits.memory_bytes, Limits::default().memory_bytes);
        assert_eq!(g.settings().read_your_writes, Some(false));

        std::fs::write(
            &path,
            "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\n[guest.grant]\nnamespace = [\"x\"]\n",
        )
        .unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(err.contains("unknown field `namespace`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_guests_settings_are_a_table_handed_over_as_a_json_object() {
        let dir = std::env::temp_dir().join(format!("reconciled-config-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("host.toml");
        let guests = "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\n[guest.settings]\nprefix = \"blue\"\nreplicas = 2\n[[guest]]\nname = \"b\"\nmodule = \"b.wasm\"\n";
        std::fs::write(&path, guests).unwrap();
        let c = Config::load(&path).unwrap();
        let a = c.guests[0].settings().guest_settings;
        assert_eq!(a.as_str(), r#"{"prefix":"blue","replicas":2}"#);
        assert!(
            c.guests[1].settings().guest_settings.is_empty(),
            "none given: {{}}"
        );

        let not_a_table = "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\nsettings = [1, 2]\n";
        std::fs::write(&path, not_a_table).unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("not a JSON object") && err.contains("line 4"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_guests_rollout_block_reads_as_a_reconcilers_and_a_bad_one_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("reconciled-config-ro-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("host.toml");
        let guests = "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\n[guest.rollout]\nstrategy = \"Progressive\"\nsteps = [{ shadow = { minReconciles = 50 } }, { canary = { percent = 10, pause = \"5m\" } }]\nanalysis = { maxErrorRate = 0.01 }\n";
        std::fs::write(&path, guests).unwrap();
        let c = Config::load(&path).unwrap();
        let rollout = c.guests[0].settings().rollout;
        assert!(rollout.progressive() && rollout.auto_rollback);
        assert_eq!(rollout.steps.len(), 2);
        assert_eq!(rollout.analysis.max_error_rate, 0.01);

        let empty = "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\n[guest.rollout]\nstrategy = \"Progressive\"\n";
        std::fs::write(&path, empty).unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("guest \"a\"") && err.contains("rollout.steps is empty"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_guest_acts_as_the_host_unless_it_names_a_service_account() {
        let dir = std::env::temp_dir().join(format!("reconciled-config-sa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("host.toml");
        let guests = "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\n[[guest]]\nname = \"b\"\nmodule = \"b.wasm\"\nservice_account = \"ops/reconciler\"\n";
        std::fs::write(&path, guests).unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.guests[0].settings().identity, None);
        let b = c.guests[1].settings().identity.unwrap();
        assert_eq!(b.username(), "system:serviceaccount:ops:reconciler");

        std::fs::write(
            &path,
            "[[guest]]\nname = \"a\"\nmodule = \"a.wasm\"\nservice_account = \"reconciler\"\n",
        )
        .unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(err.contains("namespace/name"), "{err}");
        std::fs::write(&path, "[tenants]\nservice_account = \"Not Valid\"\n").unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(err.contains("tenants.service_account"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_module_may_be_a_reference_which_stays_as_written() {
        let dir =
            std::env::temp_dir().join(format!("reconciled-config-oci-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("host.toml");
        let guest = "[[guest]]\nname = \"a\"\nmodule = \"oci://r.example/team/a:1\"\n";
        std::fs::write(
            &path,
            format!("{guest}[registry]\npull_secret = \"ops/login\"\npoll_interval_ms = 500\n"),
        )
        .unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(
            c.guests[0].module,
            PathBuf::from("oci://r.example/team/a:1"),
            "not made relative"
        );
        assert_eq!(
            c.guests[0].reference().unwrap().unwrap().repository(),
            "team/a"
        );
        assert_eq!(
            c.registry.poll_interval(),
            std::time::Duration::from_millis(500)
        );
        std::fs::write(&path, "[[guest]]\nname = \"a\"\nmodule = \"oci://a:1\"\n").unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("guest \"a\"") && err.contains("names no registry"),
            "{err}"
        );
        std::fs::write(
            &path,
            format!("{guest}[registry]\npull_secret = \"login\"\n"),
        )
        .unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("pull_secret \"login\" is not namespace/name"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replicas_take_defaults_for_what_the_file_leaves_out() {
        let c: Config = toml::from_str(
            "[replicas]\nshards = 4\nlease_duration_ms = 4000\nrenew_deadline_ms = 2500\n",
        )
        .unwrap();
        let r = c.replicas.unwrap().resolve("host-a", "ops");
        assert_eq!(
            (r.shards, r.namespace.as_str(), r.group.as_str()),
            (4, "ops", "reconciled")
        );
        assert_eq!(r.lease_duration, std::time::Duration::from_secs(4));
        assert_eq!(r.retry_period, std::time::Duration::from_secs(2));
        let err = r.validate().unwrap_err().to_string();
        assert!(
            err.contains("retry_period_ms (2000) must be at most half"),
            "{err}"
        );
        assert!(toml::from_str::<Config>("[replicas]\nshard = 4\n").is_err());
    }

    #[test]
    fn standby_is_warm_unless_the_file_says_cold_and_nothing_else_is_taken() {
        let standby = |toml: &str| {
            let c: Config = toml::from_str(toml).unwrap();
            c.replicas.unwrap().resolve("host-a", "ops").standby
        };
        use crate::replicas::Standby;
        assert_eq!(standby("[replicas]\n"), Standby::Warm);
        assert_eq!(standby("[replicas]\nstandby = \"cold\"\n"), Standby::Cold);
        let err = toml::from_str::<Config>("[replicas]\nstandby = \"hot\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("warm") && err.contains("cold"), "{err}");
    }

    #[test]
    fn the_fair_share_takes_slots_from_scheduler_and_budget_and_weights_from_tenants() {
        let c: Config = toml::from_str(
            "[scheduler]\nslots = 3\noperator_weight = 4\n[tenants]\ncpu_budget_ms_per_minute = 6000\n[tenants.weights]\nteam-a = 2\n",
        )
        .unwrap();
        let f = c.fair_share();
        assert_eq!(f.slots, 3);
        assert_eq!(f.cpu_budget_ms_per_minute, Some(6000));
        assert_eq!(f.weights.get("team-a"), Some(&2));
        assert_eq!(f.weights.get(fair_share::OPERATOR), Some(&4));
        assert_eq!(f.low_priority_max_wait_ms, 30_000);
        assert_eq!(
            Config::default().fair_share(),
            fair_share::Config::default()
        );
    }
}
