//! A `Reconciler`'s spec, read and judged: what it asks for, and what the tenant policy lets it
//! have. Pure, so that every refusal and every clamp is unit-tested.

use serde::Deserialize;
use serde_json::Value;

use crate::controller::Settings;
use crate::guest::identity::ServiceAccount;
use crate::guest::settings::GuestSettings;
use crate::rollout::progress::Progress;
use crate::rollout::spec::Rollout;
use crate::sources::configmap::TenantPolicy;
use crate::sources::oci::ModuleRef;

use super::revisions::Revision;

/// A Reconciler as the source knows it: who it is, and its spec or why the spec is unusable.
#[derive(Debug, Clone)]
pub(crate) struct Reconciler {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    /// `metadata.generation`: what `status.observedGeneration` reports once acted on.
    pub(crate) generation: i64,
    /// `metadata.creationTimestamp`, RFC 3339 (empty if absent): of two sources claiming one
    /// name, the older keeps it.
    pub(crate) created: String,
    pub(crate) spec: Result<Spec, Refusal>,
    /// `status.rollout`, as the replica driving the rollout recorded it.
    pub(crate) rollout: Option<Progress>,
    /// `status.currentRevision`: the revision serving, as the owner recorded it.
    pub(crate) current_revision: Option<u64>,
}

impl Reconciler {
    /// The guest it runs as: `<namespace>/<name>`, which a ConfigMap's guests
    /// (`<namespace>/<configmap>/<key>`) can never be.
    pub(crate) fn guest(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What a Reconciler asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    pub(crate) module: Module,
    pub(crate) service_account: String,
    pub(crate) settings: GuestSettings,
    pub(crate) workers: usize,
    /// Its keys split over the replicas (`spec.shardKeys`).
    pub(crate) shard_keys: bool,
    pub(crate) suspend: bool,
    /// A revision pinned instead of `module`.
    pub(crate) revision: Option<u64>,
    pub(crate) revision_history_limit: usize,
    pub(crate) limits: AskedLimits,
    /// How a new revision replaces the serving one.
    pub(crate) rollout: Rollout,
}

/// Where the module is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Module {
    /// An OCI reference, with the pull secret of the namespace to pull it with.
    Image {
        reference: String,
        pull_secret: Option<String>,
    },
    /// A key of a ConfigMap of the Reconciler's namespace.
    ConfigMap { name: String, key: String },
}

/// Per-call limits a Reconciler asks for; each is capped by the tenant policy's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AskedLimits {
    pub(crate) deadline_ms: Option<u64>,
    pub(crate) memory_bytes: Option<u64>,
    pub(crate) host_calls: Option<u32>,
}

/// Why a Reconciler is not accepted: the condition's reason, and a message saying what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Refusal {
    /// `Accepted=False`'s reason: `InvalidSpec`, `NameTaken`, `NamespaceNotServed`,
    /// `RegistryNotAllowed`, `InvalidReference`, `InvalidServiceAccount`, `NoSuchRevision`, and
    /// `ServiceAccountNotAllowed` (see `impersonation`).
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Refusal {
    fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }
}

#[derive(Deserialize)]
struct Raw {
    metadata: RawMeta,
    #[serde(default)]
    spec: Value,
    #[serde(default)]
    status: RawStatus,
}

#[derive(Deserialize, Default)]
struct RawStatus {
    /// Unreadable (an older host's, or edited by hand) reads as none.
    #[serde(default, deserialize_with = "lenient")]
    rollout: Option<Progress>,
    #[serde(default, rename = "currentRevision")]
    current_revision: Option<u64>,
}

fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Progress>, D::Error> {
    Ok(Option::<Value>::deserialize(d)?.and_then(|v| serde_json::from_value(v).ok()))
}

#[derive(Deserialize)]
struct RawMeta {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    generation: i64,
    #[serde(default, rename = "creationTimestamp")]
    created: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    module: RawModule,
    service_account_name: Option<String>,
    settings: Option<Value>,
    workers: Option<i64>,
    #[serde(default)]
    shard_keys: bool,
    #[serde(default)]
    suspend: bool,
    revision: Option<i64>,
    revision_history_limit: Option<i64>,
    #[serde(default)]
    limits: AskedLimits,
    rollout: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawModule {
    image: Option<String>,
    config_map_ref: Option<RawRef>,
    pull_secret: Option<String>,
}

#[derive(Deserialize)]
struct RawRef {
    name: String,
    key: String,
}

/// The Reconciler in `json`, or `None` for an object without even a name (never from the API
/// server). A spec the CRD's schema should have refused (an older CRD, or none) is a refusal
/// here, never a panic.
pub(crate) fn read(json: &[u8]) -> Option<Reconciler> {
    let raw: Raw = serde_json::from_slice(json).ok()?;
    let RawMeta {
        name,
        namespace,
        uid,
        generation,
        created,
    } = raw.metadata;
    let spec = parse_spec(raw.spec);
    Some(Reconciler {
        namespace,
        name,
        uid,
        generation,
        created,
        spec,
        rollout: raw.status.rollout,
        current_revision: raw.status.current_revision,
    })
}

fn parse_spec(spec: Value) -> Result<Spec, Refusal> {
    let invalid = |m: String| Refusal::new("InvalidSpec", m);
    let raw: RawSpec = serde_json::from_value(spec).map_err(|e| {
        invalid(format!(
            "spec does not read as a Reconciler's ({e}); install the CRD of deploy/reconcilers.yaml, which refuses such a spec at kubectl apply"
        ))
    })?;
    let module = match (raw.module.image, raw.module.config_map_ref) {
        (Some(reference), None) => Module::Image {
            reference,
            pull_secret: raw.module.pull_secret,
        },
        (None, Some(r)) if raw.module.pull_secret.is_none() => Module::ConfigMap {
            name: r.name,
            key: r.key,
        },
        (None, Some(_)) => {
            return Err(invalid(
                "spec.module.pullSecret applies to spec.module.image only; remove it".into(),
            ));
        }
        _ => {
            return Err(invalid(
                "set exactly one of spec.module.image (an OCI reference) and spec.module.configMapRef (a ConfigMap key in this namespace)".into(),
            ));
        }
    };
    if let Module::ConfigMap { key, .. } = &module
        && !(key.ends_with(".wasm") || key.ends_with(".wasm.gz"))
    {
        return Err(invalid(format!(
            "spec.module.configMapRef.key {key:?} must name a binaryData key ending in .wasm or .wasm.gz"
        )));
    }
    let settings = match raw.settings {
        None => GuestSettings::default(),
        Some(v) => {
            GuestSettings::from_value(&v).map_err(|e| invalid(format!("spec.settings: {e}")))?
        }
    };
    let positive = |field: &str, v: Option<i64>, default: i64, max: i64| match v {
        None => Ok(default),
        Some(n) if (0..=max).contains(&n) => Ok(n),
        Some(n) => Err(invalid(format!(
            "spec.{field} is {n}; it must be between 0 and {max}"
        ))),
    };
    let workers = positive("workers", raw.workers, 1, 64)?.max(1) as usize;
    let revision_history_limit =
        positive("revisionHistoryLimit", raw.revision_history_limit, 5, 100)? as usize;
    let revision = match raw.revision {
        None => None,
        Some(n) if n >= 1 => Some(n as u64),
        Some(n) => {
            return Err(invalid(format!(
                "spec.revision is {n}; revisions are numbered from 1 (kubectl get reconcilerrevisions lists them)"
            )));
        }
    };
    let rollout = match raw.rollout {
        None => Rollout::default(),
        Some(v) => {
            let r: Rollout = serde_json::from_value(v)
                .map_err(|e| invalid(format!("spec.rollout does not read as a rollout: {e}")))?;
            r.validate().map_err(|e| invalid(format!("spec.{e}")))?;
            r
        }
    };
    Ok(Spec {
        rollout,
        module,
        service_account: raw
            .service_account_name
            .unwrap_or_else(|| crate::guest::identity::DEFAULT_SERVICE_ACCOUNT.to_string()),
        settings,
        workers,
        shard_keys: raw.shard_keys,
        suspend: raw.suspend,
        revision,
        revision_history_limit,
        limits: raw.limits,
    })
}

/// What the source should do for a Reconciler it accepts.
#[derive(Debug, Clone)]
pub(crate) enum Wanted {
    /// Nothing runs: `spec.suspend`.
    Suspended,
    /// Run the module at `from` with `settings`.
    Run {
        from: From,
        settings: Box<Settings>,
        account: ServiceAccount,
        /// What the policy cut down, for the `Accepted` message: `workers 8 → 2`, ...
        clamped: Vec<String>,
    },
}

/// Where the module to run comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum From {
    /// `spec.module`, as it is now.
    Spec(Module),
    /// A pinned revision's module.
    Revision {
        number: u64,
        /// Its recorded origin: `oci://registry/repository@sha256:…` or
        /// `configmap/<name>/<key>`.
        module: String,
        /// The module's sha256, hex.
        digest: String,
    },
}

impl From {
    /// The ConfigMap of the Reconciler's namespace the module is read from, as (name, key), if
    /// it is.
    pub(crate) fn configmap(&self) -> Option<(&str, &str)> {
        match self {
            From::Spec(Module::ConfigMap { name, key }) => Some((name, key)),
            From::Spec(Module::Image { .. }) => None,
            From::Revision { module, .. } => configmap_key(module),
        }
    }
}

/// The (name, key) of a recorded module `configmap/<name>/<key>`; `None` for another origin.
pub(crate) fn configmap_key(module: &str) -> Option<(&str, &str)> {
    module.strip_prefix("configmap/")?.split_once('/')
}

/// What the tenant `policy` makes of `r`'s `spec`: what to run, or why not.
///
/// `taken_by` names the labelled ConfigMap of the same name that was there first, if there is
/// one: its guests and this Reconciler's would share a name. (One created after the Reconciler
/// takes nothing from it: the older keeps the name.) `revisions` are the Reconciler's own, looked up when
/// `spec.revision` pins one.
pub(crate) fn decide(
    r: &Reconciler,
    spec: &Spec,
    policy: &TenantPolicy,
    taken_by: Option<&str>,
    revisions: &[Revision],
) -> Result<Wanted, Refusal> {
    let (ns, name) = (&r.namespace, &r.name);
    if let Some(set) = &policy.namespaces
        && !set.contains(ns)
    {
        return Err(Refusal::new(
            "NamespaceNotServed",
            format!(
                "namespace {ns} is not one this host loads tenants' reconcilers from (now {set:?}); ask the host's operator to add it to `namespaces` under [tenants]"
            ),
        ));
    }
    // Suspended, it delivers nothing, so it takes no name either.
    if spec.suspend {
        return Ok(Wanted::Suspended);
    }
    if let Some(cm) = taken_by {
        return Err(Refusal::new(
            "NameTaken",
            format!(
                "Reconciler {ns}/{name} and the labelled ConfigMap {ns}/{cm} both deliver reconcilers under the name {ns}/{name}; rename the Reconciler, or remove the label reconciled.dev/reconciler from the ConfigMap"
            ),
        ));
    }
    let account = ServiceAccount::new(ns, &spec.service_account).map_err(|e| {
        Refusal::new(
            "InvalidServiceAccount",
            format!("spec.serviceAccountName names no usable ServiceAccount: {e}"),
        )
    })?;
    let from = match spec.revision {
        None => {
            if let Module::Image { reference, .. } = &spec.module {
                allowed_image(reference, "spec.module.image", policy)?;
            }
            From::Spec(spec.module.clone())
        }
        Some(n) => {
            let Some(rev) = revisions.iter().find(|rev| rev.number == n) else {
                let mut have: Vec<u64> = revisions.iter().map(|r| r.number).collect();
                have.sort_unstable();
                return Err(Refusal::new(
                    "NoSuchRevision",
                    format!(
                        "spec.revision {n} names no ReconcilerRevision of this Reconciler (it has {have:?}); pick one of those, or remove spec.revision to run spec.module"
                    ),
                ));
            };
            if let Some(image) = rev.module.strip_prefix("oci://") {
                allowed_image(image, &format!("revision {n}'s module"), policy)?;
            }
            From::Revision {
                number: n,
                module: rev.module.clone(),
                digest: rev.digest.clone(),
            }
        }
    };
    let mut settings = policy.settings_as(&r.guest(), ns, account.clone());
    settings.guest_settings = match (&from, spec.revision) {
        (From::Revision { .. }, Some(n)) => revisions
            .iter()
            .find(|rev| rev.number == n)
            .map(|rev| rev.settings.clone())
            .unwrap_or_default(),
        _ => spec.settings.clone(),
    };
    // A pin is a person taking a revision back: it serves at once, whatever the rollout says.
    if spec.revision.is_none() {
        settings.rollout = spec.rollout.clone();
    }
    let clamped = clamp(&mut settings, spec, policy);
    Ok(Wanted::Run {
        from,
        settings: Box::new(settings),
        account,
        clamped,
    })
}

/// What to start first on a host where the guest of `r` does not run yet, when `wanted` rolls
/// out step by step: the revision serving (`status.currentRevision`) while `status.rollout`
/// says a rollout of another revision is under way or was rolled back. A rollout needs a
/// serving revision beside it; without this, a host starting mid-rollout would serve the new
/// revision on every key, even one rolled back. `None`: start what `wanted` asks.
///
/// The base runs at once, with its recorded settings; the spec is offered once it serves.
pub(crate) fn base_for_rollout(
    r: &Reconciler,
    wanted: &Wanted,
    revisions: &[Revision],
) -> Option<Wanted> {
    let Wanted::Run {
        from: From::Spec(_),
        settings,
        account,
        clamped,
    } = wanted
    else {
        return None;
    };
    let p = r.rollout.as_ref()?;
    let open = !matches!(
        p.phase,
        crate::rollout::progress::Phase::Promoted | crate::rollout::progress::Phase::Superseded
    );
    let base = revisions
        .iter()
        .find(|rev| Some(rev.number) == r.current_revision)?;
    // A revision is its digest and its settings: the same module with new settings rolls out
    // like a new module. (A rollout recorded before its settings were, with no hash, is told
    // by its digest alone.)
    let base_hash = crate::rollout::progress::settings_hash(base.settings.as_str());
    let same =
        base.digest == p.digest && (p.settings_hash.is_empty() || p.settings_hash == base_hash);
    if !settings.rollout.progressive() || !open || same {
        return None;
    }
    let mut settings = settings.clone();
    settings.guest_settings = base.settings.clone();
    settings.rollout = Rollout::default();
    Some(Wanted::Run {
        from: From::Revision {
            number: base.number,
            module: base.module.clone(),
            digest: base.digest.clone(),
        },
        settings,
        account: account.clone(),
        clamped: clamped.clone(),
    })
}

/// Refused unless `reference` parses and names a registry tenants may pull from.
fn allowed_image(reference: &str, what: &str, policy: &TenantPolicy) -> Result<ModuleRef, Refusal> {
    crate::sources::configmap::references::allowed(what, reference, policy).map_err(|e| {
        let reason = match e {
            crate::sources::configmap::references::Error::Reference { .. } => "InvalidReference",
            crate::sources::configmap::references::Error::Registry { .. } => "RegistryNotAllowed",
        };
        Refusal::new(reason, e.to_string())
    })
}

/// Gives `settings` the workers and limits `spec` asks for, each at most the policy's; returns
/// what was cut down.
fn clamp(settings: &mut Settings, spec: &Spec, policy: &TenantPolicy) -> Vec<String> {
    let mut cut = Vec::new();
    let mut at_most = |what: &str, asked: u64, max: u64| -> u64 {
        if asked > max {
            cut.push(format!("{what} {asked} → {max}"));
            max
        } else {
            asked
        }
    };
    settings.workers = at_most("workers", spec.workers as u64, policy.workers as u64) as usize;
    settings.shard_keys = spec.shard_keys;
    let limits = &mut settings.limits;
    let max = policy.limits;
    if let Some(ms) = spec.limits.deadline_ms {
        let ms = at_most("limits.deadlineMs", ms, max.deadline.as_millis() as u64);
        limits.deadline = std::time::Duration::from_millis(ms.max(1));
    }
    if let Some(bytes) = spec.limits.memory_bytes {
        limits.memory_bytes =
            at_most("limits.memoryBytes", bytes, max.memory_bytes as u64) as usize;
    }
    if let Some(calls) = spec.limits.host_calls {
        limits.host_calls = at_most("limits.hostCalls", calls.into(), max.host_calls.into()) as u32;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reconciler(spec: Value) -> Reconciler {
        let json = json!({
            "metadata": {"name": "rec", "namespace": "team-a", "uid": "u-1", "generation": 3},
            "spec": spec,
        });
        read(json.to_string().as_bytes()).unwrap()
    }

    fn policy() -> TenantPolicy {
        TenantPolicy {
            registries: ["r.example".to_string()].into(),
            workers: 2,
            ..TenantPolicy::default()
        }
    }

    fn wanted(spec: Value) -> Result<Wanted, Refusal> {
        let r = reconciler(spec);
        let spec = r.spec.clone()?;
        decide(&r, &spec, &policy(), None, &[])
    }

    fn revision(number: u64, module: &str) -> Revision {
        Revision {
            namespace: "team-a".into(),
            uid: format!("uid-{number}"),
            name: format!("rec-{number}"),
            number,
            owner: "u-1".into(),
            digest: "ab".repeat(32),
            module: module.into(),
            settings: GuestSettings::parse(r#"{"pinned":true}"#).unwrap(),
        }
    }

    #[test]
    fn a_rollout_is_read_checked_and_ignored_by_a_pin() {
        let rollout = json!({
            "strategy": "Progressive",
            "steps": [{"shadow": {"minReconciles": 10}}, {"canary": {"percent": 10}}],
        });
        let spec = json!({"module": {"image": "r.example/team-a/rec:1"}, "rollout": rollout});
        let Ok(Wanted::Run { settings, .. }) = wanted(spec) else {
            panic!("accepted");
        };
        assert!(settings.rollout.progressive());
        assert_eq!(settings.rollout.steps.len(), 2);

        let shrinking = json!({"module": {"image": "r.example/team-a/rec:1"}, "rollout": {
            "strategy": "Progressive",
            "steps": [{"canary": {"percent": 50}}, {"canary": {"percent": 10}}],
        }});
        let refused = wanted(shrinking).unwrap_err();
        assert_eq!(refused.reason, "InvalidSpec");
        assert!(
            refused
                .message
                .starts_with("spec.rollout.steps[1].canary.percent is 10"),
            "{}",
            refused.message
        );
        let typo = json!({"module": {"image": "r.example/team-a/rec:1"}, "rollout": {"stratgy": "Progressive"}});
        assert!(
            wanted(typo)
                .unwrap_err()
                .message
                .contains("spec.rollout does not read")
        );

        // A pin is a person taking a revision back: it serves at once.
        let r = reconciler(json!({
            "module": {"image": "r.example/team-a/rec:1"},
            "revision": 1,
            "rollout": rollout,
        }));
        let spec = r.spec.clone().unwrap();
        let module = format!("oci://r.example/team-a/rec@sha256:{}", "ab".repeat(32));
        let revisions = [revision(1, &module)];
        let Ok(Wanted::Run { settings, .. }) = decide(&r, &spec, &policy(), None, &revisions)
        else {
            panic!("accepted");
        };
        assert!(!settings.rollout.progressive());
    }

    #[test]
    fn the_recorded_rollout_is_read_from_status_and_a_garbled_one_is_none() {
        let rollout = json!({
            "digest": "ab", "settingsHash": "s", "step": 2, "steps": 3, "phase": "Canary",
            "percent": 10, "minReconciles": 5, "compared": 0, "divergent": 0, "reconciles": 1,
            "errors": 0, "since": "2026-12-03T18:00:00Z", "summary": "canary 10%",
        });
        let with = |rollout: Value| {
            let json = json!({
                "metadata": {"name": "rec", "namespace": "team-a"},
                "spec": {"module": {"image": "r.example/team-a/rec:1"}},
                "status": {"rollout": rollout},
            });
            read(json.to_string().as_bytes()).unwrap()
        };
        let p = with(rollout).rollout.unwrap();
        assert_eq!((p.digest.as_str(), p.step, p.percent), ("ab", 2, 10));
        let garbled = with(json!({"digest": 7}));
        assert!(garbled.rollout.is_none());
        assert!(garbled.spec.is_ok(), "the spec still reads");
    }

    #[test]
    fn a_host_starting_mid_rollout_starts_the_serving_revision_first() {
        let rollout = json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 10}}]});
        let module = format!("oci://r.example/team-a/rec@sha256:{}", "ab".repeat(32));
        let revisions = [revision(1, &module)];
        let at = |phase: &str| {
            let json = json!({
                "metadata": {"name": "rec", "namespace": "team-a", "uid": "u-1"},
                "spec": {"module": {"image": "r.example/team-a/rec:2"}, "rollout": rollout},
                "status": {"currentRevision": 1, "rollout": {
                    "digest": "cd".repeat(32), "settingsHash": "s", "step": 1, "steps": 1,
                    "phase": phase, "percent": 10, "minReconciles": 0, "compared": 0,
                    "divergent": 0, "reconciles": 0, "errors": 0, "since": "t",
                }},
            });
            read(json.to_string().as_bytes()).unwrap()
        };
        for phase in ["Canary", "Paused", "RolledBack"] {
            let r = at(phase);
            let wanted = decide(&r, r.spec.as_ref().unwrap(), &policy(), None, &revisions).unwrap();
            let Some(Wanted::Run { from, settings, .. }) =
                base_for_rollout(&r, &wanted, &revisions)
            else {
                panic!("{phase}: the serving revision first");
            };
            assert!(
                matches!(from, From::Revision { number: 1, .. }),
                "{phase}: {from:?}"
            );
            assert!(!settings.rollout.progressive(), "the base serves at once");
            assert_eq!(settings.guest_settings.as_str(), r#"{"pinned":true}"#);
        }
        for phase in ["Promoted", "Superseded"] {
            let r = at(phase);
            let wanted = decide(&r, r.spec.as_ref().unwrap(), &policy(), None, &revisions).unwrap();
            assert!(
                base_for_rollout(&r, &wanted, &revisions).is_none(),
                "{phase}"
            );
        }
    }

    #[test]
    fn a_settings_only_rollout_killed_mid_way_starts_the_serving_settings_first_on_a_fresh_host() {
        // The same module serving as revision 1 with its settings; the spec rolls out new
        // settings step by step, recorded at 25% when the host died.
        let rollout = json!({"strategy": "Progressive", "steps": [{"canary": {"percent": 25}}, {"canary": {"percent": 100}}]});
        let module = format!("oci://r.example/team-a/rec@sha256:{}", "ab".repeat(32));
        let revisions = [revision(1, &module)];
        let serving_hash = crate::rollout::progress::settings_hash(r#"{"pinned":true}"#);
        let recorded = |hash: &str| {
            let json = json!({
                "metadata": {"name": "rec", "namespace": "team-a", "uid": "u-1"},
                "spec": {"module": {"image": "r.example/team-a/rec:1"}, "rollout": rollout,
                         "settings": {"pinned": false}},
                "status": {"currentRevision": 1, "rollout": {
                    "digest": "ab".repeat(32), "settingsHash": hash, "step": 0, "steps": 2,
                    "phase": "Canary", "percent": 25, "minReconciles": 0, "compared": 0,
                    "divergent": 0, "reconciles": 0, "errors": 0, "since": "t",
                }},
            });
            read(json.to_string().as_bytes()).unwrap()
        };
        let r = recorded("0123456789abcdef");
        let wanted = decide(&r, r.spec.as_ref().unwrap(), &policy(), None, &revisions).unwrap();
        let Some(Wanted::Run { from, settings, .. }) = base_for_rollout(&r, &wanted, &revisions)
        else {
            panic!("the serving settings first, not the new ones on every key");
        };
        assert!(matches!(from, From::Revision { number: 1, .. }), "{from:?}");
        assert_eq!(settings.guest_settings.as_str(), r#"{"pinned":true}"#);
        // The rollout recorded is of the serving revision itself (its settings): nothing to
        // start first.
        let r = recorded(&serving_hash);
        let wanted = decide(&r, r.spec.as_ref().unwrap(), &policy(), None, &revisions).unwrap();
        assert!(base_for_rollout(&r, &wanted, &revisions).is_none());
    }

    #[test]
    fn a_spec_reads_with_the_crds_defaults_when_fields_are_absent() {
        let r = reconciler(json!({"module": {"image": "r.example/team-a/rec:1"}}));
        assert_eq!((r.guest(), r.generation), ("team-a/rec".to_string(), 3));
        let spec = r.spec.unwrap();
        assert_eq!(spec.service_account, "reconciled-guest");
        assert_eq!(
            (spec.workers, spec.revision_history_limit, spec.suspend),
            (1, 5, false)
        );
        assert!(spec.settings.is_empty());
    }

    #[test]
    fn a_spec_the_schema_should_have_refused_is_refused_with_what_to_fix() {
        for (spec, says) in [
            (json!({}), "does not read as a Reconciler's"),
            (
                json!({"module": {}}),
                "set exactly one of spec.module.image",
            ),
            (
                json!({"module": {"image": "a", "configMapRef": {"name": "x", "key": "r.wasm"}}}),
                "set exactly one",
            ),
            (
                json!({"module": {"configMapRef": {"name": "x", "key": "r.txt"}}}),
                "must name a binaryData key ending in .wasm",
            ),
            (
                json!({"module": {"image": "r.example/a:1"}, "settings": [1]}),
                "spec.settings: the settings are an array",
            ),
            (
                json!({"module": {"image": "r.example/a:1"}, "workers": 1000}),
                "spec.workers is 1000",
            ),
            (
                json!({"module": {"image": "r.example/a:1"}, "revision": 0}),
                "numbered from 1",
            ),
        ] {
            let refusal = reconciler(spec.clone()).spec.unwrap_err();
            assert_eq!(refusal.reason, "InvalidSpec", "{spec}");
            assert!(
                refusal.message.contains(says),
                "{spec}: {}",
                refusal.message
            );
        }
    }

    #[test]
    fn an_image_from_a_registry_the_policy_does_not_list_is_refused_naming_the_list() {
        let e = wanted(json!({"module": {"image": "evil.example/x:1"}})).unwrap_err();
        assert_eq!(e.reason, "RegistryNotAllowed");
        assert!(
            e.message
                .contains("spec.module.image: registry evil.example")
                && e.message.contains("r.example"),
            "{}",
            e.message
        );
        let e = wanted(json!({"module": {"image": "no registry"}})).unwrap_err();
        assert_eq!(e.reason, "InvalidReference", "{}", e.message);
    }

    #[test]
    fn a_serviceaccount_name_that_cannot_be_one_is_refused() {
        let e = wanted(
            json!({"module": {"image": "r.example/a:1"}, "serviceAccountName": "Not_Valid"}),
        )
        .unwrap_err();
        assert_eq!(e.reason, "InvalidServiceAccount", "{}", e.message);
    }

    #[test]
    fn workers_and_limits_over_the_policy_are_cut_down_and_said() {
        let Wanted::Run {
            settings, clamped, ..
        } = wanted(json!({
            "module": {"image": "r.example/a:1"},
            "workers": 8,
            "limits": {"hostCalls": 5, "memoryBytes": 1_u64 << 40},
            "settings": {"mode": "fast"},
        }))
        .unwrap()
        else {
            panic!("runs")
        };
        assert_eq!(settings.workers, 2);
        assert_eq!(
            settings.limits.host_calls, 5,
            "lower than the policy's: kept"
        );
        assert_eq!(settings.limits.memory_bytes, 64 << 20);
        assert_eq!(settings.guest_settings.as_str(), r#"{"mode":"fast"}"#);
        assert_eq!(
            settings.identity.as_ref().unwrap().to_string(),
            "team-a/reconciled-guest"
        );
        assert_eq!(
            clamped,
            [
                "workers 8 → 2",
                "limits.memoryBytes 1099511627776 → 67108864"
            ]
        );
    }

    #[test]
    fn a_pinned_revision_runs_its_own_module_and_settings_and_a_missing_one_is_refused() {
        let r = reconciler(json!({"module": {"image": "r.example/a:2"}, "revision": 1}));
        let spec = r.spec.clone().unwrap();
        let (one, two) = (
            format!("oci://r.example/a@sha256:{}", "01".repeat(32)),
            format!("oci://r.example/a@sha256:{}", "02".repeat(32)),
        );
        let revisions = [revision(1, &one), revision(2, &two)];
        let Wanted::Run { from, settings, .. } =
            decide(&r, &spec, &policy(), None, &revisions).unwrap()
        else {
            panic!("runs")
        };
        assert_eq!(
            from,
            From::Revision {
                number: 1,
                module: one.clone(),
                digest: "ab".repeat(32),
            }
        );
        assert_eq!(settings.guest_settings.as_str(), r#"{"pinned":true}"#);
        let e = decide(&r, &spec, &policy(), None, &revisions[1..]).unwrap_err();
        assert_eq!(e.reason, "NoSuchRevision");
        assert!(e.message.contains("it has [2]"), "{}", e.message);
    }

    #[test]
    fn a_labelled_configmap_of_the_same_name_is_named_in_the_refusal() {
        let r = reconciler(json!({"module": {"image": "r.example/a:1"}}));
        let spec = r.spec.clone().unwrap();
        let e = decide(&r, &spec, &policy(), Some("rec"), &[]).unwrap_err();
        assert_eq!(e.reason, "NameTaken");
        assert!(
            e.message
                .contains("Reconciler team-a/rec and the labelled ConfigMap team-a/rec"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_suspended_reconciler_takes_no_name_from_a_labelled_configmap() {
        let r = reconciler(json!({"module": {"image": "r.example/a:1"}, "suspend": true}));
        let spec = r.spec.clone().unwrap();
        assert!(matches!(
            decide(&r, &spec, &policy(), Some("rec"), &[]),
            Ok(Wanted::Suspended)
        ));
    }

    #[test]
    fn suspend_runs_nothing_and_a_namespace_outside_the_policy_is_refused() {
        assert!(matches!(
            wanted(json!({"module": {"image": "r.example/a:1"}, "suspend": true})),
            Ok(Wanted::Suspended)
        ));
        let r = reconciler(json!({"module": {"image": "r.example/a:1"}}));
        let spec = r.spec.clone().unwrap();
        let only = TenantPolicy {
            namespaces: Some(["team-b".to_string()].into()),
            ..policy()
        };
        let e = decide(&r, &spec, &only, None, &[]).unwrap_err();
        assert_eq!(e.reason, "NamespaceNotServed");
    }
}
