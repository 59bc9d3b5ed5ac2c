//! Tenants' modules named by reference: a `data` key `<stem>.wasm.ref` of a labelled
//! ConfigMap, holding `registry/repository:tag@sha256:…`. Guest `<namespace>/<configmap>/<stem>`
//! then runs what the registry holds there, and follows a tag as it moves.
//!
//! Where it may surprise:
//! - A tenant may only pull from the registries in [`TenantPolicy::registries`], empty by
//!   default: the host makes the request, from inside the cluster, so an unrestricted reference
//!   would let a tenant reach any address the host can.
//! - Credentials come from a `kubernetes.io/dockerconfigjson` Secret of the ConfigMap's own
//!   namespace named by the annotation [`PULL_SECRET`], read as the guest's ServiceAccount: a
//!   tenant can use only a Secret its guest may `get`.
//! - The watch is kept across resyncs and edits that leave the reference, the Secret and the
//!   ServiceAccount as they were; changing any of them pulls again at once. A resync or a
//!   change of the namespace's RBAC offers the last module pulled again while the guest has
//!   not settled from it (refused for access, for its quota, or for a sync that timed out), as
//!   it offers a ConfigMap's inline modules again.
//! - A namespace may name at most [`TenantPolicy::max_guests_per_namespace`] modules by
//!   reference at once, over all its ConfigMaps: each is pulled (and held, up to
//!   `max_module_bytes`) before the supervisor's quota sees it. One past that is refused, and
//!   pulled at its ConfigMap's next edit or resync once another is gone.
//! - A watch stopped (the key, the label or the ConfigMap removed, or the reference changed)
//!   offers nothing more, even a pull that was finishing as it stopped: its outcome is offered
//!   under the same lock that stops it, and only if it is still the guest's current watch.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::format::{Named, with_guest_settings};
use super::policy::TenantPolicy;
use crate::controller::Settings;
use crate::guest::identity::ServiceAccount;
use crate::sources::oci::watch::{LoginSource, Target, Watch};
use crate::sources::oci::{ModuleRef, Pulled, Registry};
use crate::sources::offer::{offer_of, refused};
use crate::supervisor::{Source, Supervisor};

/// The ConfigMap annotation naming the pull secret of its module references.
pub const PULL_SECRET: &str = "reconciled.dev/pull-secret";

/// The watches of every tenant guest named by reference, by guest name.
#[derive(Debug)]
pub(crate) struct TenantRefs {
    registry: Arc<Registry>,
    watches: Arc<Mutex<HashMap<String, Entry>>>,
    generations: std::sync::atomic::AtomicU64,
}

/// Everything a watch offers with: any change starts a new one.
#[derive(Debug, PartialEq)]
struct Spec {
    reference: String,
    pull_secret: Option<String>,
    source: Source,
    settings: Settings,
}

/// One guest's watch.
#[derive(Debug)]
struct Entry {
    /// What the watch was started for.
    spec: Spec,
    /// Which start of a watch for this guest it is: a late outcome of an older one is dropped.
    generation: u64,
    /// The last module it pulled, with what to offer it as.
    last: Option<(Pulled, Source, Settings, Duration)>,
    /// `None` only while it is being started.
    watch: Option<Watch>,
}

/// A ConfigMap's references and what they run as.
pub(crate) struct Refs<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) configmap: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) named: Vec<Named>,
    pub(crate) account: &'a Result<ServiceAccount, super::policy::BadAccount>,
    pub(crate) pull_secret: Option<String>,
}

impl TenantRefs {
    pub(crate) fn new(registry: Arc<Registry>) -> Self {
        TenantRefs {
            registry,
            watches: Arc::new(Mutex::new(HashMap::new())),
            generations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether inline modules must be refused: every module must be signed, and only a
    /// registry can hold a signature.
    pub(crate) fn requires_signatures(&self) -> bool {
        self.registry.requires_signatures()
    }

    /// Stops `name`'s watch, if it has one: it was removed, or is now delivered otherwise.
    pub(crate) fn stop(&self, name: &str) {
        self.watches.lock().unwrap().remove(name);
    }

    /// Starts, keeps or replaces the watch of each reference of one ConfigMap; refusals go to
    /// the supervisor at once. Returns the guests named.
    pub(crate) fn sync(
        &self,
        supervisor: &Arc<Supervisor>,
        policy: &TenantPolicy,
        refs: Refs<'_>,
    ) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for named in refs.named {
            let name = format!("{}/{}/{}", refs.namespace, refs.configmap, named.stem);
            names.insert(name.clone());
            let source = Source::ConfigMap {
                namespace: refs.namespace.to_string(),
                name: refs.configmap.to_string(),
                key: named.key.clone(),
                uid: refs.uid.to_string(),
            };
            let account = match refs.account {
                Ok(a) => a.clone(),
                Err(bad) => {
                    self.stop(&name);
                    let settings = policy.settings(&name, refs.namespace);
                    supervisor.offer(&name, refused(source, settings, bad.to_string()));
                    continue;
                }
            };
            let settings = policy.settings_as(&name, refs.namespace, account.clone());
            let settings = match with_guest_settings(settings.clone(), named.settings.as_ref()) {
                Ok(s) => s,
                Err(message) => {
                    self.stop(&name);
                    supervisor.offer(&name, refused(source, settings, message));
                    continue;
                }
            };
            self.follow(
                supervisor,
                policy,
                Followed {
                    name,
                    source,
                    settings,
                    account,
                    what: format!("key {:?}", named.key),
                    reference: named.reference,
                    pull_secret: refs.pull_secret.clone(),
                },
            );
        }
        names
    }

    /// Starts, keeps or replaces the watch of one guest's reference; a refusal goes to the
    /// supervisor at once.
    ///
    /// Where it may surprise: for a Reconciler's guest the offers' source names the manifest
    /// each pull resolved to (see [`offer_of`]), so that a revision can be pinned to it.
    #[expect(
        clippy::too_many_lines,
        reason = "keep, restart or refuse the reference under the watches' lock, so that a stopped watch never offers; the refusals are each a few lines"
    )]
    pub(crate) fn follow(&self, supervisor: &Arc<Supervisor>, policy: &TenantPolicy, f: Followed) {
        let Followed {
            name,
            source,
            settings,
            account,
            what,
            reference,
            pull_secret,
        } = f;
        let namespace = account.namespace.clone();
        let reference = match allowed(&what, &reference, policy) {
            Ok(r) => r,
            Err(e) => {
                self.stop(&name);
                supervisor.offer(&name, refused(source, settings, e.to_string()));
                return;
            }
        };
        // New settings or a new source start a new watch: its pulls offer them (the module
        // serving is reloaded with new settings, not compiled again).
        let spec = Spec {
            reference: reference.to_string(),
            pull_secret: pull_secret.clone(),
            source: source.clone(),
            settings: settings.clone(),
        };
        let mut watches = self.watches.lock().unwrap();
        if let Some(e) = watches.get(&name)
            && e.spec == spec
        {
            // Offered again while not settled from it: see the module docs.
            if let Some((p, source, settings, interval)) = &e.last
                && !supervisor.offers_settled(&[name.clone()].into())
            {
                let offer = offer_of(Ok(p.clone()), source.clone(), settings.clone(), *interval);
                supervisor.offer(&name, offer);
            }
            return;
        }
        // A reference is pulled before the supervisor's quota sees it: bound the pulls, and the
        // bytes they hold, by the same number per namespace.
        let prefix = format!("{namespace}/");
        let others = watches
            .keys()
            .filter(|n| n.starts_with(&prefix) && **n != name)
            .count();
        if others >= policy.max_guests_per_namespace {
            watches.remove(&name);
            let message = format!(
                "namespace {namespace} already names {others} modules by reference, the most it may (max_guests_per_namespace under [tenants]); remove one, and this one is pulled at its source's next edit or resync"
            );
            supervisor.offer(&name, refused(source, settings, message));
            return;
        }
        let login = match &pull_secret {
            None => LoginSource::Anonymous,
            Some(secret) => match supervisor.identities().client(Some(&account)) {
                Ok(client) => LoginSource::Secret {
                    client,
                    namespace: namespace.clone(),
                    name: secret.clone(),
                },
                Err(e) => {
                    watches.remove(&name);
                    let message =
                        format!("cannot act as {account} to read pull secret {secret}: {e}");
                    supervisor.offer(&name, refused(source, settings, message));
                    return;
                }
            },
        };
        let target = Target {
            registry: self.registry.clone(),
            reference,
            login,
            max_bytes: policy.max_module_bytes,
        };
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // In place before the task starts, so that its first outcome finds it; replacing an
        // older entry drops (stops) its watch.
        watches.insert(
            name.clone(),
            Entry {
                spec,
                generation,
                last: None,
                watch: None,
            },
        );
        let (sup, map, guest) = (
            Arc::downgrade(supervisor),
            Arc::downgrade(&self.watches),
            name.clone(),
        );
        let min_interval = Duration::from_millis(policy.min_reload_interval_ms);
        let watch = Watch::start(target, move |outcome| {
            let (Some(sup), Some(map)) = (sup.upgrade(), map.upgrade()) else {
                return;
            };
            let mut map = map.lock().unwrap();
            let Some(entry) = map.get_mut(&guest).filter(|e| e.generation == generation) else {
                return;
            };
            if let Ok(p) = &outcome {
                entry.last = Some((p.clone(), source.clone(), settings.clone(), min_interval));
            }
            // Under the lock that `stop` takes: never after the guest's removal.
            sup.offer(
                &guest,
                offer_of(outcome, source.clone(), settings.clone(), min_interval),
            );
        });
        if let Some(e) = watches.get_mut(&name) {
            e.watch = Some(watch);
        }
    }
}

/// One guest's module named by reference, and what it runs as.
pub(crate) struct Followed {
    /// The guest.
    pub(crate) name: String,
    /// Where its offers say the module comes from.
    pub(crate) source: Source,
    /// How it runs, guest settings included.
    pub(crate) settings: Settings,
    /// Whom it acts as; its namespace is the tenant's.
    pub(crate) account: ServiceAccount,
    /// Where the reference is written, for messages: `key "rec.wasm.ref"`, `spec.module.image`.
    pub(crate) what: String,
    /// The reference as written.
    pub(crate) reference: String,
    /// The pull secret of the tenant's namespace, if any.
    pub(crate) pull_secret: Option<String>,
}

/// Why a tenant's reference is refused before anything is pulled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The value is not a module reference.
    #[error("{what}: {source}")]
    Reference {
        /// Where it is written: `key "rec.wasm.ref"`, `spec.module.image`.
        what: String,
        /// Why it does not parse.
        #[source]
        source: crate::sources::oci::reference::Error,
    },
    /// It names a registry the operator does not let tenants pull from.
    #[error(
        "{what}: registry {registry} is not one tenants may pull from; the operator lists them in `registries` under [tenants] (now {allowed:?})"
    )]
    Registry {
        /// Where it is written.
        what: String,
        /// The registry it names.
        registry: String,
        /// The registries tenants may use.
        allowed: BTreeSet<String>,
    },
}

/// `reference` (written at `what`), if it parses and names a registry tenants may use.
pub(crate) fn allowed(
    what: &str,
    reference: &str,
    policy: &TenantPolicy,
) -> Result<ModuleRef, Error> {
    let reference: ModuleRef = reference.parse().map_err(|source| Error::Reference {
        what: what.to_string(),
        source,
    })?;
    if !policy.registries.contains(reference.registry()) {
        return Err(Error::Registry {
            what: what.to_string(),
            registry: reference.registry().to_string(),
            allowed: policy.registries.clone(),
        });
    }
    Ok(reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(reference: &str, policy: &TenantPolicy) -> Result<ModuleRef, Error> {
        super::allowed("key \"rec.wasm.ref\"", reference, policy)
    }

    #[test]
    fn a_tenant_pulls_only_from_registries_the_operator_lists() {
        let mut policy = TenantPolicy::default();
        let e = allowed("r.example/team-a/rec:1", &policy)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("registry r.example is not one tenants may pull from"),
            "{e}"
        );
        policy.registries.insert("r.example".into());
        let r = allowed("oci://r.example/team-a/rec:1", &policy).unwrap();
        assert_eq!(r.repository(), "team-a/rec");
        let e = allowed("r.example:443/team-a/rec:1", &policy)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("r.example:443"),
            "host and port name a registry: {e}"
        );
        let e = allowed("rec:1", &policy).unwrap_err().to_string();
        assert!(
            e.contains("key \"rec.wasm.ref\"") && e.contains("names no registry"),
            "{e}"
        );
    }
}
