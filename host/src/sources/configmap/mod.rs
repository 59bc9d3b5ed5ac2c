//! Guests delivered in ConfigMaps: a tenant runs
//!
//! ```sh
//! kubectl create configmap my-rec -n team-a --from-file=rec.wasm=target/.../rec.wasm
//! kubectl label configmap my-rec -n team-a reconciled.dev/reconciler=true
//! ```
//!
//! and guest `team-a/my-rec/rec` loads. Every `binaryData` key ending in `.wasm` (or `.wasm.gz`,
//! gzipped) is one guest named `<namespace>/<configmap>/<key without the extension>`. Editing
//! the ConfigMap reloads the guests whose bytes changed; removing a key, the label or the
//! ConfigMap unloads them.
//!
//! A module too large for a ConfigMap (a TypeScript or Python component is 11–19 MB) is named
//! by reference instead: a `data` key `rec.wasm.ref` holding `registry/repo:tag@sha256:…` (see
//! `references`). Changing the reference reloads the guest; a tag alone is
//! followed as it moves.
//!
//! The ConfigMap's namespace is the guest's tenant namespace: its grant is the
//! [`TenantPolicy`]'s, confined to that namespace. A module that declares anything beyond it is
//! rejected, with an Event on the ConfigMap saying why.
//!
//! Where it may surprise:
//! - **Size.** The API server refuses a ConfigMap over 1 MiB (1,048,576 bytes, all keys
//!   together; `binaryData` counts decoded bytes). Gzip the module (`gzip -9 -k rec.wasm`, key
//!   `rec.wasm.gz`): Rust components typically shrink 2.5–3×. `reconciled pack` builds the
//!   ConfigMap and says clearly when a module cannot fit even gzipped. A `.wasm.gz` larger than
//!   [`TenantPolicy::max_module_bytes`] once unpacked is rejected unread (a gzip bomb).
//! - The ConfigMaps are read through the host's own informer (label-selected, so other
//!   ConfigMaps are never cached). Each guest loads in a task of its own, so one tenant's large
//!   module does not delay another's; edits arriving during a load collapse into one more
//!   load, and at most two modules compile at once (the supervisor's limit).
//! - A tenant's first load must sync every informer it declares, or it is rejected: a guest
//!   that could serve nothing never runs, and never holds the host's `/readyz` down.
//! - Two keys naming one guest (`rec.wasm` and `rec.wasm.gz`) are rejected together; a
//!   labelled ConfigMap with no module key gets a `NoModule` Warning Event.
//! - An edit that leaves `binaryData` as it was (a label, an annotation, `data`) and a resync
//!   cost one comparison of the text, once every guest of the ConfigMap has loaded from it: the
//!   modules are not decoded, unpacked or hashed again. Until then (a load in flight, a
//!   rejection that may pass next time, a guest waiting for a seat) the same bytes are
//!   offered again on the ConfigMap's next event or resync, which is how such a load is
//!   retried. A guest refused because its ServiceAccount may not read what it declares is
//!   offered again when a Role or RoleBinding of its namespace changes.
//! - **Quota.** [`TenantPolicy::max_guests_per_namespace`] counts the guests of a namespace
//!   that serve or are loading, over all its ConfigMaps; the supervisor keeps the count (see
//!   [`TenantLimits`]). A guest refused for it is rejected (Event, log, `/status`) and loads by
//!   itself once a seat frees up, in name order; a new version of a serving guest never waits.

pub mod format;
mod policy;
pub(crate) mod references;

pub use format::{CONFIGMAP_LIMIT, LABEL, pack};
use policy::BadAccount;
pub use policy::TenantPolicy;
pub use references::PULL_SECRET;

use format::{Modules, SETTINGS_SUFFIX, modules_of, unpack, with_guest_settings};
use references::{Refs, TenantRefs};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::guest::identity::{ANNOTATION, ServiceAccount};
use crate::informer::factory::InformerFactory;
use crate::informer::{Event, InformerKey, Namespaces, Scope};
use crate::object::ObjectRef;
use crate::selector::LabelSelector;
use crate::sources::oci::Registry;
use crate::sources::offer::refused;
use crate::supervisor::{Offer, Source, Supervisor, TenantLimits, Unreadable};

/// Why the source could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The informer could not be set up.
    #[error("cannot watch module ConfigMaps: {0}")]
    Subscribe(String),
}

/// Watches labelled ConfigMaps and feeds their modules to the supervisor. Dropping it stops
/// watching; guests already loaded keep running.
#[derive(Debug)]
pub struct ConfigMapSource {
    task: AbortHandle,
}

impl Drop for ConfigMapSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ConfigMapSource {
    /// Starts watching, pulling `.wasm.ref` modules with a registry client of default
    /// settings. Must be called inside a tokio runtime.
    pub fn start(
        factory: &InformerFactory,
        supervisor: Arc<Supervisor>,
        policy: TenantPolicy,
    ) -> Result<Self, Error> {
        Self::start_with(factory, supervisor, policy, Arc::new(Registry::default()))
    }

    /// [`ConfigMapSource::start`], pulling with `registry`.
    pub fn start_with(
        factory: &InformerFactory,
        supervisor: Arc<Supervisor>,
        policy: TenantPolicy,
        registry: Arc<Registry>,
    ) -> Result<Self, Error> {
        let scope = Scope {
            namespaces: match &policy.namespaces {
                Some(set) => Namespaces::Only(set.clone()),
                None => Namespaces::All,
            },
            labels: LabelSelector::parse(&format!("{LABEL}=true"))
                .map_err(|e| Error::Subscribe(e.to_string()))?,
            ..Scope::default()
        };
        let sub = factory
            .subscribe(InformerKey::new("", "v1", "ConfigMap", scope), &[])
            .map_err(|e| Error::Subscribe(e.to_string()))?;
        supervisor.set_tenant_limits(TenantLimits {
            max_guests_per_namespace: Some(policy.max_guests_per_namespace),
            max_cached_bytes_per_namespace: policy.max_cached_bytes_per_namespace,
        });
        let task = tokio::spawn(run(sub, supervisor, policy, registry)).abort_handle();
        Ok(Self { task })
    }
}

async fn run(
    mut sub: crate::informer::Subscription,
    supervisor: Arc<Supervisor>,
    policy: TenantPolicy,
    registry: Arc<Registry>,
) {
    let informer = sub.informer().clone();
    let dispatch = Dispatch {
        supervisor: supervisor.clone(),
        policy,
        refs: TenantRefs::new(registry),
    };
    let mut seen = Seen::default();
    let mut access_changes = supervisor.access_changes();
    loop {
        let n = tokio::select! {
            n = sub.recv() => match n {
                Some(n) => n,
                None => return,
            },
            ns = access_changes.recv() => {
                let only = match ns {
                    Ok(ns) if !ns.is_empty() => Some(ns),
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                    // The supervisor is gone; so is every reason to go on.
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                // A guest refused for access may load now. Offered again only if not settled:
                // the others cost a comparison.
                for o in informer.store().all() {
                    if only.as_deref().is_none_or(|ns| o.namespace() == Some(ns)) {
                        sync(&dispatch, &mut seen, &o).await;
                    }
                }
                continue;
            }
        };
        match n.event {
            Event::Added(o) => {
                sync(&dispatch, &mut seen, &o).await;
            }
            Event::Updated { new, .. } => {
                sync(&dispatch, &mut seen, &new).await;
            }
            Event::Deleted { last_known, .. } => {
                let id = id_of(&last_known);
                seen.synced.remove(&id);
                seen.warned.remove(&id);
                supervisor.set_source_problem(&source_id(&id), None);
                for name in seen.owned.remove(&id).unwrap_or_default() {
                    dispatch.submit(name, Offer::Remove);
                }
            }
            Event::Resync => {
                // Events were dropped: make the guests match the cache as it is now.
                let all = informer.store().all();
                for o in &all {
                    sync(&dispatch, &mut seen, o).await;
                }
                let live: BTreeSet<(String, String)> = all.iter().map(id_of).collect();
                let Seen {
                    owned,
                    synced,
                    warned,
                } = &mut seen;
                for (ns, cm) in owned.keys().filter(|id| !live.contains(*id)) {
                    supervisor.set_source_problem(&source_id(&(ns.clone(), cm.clone())), None);
                }
                synced.retain(|id, _| live.contains(id));
                warned.retain(|id, _| live.contains(id));
                owned.retain(|id, names| {
                    if live.contains(id) {
                        return true;
                    }
                    for name in std::mem::take(names) {
                        dispatch.submit(name, Offer::Remove);
                    }
                    false
                });
            }
        }
    }
}

/// What the loop knows of the ConfigMaps it has synced. Kept here rather than read back from the
/// supervisor, whose view lags behind loads still in flight.
#[derive(Default)]
struct Seen {
    /// Which guests each ConfigMap delivers, as this loop last saw it.
    owned: HashMap<(String, String), BTreeSet<String>>,
    /// Labelled ConfigMaps warned about for delivering no module, with the resourceVersion
    /// warned about: one warning per version, and one entry per ConfigMap.
    warned: HashMap<(String, String), String>,
    /// Each ConfigMap that delivers guests, as last synced: what the next event's `binaryData`
    /// is compared with.
    synced: HashMap<(String, String), ObjectRef>,
}

/// How `/status` names a ConfigMap that delivers no guest.
fn source_id((namespace, name): &(String, String)) -> String {
    format!("configmap {namespace}/{name}")
}

fn id_of(o: &ObjectRef) -> (String, String) {
    (
        o.namespace().unwrap_or("").to_string(),
        o.name().to_string(),
    )
}

/// Hands the supervisor what the tenants' ConfigMaps ask for, under the tenant policy.
struct Dispatch {
    supervisor: Arc<Supervisor>,
    policy: TenantPolicy,
    refs: TenantRefs,
}

impl Dispatch {
    /// Offers what a ConfigMap's bytes ask for `name`, or removes it; either way a watch of a
    /// reference it was named by before ends.
    fn submit(&self, name: String, offer: Offer) {
        self.refs.stop(&name);
        self.supervisor.offer(&name, offer);
    }

    /// Whether every guest in `names` (at least one) settled from the bytes last submitted.
    fn all_settled(&self, names: &BTreeSet<String>) -> bool {
        self.supervisor.offers_settled(names)
    }
}

/// What a ConfigMap's content asks of the supervisor, guest by guest, under `policy`: a load
/// per module key in name order, unpacked in the guest's own task, and a refusal for keys
/// naming one guest twice. Also returns every guest it names.
///
/// The namespace's quota is not counted here: the supervisor counts guests that serve or
/// load, which this source cannot see.
fn offers_for(
    modules: Modules,
    namespace: &str,
    cm: &str,
    policy: &TenantPolicy,
    account: &Result<ServiceAccount, BadAccount>,
) -> (Vec<(String, Offer)>, BTreeSet<String>) {
    let settings = |name: &str| match account {
        Ok(a) => policy.settings_as(name, namespace, a.clone()),
        Err(_) => policy.settings(name, namespace),
    };
    let source = |key: &str| Source::ConfigMap {
        namespace: namespace.to_string(),
        name: cm.to_string(),
        key: key.to_string(),
        uid: modules.uid.clone(),
    };
    let refused = |name: &str, key: &str, message: String| Offer::Unreadable {
        source: source(key),
        settings: settings(name),
        unreadable: Unreadable {
            digest: crate::guest::digest_of(message.as_bytes()),
            message,
        },
    };
    let mut offers = Vec::new();
    let mut wanted = BTreeSet::new();
    for (stem, keys) in &modules.duplicates {
        let name = format!("{namespace}/{cm}/{stem}");
        wanted.insert(name.clone());
        let message = format!(
            "keys {keys:?} all name guest {name}; keep one of them (a .wasm, a .wasm.gz or a .wasm.ref)"
        );
        offers.push((name.clone(), refused(&name, &keys[0], message)));
    }
    for m in modules.modules {
        let name = format!("{namespace}/{cm}/{}", m.stem);
        wanted.insert(name.clone());
        if let Err(bad) = account {
            offers.push((name.clone(), refused(&name, &m.key, bad.to_string())));
            continue;
        }
        let settings = match with_guest_settings(settings(&name), m.settings.as_ref()) {
            Ok(s) => s,
            Err(message) => {
                offers.push((name.clone(), refused(&name, &m.key, message)));
                continue;
            }
        };
        let (key, packed, max) = (m.key.clone(), m.bytes, policy.max_module_bytes);
        offers.push((
            name.clone(),
            Offer::Load {
                source: source(&m.key),
                settings,
                read: Box::new(move || {
                    unpack(&key, packed, max)
                        .map(|bytes| (bytes, None))
                        .map_err(|e| Unreadable {
                            message: e.to_string(),
                            digest: e.digest,
                        })
                }),
                min_interval: Duration::from_millis(policy.min_reload_interval_ms),
            },
        ));
    }
    (offers, wanted)
}

/// Submits every module key of `o`, and removals for guests of keys it no longer has; returns
/// how many guests it submitted a desired state for.
///
/// Nothing at all, at the cost of comparing `binaryData` as text, when `o` holds the module
/// bytes it held when last synced and every guest it delivers has settled from them: a label or
/// annotation edit, or a resync, must not decode, unpack and hash every module again.
#[expect(
    clippy::too_many_lines,
    reason = "the unchanged-ConfigMap shortcut, the decode, the offers and the removals share what was seen of the ConfigMap; each part is a few lines"
)]
async fn sync(dispatch: &Dispatch, seen: &mut Seen, o: &ObjectRef) -> usize {
    let id = id_of(o);
    if let Some(previous) = seen.synced.get(&id)
        && seen
            .owned
            .get(&id)
            .is_some_and(|names| dispatch.all_settled(names))
    {
        // A resync hands over the very object; an edit, a new one to compare, off the async
        // runtime like the decoding it saves (up to 1 MiB of text each).
        let same = Arc::ptr_eq(previous, o) || {
            let (previous, o) = (previous.clone(), o.clone());
            tokio::task::spawn_blocking(move || same_modules(&previous, &o))
                .await
                .unwrap_or(false)
        };
        if same {
            seen.synced.insert(id, o.clone());
            return 0;
        }
    }
    let Seen {
        owned,
        warned,
        synced,
    } = seen;
    let (namespace, cm) = id.clone();
    let object = o.clone();
    let parsed = tokio::task::spawn_blocking(move || modules_of(object.json())).await;
    let mut modules = match parsed {
        Ok(Ok(m)) => m,
        Err(e) => {
            tracing::warn!(configmap = %format!("{namespace}/{cm}"), "reading the ConfigMap's modules failed: {e}");
            return 0;
        }
        Ok(Err(e)) => {
            tracing::warn!(configmap = %format!("{namespace}/{cm}"), "ignoring an unparseable ConfigMap: {e}");
            return 0;
        }
    };
    let source = |key: &str| Source::ConfigMap {
        namespace: namespace.clone(),
        name: cm.clone(),
        key: key.to_string(),
        uid: modules.uid.clone(),
    };
    let named = std::mem::take(&mut modules.refs);
    let submitting = modules.modules.len() + modules.duplicates.len() + named.len();
    let nothing_to_load = submitting == 0;
    if !nothing_to_load {
        dispatch
            .supervisor
            .set_source_problem(&source_id(&id), None);
    }
    if nothing_to_load {
        // Labelled, yet nothing to load: say so on the object, once per version of it.
        let rv = o.resource_version();
        if warned.get(&id).map(String::as_str) != Some(rv) {
            warned.insert(id.clone(), rv.to_string());
            let hint = if modules.text_wasm_keys.is_empty() {
                "it has no binaryData key ending in .wasm or .wasm.gz, and no data key ending in .wasm.ref".to_string()
            } else {
                format!(
                    "its module keys {:?} are under data, not binaryData; create it with kubectl create configmap --from-file=rec.wasm=<file>, which stores binary files in binaryData",
                    modules.text_wasm_keys
                )
            };
            let message =
                format!("this ConfigMap is labelled {LABEL}=true but delivers no module: {hint}");
            tracing::warn!(configmap = %format!("{namespace}/{cm}"), "{message}");
            dispatch
                .supervisor
                .set_source_problem(&source_id(&id), Some(message.clone()));
            dispatch.supervisor.event(
                &source_id(&id),
                &source(""),
                crate::events::Type::Warning,
                "NoModule",
                message,
            );
        }
    }
    let account = account_of(o, &namespace, &dispatch.policy);
    let uid = modules.uid.clone();
    let (offers, mut wanted) = offers_for(modules, &namespace, &cm, &dispatch.policy, &account);
    for (name, offer) in offers {
        let offer = match dispatch.refs.requires_signatures() {
            true => unsigned(offer),
            false => offer,
        };
        dispatch.submit(name, offer);
    }
    let refs = Refs {
        namespace: &namespace,
        configmap: &cm,
        uid: &uid,
        named,
        account: &account,
        pull_secret: annotation(o, PULL_SECRET),
    };
    wanted.extend(
        dispatch
            .refs
            .sync(&dispatch.supervisor, &dispatch.policy, refs),
    );
    // Each module key and each set of duplicates was submitted once, loaded or refused.
    let mut submitted = submitting;
    if wanted.is_empty() {
        synced.remove(&id);
    } else {
        synced.insert(id.clone(), o.clone());
    }
    let before = owned.insert(id, wanted.clone()).unwrap_or_default();
    for gone in before.difference(&wanted) {
        dispatch.submit(gone.clone(), Offer::Remove);
        submitted += 1;
    }
    submitted
}

/// `offer` refused if it would load an inline module: with `[registry] verify_key` every
/// module must be signed, and only a registry can hold a signature.
fn unsigned(offer: Offer) -> Offer {
    match offer {
        Offer::Load {
            source, settings, ..
        } => {
            let message = format!(
                "this host runs only signed modules ([registry] verify_key), and a module inside a ConfigMap cannot carry a signature: push it to a registry signed (`reconciled push --sign-key`, or cosign) and name it in a .wasm.ref key instead of {source}"
            );
            refused(source, settings, message)
        }
        other => other,
    }
}

/// The `reconciled.dev/service-account` annotation of a ConfigMap, if it has one.
///
/// Where it may surprise: JSON the borrowing parse cannot read (an escaped character) counts as
/// no annotation here and as changed modules in [`same_modules`], so it is read again: the
/// value then comes from the full parse in [`account_of`].
fn annotated_account(o: &ObjectRef) -> Option<String> {
    annotation(o, ANNOTATION)
}

/// Annotation `key` of a ConfigMap, if it has it; see [`annotated_account`].
fn annotation(o: &ObjectRef, key: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Cm {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(Default, serde::Deserialize)]
    struct Meta {
        #[serde(default)]
        annotations: BTreeMap<String, String>,
    }
    serde_json::from_slice::<Cm>(o.json())
        .ok()
        .and_then(|mut cm| cm.metadata.annotations.remove(key))
}

/// The ServiceAccount the guests of `o` (in `namespace`) act as: the one its annotation names,
/// or the policy's. A bad annotation is the message every module key of `o` is refused with.
fn account_of(
    o: &ObjectRef,
    namespace: &str,
    policy: &TenantPolicy,
) -> Result<ServiceAccount, BadAccount> {
    let name = annotated_account(o).unwrap_or_else(|| policy.service_account.clone());
    ServiceAccount::new(namespace, &name).map_err(|source| BadAccount {
        namespace: namespace.to_string(),
        default: policy.service_account.clone(),
        source,
    })
}

/// Whether `new` delivers the modules `old` did, as the same identity: the same object (uid)
/// with the same `binaryData` and `.wasm.ref` keys of `data`, compared as text, without
/// decoding, and the same ServiceAccount and pull-secret annotations.
///
/// Where it may surprise: JSON that cannot be borrowed as it stands (an escaped character in a
/// key or in `binaryData`, which base64 never holds) counts as changed, so the modules are read
/// again: slower, never wrong.
fn same_modules(old: &ObjectRef, new: &ObjectRef) -> bool {
    #[derive(serde::Deserialize)]
    struct Cm<'a> {
        #[serde(default, borrow, rename = "binaryData")]
        binary_data: BTreeMap<&'a str, &'a str>,
        // Text, which may hold escapes a plain borrow cannot take.
        #[serde(default, borrow)]
        data: BTreeMap<&'a str, std::borrow::Cow<'a, str>>,
    }
    type Modules<'a> = (
        BTreeMap<&'a str, &'a str>,
        Vec<(&'a str, std::borrow::Cow<'a, str>)>,
    );
    fn contents(o: &ObjectRef) -> Option<Modules<'_>> {
        let cm = serde_json::from_slice::<Cm<'_>>(o.json()).ok()?;
        let refs = cm
            .data
            .into_iter()
            .filter(|(k, _)| k.ends_with(".wasm.ref") || k.ends_with(SETTINGS_SUFFIX))
            .collect();
        Some((cm.binary_data, refs))
    }
    old.uid() == new.uid()
        && annotated_account(old) == annotated_account(new)
        && annotation(old, PULL_SECRET) == annotation(new, PULL_SECRET)
        && match (contents(old), contents(new)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Object, Transform};
    use base64::Engine as _;
    use std::time::Instant;

    fn configmap(uid: &str, rv: &str, team: &str, module: &[u8]) -> ObjectRef {
        let b64 = base64::engine::general_purpose::STANDARD.encode(module);
        Arc::new(
            Object::from_value(
                serde_json::json!({
                    "metadata": {
                        "name": "my-rec", "namespace": "team-a", "uid": uid, "resourceVersion": rv,
                        "labels": {LABEL: "true", "team": team},
                    },
                    "binaryData": {"rec.wasm": b64},
                }),
                &Transform::none(),
                None,
            )
            .unwrap(),
        )
    }

    #[test]
    fn only_the_module_bytes_and_the_object_count_as_a_change_of_modules() {
        let v1 = configmap("u-1", "1", "x", b"module");
        assert!(
            same_modules(&v1, &configmap("u-1", "2", "y", b"module")),
            "a label edit"
        );
        assert!(
            !same_modules(&v1, &configmap("u-1", "3", "x", b"other")),
            "new bytes"
        );
        assert!(
            !same_modules(&v1, &configmap("u-2", "4", "x", b"module")),
            "deleted and created again under the same name"
        );
    }

    /// A dispatcher whose supervisor has no API server behind it (and posts no Events): enough
    /// for modules that never get as far as an informer.
    fn offline_dispatch() -> Dispatch {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let identities = crate::guest::identity::Identities::new(config).unwrap();
        let factory = Arc::new(InformerFactory::new(
            identities.host().clone(),
            crate::informer::Options::default(),
        ));
        let supervisor = Supervisor::new(
            crate::guest::Runtime::new().unwrap(),
            factory,
            identities,
            crate::supervisor::Options {
                events: false,
                ..crate::supervisor::Options::default()
            },
        );
        Dispatch {
            supervisor: Arc::new(supervisor),
            policy: TenantPolicy {
                min_reload_interval_ms: 0,
                ..TenantPolicy::default()
            },
            refs: TenantRefs::new(Arc::new(Registry::default())),
        }
    }

    /// Waits until no guest has a load running or pending.
    async fn idle(dispatch: &Dispatch) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dispatch.supervisor.offers_idle() {
            assert!(Instant::now() < deadline, "a load is still running");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_label_only_edit_or_a_resync_does_not_resubmit_a_settled_module() {
        let dispatch = offline_dispatch();
        let mut seen = Seen::default();
        let v1 = configmap("u-1", "1", "x", b"not a component");
        assert_eq!(sync(&dispatch, &mut seen, &v1).await, 1);
        idle(&dispatch).await;
        // Refused (not a component), which this source does not take as settled: a rejection
        // may be one that passes next time, and offering the bytes again is the retry.
        let relabelled = configmap("u-1", "2", "y", b"not a component");
        assert_eq!(sync(&dispatch, &mut seen, &relabelled).await, 1);
        idle(&dispatch).await;
        // The supervisor had these bytes already (a lasting rejection): settled.
        let again = configmap("u-1", "3", "z", b"not a component");
        assert_eq!(
            sync(&dispatch, &mut seen, &again).await,
            0,
            "a label-only edit"
        );
        assert_eq!(sync(&dispatch, &mut seen, &again).await, 0, "a resync");
        let edited = configmap("u-1", "4", "z", b"another module");
        assert_eq!(sync(&dispatch, &mut seen, &edited).await, 1, "new bytes");
        // Until that load settles (in flight, or refused), the same bytes are offered again.
        assert_eq!(sync(&dispatch, &mut seen, &edited).await, 1);
        idle(&dispatch).await;
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b).unwrap();
        gz.finish().unwrap()
    }

    fn modules(binary: serde_json::Value) -> Modules {
        let json = serde_json::json!({"metadata": {"uid": "u-1"}, "binaryData": binary});
        modules_of(json.to_string().as_bytes()).unwrap()
    }

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    #[test]
    fn each_module_key_is_a_load_of_its_guest_unpacked_in_the_guests_own_task() {
        let m = modules(serde_json::json!({"rec.wasm.gz": b64(&gzip(b"module"))}));
        let (offers, wanted) = offers_for(
            m,
            "team-a",
            "cm",
            &TenantPolicy::default(),
            &guest_account(),
        );
        assert_eq!(wanted, ["team-a/cm/rec".to_string()].into());
        let [
            (
                name,
                Offer::Load {
                    source,
                    read,
                    min_interval,
                    ..
                },
            ),
        ] = <[_; 1]>::try_from(offers).unwrap()
        else {
            panic!("not one load");
        };
        assert_eq!(name, "team-a/cm/rec");
        assert_eq!(source.to_string(), "configmap team-a/cm key rec.wasm.gz");
        assert_eq!(
            min_interval,
            Duration::from_secs(1),
            "the tenant policy's interval"
        );
        assert_eq!(
            read().unwrap(),
            (b"module".to_vec(), None),
            "unpacked when read"
        );
    }

    fn guest_account() -> Result<ServiceAccount, BadAccount> {
        Ok(ServiceAccount::parse("team-a/reconciled-guest").unwrap())
    }

    fn annotated(annotation: Option<&str>) -> ObjectRef {
        let mut meta = serde_json::json!({"name": "my-rec", "namespace": "team-a", "uid": "u-1"});
        if let Some(a) = annotation {
            meta["annotations"] = serde_json::json!({ANNOTATION: a});
        }
        Arc::new(
            Object::from_value(
                serde_json::json!({"metadata": meta, "binaryData": {"rec.wasm": "AA=="}}),
                &Transform::none(),
                None,
            )
            .unwrap(),
        )
    }

    #[test]
    fn guests_act_as_the_policys_service_account_unless_their_configmap_names_another() {
        let policy = TenantPolicy::default();
        let default = account_of(&annotated(None), "team-a", &policy).unwrap();
        assert_eq!(
            default.username(),
            "system:serviceaccount:team-a:reconciled-guest"
        );
        let renamed = TenantPolicy {
            service_account: "tenant-bot".into(),
            ..TenantPolicy::default()
        };
        assert_eq!(
            account_of(&annotated(None), "team-a", &renamed)
                .unwrap()
                .name,
            "tenant-bot"
        );
        let picked = account_of(&annotated(Some("deployer")), "team-a", &policy).unwrap();
        assert_eq!(
            picked.to_string(),
            "team-a/deployer",
            "always of the ConfigMap's namespace"
        );
        let bad = account_of(&annotated(Some("team-b:x")), "team-a", &policy)
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains(ANNOTATION) && bad.contains("DNS-1123"),
            "{bad}"
        );
        let s = policy.settings("team-a/x/rec", "team-a");
        assert_eq!(s.identity, Some(default));
    }

    #[test]
    fn a_bad_service_account_annotation_refuses_every_module_and_a_changed_one_reloads() {
        let m = modules(serde_json::json!({"a.wasm": b64(b"a")}));
        let bad = account_of(
            &annotated(Some("Team B")),
            "team-a",
            &TenantPolicy::default(),
        );
        let said = bad.as_ref().unwrap_err().to_string();
        let (offers, _) = offers_for(m, "team-a", "cm", &TenantPolicy::default(), &bad);
        assert!(
            matches!(&offers[..], [(_, Offer::Unreadable { unreadable, .. })] if unreadable.message == said)
        );
        assert!(
            !same_modules(&annotated(None), &annotated(Some("deployer"))),
            "another identity is another load, even with the same bytes"
        );
        assert!(same_modules(
            &annotated(Some("deployer")),
            &annotated(Some("deployer"))
        ));
    }

    #[test]
    fn two_keys_naming_one_guest_are_refused_naming_both() {
        let m =
            modules(serde_json::json!({"rec.wasm": b64(b"a"), "rec.wasm.gz": b64(&gzip(b"b"))}));
        let (offers, wanted) = offers_for(
            m,
            "team-a",
            "cm",
            &TenantPolicy::default(),
            &guest_account(),
        );
        assert_eq!(wanted.len(), 1);
        let [(_, Offer::Unreadable { unreadable, .. })] = <[_; 1]>::try_from(offers).unwrap()
        else {
            panic!("not one refusal");
        };
        assert!(
            unreadable.message.contains("rec.wasm") && unreadable.message.contains("rec.wasm.gz"),
            "{}",
            unreadable.message
        );
    }

    #[test]
    fn module_keys_are_found_decoded_and_named() {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let json = serde_json::json!({
            "metadata": {"uid": "u-1"},
            "data": {"README": "text"},
            "binaryData": {"rec.wasm": b64(b"one"), "Other_Rec.wasm.gz": b64(b"two"), "notes.bin": b64(b"x")},
        });
        let m = modules_of(json.to_string().as_bytes()).unwrap();
        assert_eq!(m.uid, "u-1");
        let got: Vec<(&str, &str, &[u8])> = m
            .modules
            .iter()
            .map(|p| (p.key.as_str(), p.stem.as_str(), p.bytes.as_slice()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("Other_Rec.wasm.gz", "other-rec", &b"two"[..]),
                ("rec.wasm", "rec", &b"one"[..]),
            ]
        );
    }

    #[test]
    fn two_keys_naming_one_guest_are_duplicates_and_text_modules_are_noticed() {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let json = serde_json::json!({
            "metadata": {"uid": "u"},
            "data": {"text.wasm": "oops"},
            "binaryData": {"rec.wasm": b64(b"a"), "rec.wasm.gz": b64(b"b"), "Rec.wasm": b64(b"c"), "ok.wasm": b64(b"d")},
        });
        let m = modules_of(json.to_string().as_bytes()).unwrap();
        assert_eq!(m.modules.len(), 1);
        assert_eq!(m.modules[0].stem, "ok");
        assert_eq!(
            m.duplicates["rec"],
            vec![
                "Rec.wasm".to_string(),
                "rec.wasm".into(),
                "rec.wasm.gz".into()
            ]
        );
        assert_eq!(m.text_wasm_keys, vec!["text.wasm".to_string()]);
    }

    #[test]
    fn a_reference_names_a_guest_as_a_module_key_does_and_may_not_share_its_name() {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let json = serde_json::json!({
            "metadata": {"uid": "u"},
            "data": {"big.wasm.ref": " r.example/big:1 ", "rec.wasm.ref": "r.example/rec:1", "notes": "x"},
            "binaryData": {"rec.wasm": b64(b"a")},
        });
        let m = modules_of(json.to_string().as_bytes()).unwrap();
        assert_eq!(m.refs.len(), 1);
        assert_eq!(
            (m.refs[0].stem.as_str(), m.refs[0].reference.as_str()),
            ("big", "r.example/big:1")
        );
        assert!(m.modules.is_empty(), "rec is named twice");
        assert_eq!(
            m.duplicates["rec"],
            vec!["rec.wasm".to_string(), "rec.wasm.ref".into()]
        );
        assert!(
            m.text_wasm_keys.is_empty(),
            "a .wasm.ref is no misplaced module"
        );
    }

    #[tokio::test]
    async fn a_namespace_names_no_more_modules_by_reference_than_its_quota() {
        let mut dispatch = offline_dispatch();
        dispatch.policy.max_guests_per_namespace = 1;
        dispatch.policy.registries = ["127.0.0.1:1".to_string()].into();
        let mut seen = Seen::default();
        let cm = Arc::new(
            Object::from_value(
                serde_json::json!({
                    "metadata": {"name": "refs", "namespace": "team-a", "uid": "u", "resourceVersion": "1",
                                 "labels": {LABEL: "true"}},
                    "data": {"a.wasm.ref": "127.0.0.1:1/team-a/a:1", "b.wasm.ref": "127.0.0.1:1/team-a/b:1"},
                }),
                &Transform::none(),
                None,
            )
            .unwrap(),
        );
        assert_eq!(sync(&dispatch, &mut seen, &cm).await, 2);
        idle(&dispatch).await;
        let e = dispatch
            .supervisor
            .last_error("team-a/refs/b")
            .unwrap_or_default();
        assert!(e.contains("already names 1 modules by reference"), "{e}");
        assert!(
            !dispatch
                .supervisor
                .last_error("team-a/refs/a")
                .is_some_and(|e| e.contains("already names")),
            "the first one is pulled"
        );
    }

    #[test]
    fn a_host_that_runs_only_signed_modules_refuses_inline_ones_saying_how_to_sign() {
        let m = modules(serde_json::json!({"rec.wasm": b64(b"module")}));
        let (offers, _) = offers_for(
            m,
            "team-a",
            "cm",
            &TenantPolicy::default(),
            &guest_account(),
        );
        let [(_, offer)]: [(String, Offer); 1] = offers.try_into().unwrap();
        let Offer::Unreadable { unreadable, .. } = unsigned(offer) else {
            panic!("an inline module is not loaded");
        };
        assert!(
            unreadable.message.contains("verify_key") && unreadable.message.contains(".wasm.ref"),
            "{}",
            unreadable.message
        );
        assert!(
            matches!(unsigned(Offer::Remove), Offer::Remove),
            "removals pass"
        );
    }

    #[test]
    fn text_data_beside_the_modules_is_no_change_of_modules_even_with_escapes() {
        let with = |notes: &str| -> ObjectRef {
            Arc::new(
                Object::from_value(
                    serde_json::json!({
                        "metadata": {"name": "m", "namespace": "team-a", "uid": "u", "resourceVersion": "1"},
                        "data": {"rec.wasm.ref": "r.example/rec:1", "notes": notes},
                    }),
                    &Transform::none(),
                    None,
                )
                .unwrap(),
            )
        };
        assert!(same_modules(
            &with("a\nquoted \"text\""),
            &with("other\ntext")
        ));
    }

    #[test]
    fn a_new_reference_or_pull_secret_is_a_change_of_modules() {
        let with = |reference: &str, secret: Option<&str>| -> ObjectRef {
            let mut annotations = serde_json::Map::new();
            if let Some(s) = secret {
                annotations.insert(PULL_SECRET.into(), s.into());
            }
            Arc::new(
                Object::from_value(
                    serde_json::json!({
                        "metadata": {"name": "m", "namespace": "team-a", "uid": "u", "resourceVersion": "1",
                                     "annotations": annotations},
                        "data": {"rec.wasm.ref": reference},
                    }),
                    &Transform::none(),
                    None,
                )
                .unwrap(),
            )
        };
        let v1 = with("r.example/rec:1", None);
        assert!(same_modules(&v1, &with("r.example/rec:1", None)));
        assert!(!same_modules(&v1, &with("r.example/rec:2", None)));
        assert!(!same_modules(&v1, &with("r.example/rec:1", Some("login"))));
    }

    #[test]
    fn gzip_under_a_plain_key_says_to_rename_it() {
        let msg = unpack("rec.wasm", gzip(b"module"), 100)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("name the key rec.wasm.gz"), "{msg}");
    }

    #[test]
    fn gzip_is_unpacked_and_bombs_and_garbage_are_refused() {
        assert_eq!(unpack("a.wasm", b"raw".to_vec(), 1).unwrap(), b"raw");
        assert_eq!(
            unpack("a.wasm.gz", gzip(b"hello"), 5).unwrap(),
            b"hello".to_vec()
        );
        let big = unpack("a.wasm.gz", gzip(&[0u8; 4096]), 4095).unwrap_err();
        assert!(big.to_string().contains("more than 4095 bytes"), "{big}");
        let bad = unpack("a.wasm.gz", b"not gzip".to_vec(), 100).unwrap_err();
        assert!(bad.to_string().contains("not valid gzip"), "{bad}");
        assert_eq!(bad.digest, crate::guest::digest_of(b"not gzip"));
    }

    #[test]
    fn pack_gzips_only_when_needed_and_says_when_nothing_fits() {
        let small = pack("team-a", "my-rec", "rec", &[1u8; 1000]).unwrap();
        assert!(small["binaryData"]["rec.wasm"].is_string());
        assert_eq!(small["metadata"]["labels"][LABEL], "true");

        let compressible = vec![7u8; 3 << 20];
        let packed = pack("team-a", "my-rec", "rec", &compressible).unwrap();
        assert!(packed["binaryData"]["rec.wasm.gz"].is_string());

        let mut noise = vec![0u8; 2 << 20];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for b in &mut noise {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let err = pack("team-a", "my-rec", "rec", &noise)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be delivered this way"), "{err}");
        let err = pack("team-a", "my-rec", "my rec", &[1u8; 10])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot be a ConfigMap key"), "{err}");
    }

    #[test]
    fn tenant_settings_confine_to_the_namespace_unless_the_host_grants_more() {
        let s = TenantPolicy::default().settings("team-a/x/rec", "team-a");
        assert!(s.grant.allows_namespace("team-a"));
        assert!(!s.grant.allows_namespace("team-b"));
        assert!(!s.grant.uncached_reads);

        let policy: TenantPolicy = toml::from_str(
            "kinds = [\"v1/ConfigMap\"]\n[grants.team-a]\nnamespaces = [\"shared\"]\nuncached_reads = true\n[grants.team-b]\n",
        )
        .unwrap();
        let a = policy.settings("team-a/x/rec", "team-a");
        assert!(a.grant.allows_namespace("team-a") && a.grant.allows_namespace("shared"));
        assert!(!a.grant.allows_namespace("team-b"));
        assert!(a.grant.uncached_reads);
        assert_eq!(a.grant.kinds, Some(policy.kinds.clone()));
        // An empty grant table: still confined, never "all namespaces".
        let b = policy.settings("team-b/x/rec", "team-b");
        assert_eq!(b.grant.namespaces, Some(["team-b".to_string()].into()));
        assert!(!b.grant.uncached_reads);
    }

    #[test]
    fn by_default_a_tenant_may_declare_no_kind_at_all() {
        let s = TenantPolicy::default().settings("team-a/x/rec", "team-a");
        assert_eq!(s.grant.kinds, Some(BTreeSet::new()));
    }
}
