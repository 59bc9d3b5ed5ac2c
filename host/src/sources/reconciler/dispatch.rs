//! Handing the supervisor what a judged Reconciler asks for: nothing (refused, said once), an
//! unload (suspended), or its module, followed in a registry, read from a ConfigMap key as the
//! ServiceAccount, or taken from a pinned revision.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::module;
use super::spec::{self, From, Module, Reconciler, Refusal, Wanted};
use super::table::{Submitted, Table, Tracked};
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

/// What every fetch of a guest's module needs: whose it is, and how and as whom it runs.
struct Job {
    guest: String,
    source: Source,
    settings: Settings,
    account: crate::guest::identity::ServiceAccount,
    /// The pull secret `spec.module.pullSecret` names, for an image.
    pull_secret: Option<String>,
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
            configmap: None,
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
            Err(refusal) => self.refused(t, r, &source, refusal),
            Ok(Wanted::Suspended) => {
                t.verdict = Ok(Vec::new());
                t.said = None;
                t.suspended = true;
                if t.submitted != Some(Submitted::Suspended) {
                    t.submitted = Some(Submitted::Suspended);
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
                let pull_secret = match &r.spec {
                    Ok(spec::Spec {
                        module: Module::Image { pull_secret, .. },
                        ..
                    }) => pull_secret.clone(),
                    _ => None,
                };
                let asked = Submitted::Run {
                    from: from.clone(),
                    settings: settings.clone(),
                    pull_secret: pull_secret.clone(),
                };
                let settled = self.supervisor.offers_settled(&[guest.clone()].into());
                if !force && settled && t.submitted.as_ref() == Some(&asked) {
                    return;
                }
                t.submitted = Some(asked);
                drop(table);
                let job = Job {
                    guest,
                    source,
                    settings: *settings,
                    account,
                    pull_secret,
                };
                self.run(job, from);
            }
        }
    }

    /// Records that `r`'s spec is refused: what serves stays, its fetch stops (so a refused
    /// edit cannot load a newer module of the spec it replaced), and the refusal is said once per
    /// message, on the Reconciler and, for a clash of names, on the ConfigMap too.
    fn refused(&self, t: &mut Tracked, r: &Reconciler, source: &Source, refusal: Refusal) {
        let guest = r.guest();
        t.suspended = false;
        if t.submitted.take().is_some() {
            self.stop(&guest);
        }
        if t.said.as_deref() != Some(&refusal.message) {
            t.said = Some(refusal.message.clone());
            tracing::warn!(reconciler = %guest, reason = refusal.reason, "Reconciler refused: {}", refusal.message);
            self.supervisor.event(
                &guest,
                source,
                Type::Warning,
                refusal.reason,
                format!("Reconciler {guest} not accepted: {}", refusal.message),
            );
            // Both sides hear of a clash of names: the ConfigMap's guests serve on.
            if refusal.reason == "NameTaken"
                && let Some(cm) = self.labelled.get(&guest)
            {
                let on = Source::ConfigMap {
                    namespace: r.namespace.clone(),
                    name: cm.name().to_string(),
                    key: String::new(),
                    uid: cm.uid().to_string(),
                };
                let message = format!(
                    "Reconciler {guest} was refused because this labelled ConfigMap already delivers reconcilers under its name; this ConfigMap's guests serve on"
                );
                self.supervisor
                    .event(&guest, &on, Type::Warning, refusal.reason, message);
            }
        }
        t.verdict = Err(refusal);
    }

    /// Stops whatever fetches `guest`'s module: a registry watch, a ConfigMap read in flight.
    pub(super) fn stop(&self, guest: &str) {
        self.refs.stop(guest);
        self.reads.lock().unwrap().remove(guest);
    }

    /// Fetches the module `from` names and offers it for `job`.
    fn run(&self, job: Job, from: From) {
        match from {
            From::Spec(Module::Image { reference, .. }) => {
                let Ok(parsed) = reference.parse::<ModuleRef>() else {
                    return; // `decide` refused it already.
                };
                self.follow(job, &parsed, reference, "spec.module.image".into());
            }
            From::Spec(Module::ConfigMap { name, key }) => {
                let job = Job {
                    source: with_module(&job.source, format!("configmap/{name}/{key}")),
                    ..job
                };
                self.read_configmap(job, &name, &key, None);
            }
            From::Revision {
                number,
                module,
                digest,
            } => self.run_revision(job, number, module, digest),
        }
    }

    /// Offers the module of pinned revision `number`: from the registry client's cache when
    /// this process pulled it before, else pulled again by its manifest digest, or read again
    /// from its ConfigMap if it still holds it.
    fn run_revision(&self, job: Job, number: u64, module: String, digest: String) {
        if let Some(image) = module.strip_prefix("oci://") {
            let Ok(parsed) = image.parse::<ModuleRef>() else {
                let message = format!(
                    "revision {number} records module {module:?}, which is not an OCI reference; pick another revision"
                );
                return self.refuse(job, message);
            };
            match self
                .registry
                .cached(parsed.registry(), parsed.repository(), &digest)
            {
                // The host pulled this very module for this Reconciler before.
                Some(bytes) => {
                    self.stop(&job.guest);
                    let offer = Offer::Load {
                        source: with_module(&job.source, module.clone()),
                        settings: job.settings,
                        read: Box::new(move || Ok((bytes.to_vec(), Some(digest)))),
                        min_interval: self.min_interval(),
                    };
                    self.supervisor.offer(&job.guest, offer);
                }
                None => self.follow(
                    job,
                    &parsed,
                    image.to_string(),
                    format!("revision {number}'s module"),
                ),
            }
        } else if let Some((name, key)) = spec::configmap_key(&module) {
            let job = Job {
                source: with_module(&job.source, module.clone()),
                ..job
            };
            self.read_configmap(job, name, key, Some((number, digest)));
        } else {
            let message = format!(
                "revision {number} records module {module:?}, which this host cannot read; pick another revision"
            );
            self.refuse(job, message);
        }
    }

    /// Refuses `job` with `message`: nothing fetches its module any more, and what serves stays.
    fn refuse(&self, job: Job, message: String) {
        self.stop(&job.guest);
        self.supervisor
            .offer(&job.guest, refused(job.source, job.settings, message));
    }

    fn min_interval(&self) -> Duration {
        Duration::from_millis(self.policy.min_reload_interval_ms)
    }

    /// Follows `reference` (`parsed`, written at `what`) in its registry for `job`; its offers
    /// name the manifest each pull resolved to.
    fn follow(&self, job: Job, parsed: &ModuleRef, reference: String, what: String) {
        self.reads.lock().unwrap().remove(&job.guest);
        let module = format!("oci://{}/{}", parsed.registry(), parsed.repository());
        self.refs.follow(
            &self.supervisor,
            &self.policy,
            Followed {
                source: with_module(&job.source, module),
                name: job.guest,
                settings: job.settings,
                account: job.account,
                what,
                reference,
                pull_secret: job.pull_secret,
            },
        );
    }

    /// Reads key `key` of ConfigMap `name` as `job`'s ServiceAccount and offers it; with
    /// `pinned` (a revision's number and digest), only if it still holds that module.
    fn read_configmap(&self, job: Job, name: &str, key: &str, pinned: Option<(u64, String)>) {
        self.refs.stop(&job.guest);
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reads
            .lock()
            .unwrap()
            .insert(job.guest.clone(), generation);
        let (sup, reads, name, key) = (
            Arc::downgrade(&self.supervisor),
            Arc::downgrade(&self.reads),
            name.to_string(),
            key.to_string(),
        );
        let (max, min_interval) = (self.policy.max_module_bytes, self.min_interval());
        tokio::spawn(async move {
            let Some(supervisor) = sup.upgrade() else {
                return;
            };
            let Job {
                guest,
                source,
                settings,
                account,
                ..
            } = job;
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
