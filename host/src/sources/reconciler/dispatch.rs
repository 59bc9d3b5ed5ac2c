//! Handing the supervisor what a judged Reconciler asks for: nothing (refused, said once), an
//! unload (suspended), or its module, followed in a registry, read from a ConfigMap key as the
//! ServiceAccount, or taken from a pinned revision.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::module;
use super::spec::{self, From, Module, Reconciler, Refusal, Wanted};
use super::table::{Table, Tracked};
use crate::controller::Settings;
use crate::events::Type;
use crate::informer::store::Store;
use crate::sources::configmap::TenantPolicy;
use crate::sources::configmap::references::{Followed, TenantRefs};
use crate::sources::oci::{ModuleRef, Registry};
use crate::sources::offer::refused;
use crate::supervisor::{Offer, Source, Supervisor};

/// Hands the supervisor what Reconcilers ask for.
pub(super) struct Dispatch {
    pub(super) supervisor: Arc<Supervisor>,
    pub(super) policy: TenantPolicy,
    pub(super) refs: TenantRefs,
    pub(super) registry: Arc<Registry>,
    /// The latest ConfigMap read started per guest: a slower, older one offers nothing.
    pub(super) reads: Arc<Mutex<HashMap<String, u64>>>,
    pub(super) generations: std::sync::atomic::AtomicU64,
    pub(super) table: Table,
    pub(super) labelled: Store,
    pub(super) revisions: Store,
}

/// A pinned revision's number, module and digest.
struct Pinned {
    number: u64,
    module: String,
    digest: String,
}

/// `source` (a Reconciler's) naming `module` as where this version comes from.
fn with_module(source: &Source, module: String) -> Source {
    match source {
        Source::Reconciler {
            namespace,
            name,
            uid,
            ..
        } => Source::Reconciler {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
            module,
        },
        other => other.clone(),
    }
}

impl Dispatch {
    /// Records what was decided for `r` and acts on it: says a refusal once, unloads a
    /// suspended guest, offers what a running one needs unless that was offered already and
    /// settled (`force`: fetch it again).
    pub(super) fn apply(&self, r: &Reconciler, decision: Result<Wanted, Refusal>, force: bool) {
        let guest = r.guest();
        let mut table = self.table.lock().unwrap();
        let t = table.entry(guest.clone()).or_insert_with(|| Tracked {
            reconciler: r.clone(),
            verdict: Ok(Vec::new()),
            suspended: false,
            pinned: None,
            history: 5,
            submitted: None,
            said: None,
        });
        t.reconciler = r.clone();
        if let Ok(spec) = &r.spec {
            t.pinned = spec.revision;
            t.history = spec.revision_history_limit;
        }
        let source = Source::Reconciler {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            module: String::new(),
        };
        match decision {
            Err(refusal) => {
                // Nothing that serves changes; say why once per message.
                t.suspended = false;
                if t.said.as_deref() != Some(&refusal.message) {
                    t.said = Some(refusal.message.clone());
                    tracing::warn!(reconciler = %guest, reason = refusal.reason, "Reconciler refused: {}", refusal.message);
                    self.supervisor.event(
                        &guest,
                        &source,
                        Type::Warning,
                        refusal.reason,
                        format!("Reconciler {guest} not accepted: {}", refusal.message),
                    );
                }
                t.verdict = Err(refusal);
            }
            Ok(Wanted::Suspended) => {
                t.verdict = Ok(Vec::new());
                t.said = None;
                t.suspended = true;
                if t.submitted.as_deref() != Some("suspended") {
                    t.submitted = Some("suspended".into());
                    drop(table);
                    self.stop(&guest);
                    self.supervisor.offer(&guest, Offer::Remove);
                }
            }
            Ok(Wanted::Run {
                from,
                settings,
                account,
                clamped,
            }) => {
                t.verdict = Ok(clamped);
                t.said = None;
                t.suspended = false;
                let key = format!(
                    "{from:?} {account} {} {} {:?}",
                    settings.guest_settings, settings.workers, settings.limits
                );
                let settled = self.supervisor.offers_settled(&[guest.clone()].into());
                if !force && settled && t.submitted.as_deref() == Some(key.as_str()) {
                    return;
                }
                t.submitted = Some(key);
                let pull_secret = match &r.spec {
                    Ok(spec::Spec {
                        module: Module::Image { pull_secret, .. },
                        ..
                    }) => pull_secret.clone(),
                    _ => None,
                };
                drop(table);
                self.run(&guest, source, from, *settings, account, pull_secret);
            }
        }
    }

    /// Stops whatever fetches `guest`'s module: a registry watch, a ConfigMap read in flight.
    pub(super) fn stop(&self, guest: &str) {
        self.refs.stop(guest);
        self.reads.lock().unwrap().remove(guest);
    }

    /// Fetches the module `from` names and offers it as `guest`'s, with `settings`.
    fn run(
        &self,
        guest: &str,
        source: Source,
        from: From,
        settings: Settings,
        account: crate::guest::identity::ServiceAccount,
        pull_secret: Option<String>,
    ) {
        let with_module = |module: String| with_module(&source, module);
        let min_interval = Duration::from_millis(self.policy.min_reload_interval_ms);
        match from {
            From::Spec(Module::Image { reference, .. }) => {
                self.reads.lock().unwrap().remove(guest);
                let Ok(parsed) = reference.parse::<ModuleRef>() else {
                    return; // `decide` refused it already.
                };
                self.refs.follow(
                    &self.supervisor,
                    &self.policy,
                    Followed {
                        name: guest.to_string(),
                        source: with_module(format!(
                            "oci://{}/{}",
                            parsed.registry(),
                            parsed.repository()
                        )),
                        settings,
                        account,
                        what: "spec.module.image".into(),
                        reference,
                        pull_secret,
                    },
                );
            }
            From::Spec(Module::ConfigMap { name, key }) => {
                self.refs.stop(guest);
                let source = with_module(format!("configmap/{name}/{key}"));
                self.read_configmap(
                    guest,
                    source,
                    settings,
                    account,
                    &name,
                    &key,
                    None,
                    min_interval,
                );
            }
            From::Revision {
                number,
                module,
                digest,
            } => {
                let pinned = Pinned {
                    number,
                    module,
                    digest,
                };
                self.run_revision(guest, source, pinned, settings, account, pull_secret);
            }
        }
    }

    /// Offers the module of a pinned revision: from the registry client's cache when this
    /// process pulled it before, else pulled again by its manifest digest, or read again from
    /// its ConfigMap if it is still there.
    fn run_revision(
        &self,
        guest: &str,
        source: Source,
        pinned: Pinned,
        settings: Settings,
        account: crate::guest::identity::ServiceAccount,
        pull_secret: Option<String>,
    ) {
        let Pinned {
            number,
            module,
            digest,
        } = pinned;
        let with_module = |module: String| with_module(&source, module);
        let min_interval = Duration::from_millis(self.policy.min_reload_interval_ms);
        if let Some(image) = module.strip_prefix("oci://") {
            let Ok(parsed) = image.parse::<ModuleRef>() else {
                self.stop(guest);
                let message = format!(
                    "revision {number} records module {module:?}, which is not an OCI reference; pick another revision"
                );
                self.supervisor.offer(
                    guest,
                    refused(with_module(module.clone()), settings, message),
                );
                return;
            };
            if let Some(bytes) =
                self.registry
                    .cached(parsed.registry(), parsed.repository(), &digest)
            {
                // The host pulled this very module for this Reconciler before.
                self.stop(guest);
                self.supervisor.offer(
                    guest,
                    Offer::Load {
                        source: with_module(module.clone()),
                        settings,
                        read: Box::new(move || Ok((bytes.to_vec(), Some(digest)))),
                        min_interval,
                    },
                );
                return;
            }
            self.reads.lock().unwrap().remove(guest);
            self.refs.follow(
                &self.supervisor,
                &self.policy,
                Followed {
                    name: guest.to_string(),
                    source: with_module(format!(
                        "oci://{}/{}",
                        parsed.registry(),
                        parsed.repository()
                    )),
                    settings,
                    account,
                    what: format!("revision {number}'s module"),
                    reference: image.to_string(),
                    pull_secret,
                },
            );
        } else if let Some((name, key)) = module
            .strip_prefix("configmap/")
            .and_then(|m| m.split_once('/'))
        {
            self.refs.stop(guest);
            let source = with_module(module.clone());
            let pinned = Some((number, digest));
            self.read_configmap(
                guest,
                source,
                settings,
                account,
                name,
                key,
                pinned,
                min_interval,
            );
        } else {
            self.stop(guest);
            let message = format!(
                "revision {number} records module {module:?}, which this host cannot read; pick another revision"
            );
            self.supervisor
                .offer(guest, refused(source, settings, message));
        }
    }

    /// Reads key `key` of ConfigMap `name` as `account` and offers it; with `pinned`, only if
    /// it still holds that revision's module.
    #[expect(
        clippy::too_many_arguments,
        reason = "the guest, what it runs as, and where its module is: each a plain value"
    )]
    fn read_configmap(
        &self,
        guest: &str,
        source: Source,
        settings: Settings,
        account: crate::guest::identity::ServiceAccount,
        name: &str,
        key: &str,
        pinned: Option<(u64, String)>,
        min_interval: Duration,
    ) {
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reads
            .lock()
            .unwrap()
            .insert(guest.to_string(), generation);
        let (sup, reads, guest, name, key) = (
            Arc::downgrade(&self.supervisor),
            Arc::downgrade(&self.reads),
            guest.to_string(),
            name.to_string(),
            key.to_string(),
        );
        let max = self.policy.max_module_bytes;
        tokio::spawn(async move {
            let Some(supervisor) = sup.upgrade() else {
                return;
            };
            let outcome = match supervisor.identities().client(Some(&account)) {
                Ok(client) => module::fetch(client, &account, &name, &key, max).await,
                Err(e) => Err(module::Error::Identity {
                    account: account.clone(),
                    namespace: account.namespace.clone(),
                    name: name.clone(),
                    reason: e.to_string(),
                }),
            };
            let Some(reads) = reads.upgrade() else { return };
            // Under the lock `stop` takes: a read it stopped offers nothing.
            let reads = reads.lock().unwrap();
            if reads.get(&guest) != Some(&generation) {
                return;
            }
            let offer = match (outcome, pinned) {
                (Err(e), _) => refused(source, settings, e.to_string()),
                (Ok(read), None) => Offer::Load {
                    source,
                    settings,
                    read,
                    min_interval,
                },
                (Ok(read), Some((number, want))) => Offer::Load {
                    source,
                    settings,
                    read: Box::new(move || {
                        let (bytes, _) = read()?;
                        let got = crate::guest::digest_of(&bytes);
                        if got != want {
                            return Err(crate::supervisor::Unreadable {
                                message: format!(
                                    "revision {number}'s module (sha256 {want}) is no longer in ConfigMap {name} key {key:?}, which now holds sha256 {got}; put it back, or pin another revision"
                                ),
                                digest: got,
                            });
                        }
                        Ok((bytes, Some(want)))
                    }),
                    min_interval,
                },
            };
            supervisor.offer(&guest, offer);
        });
    }
}
