//! Access reviews: whether the ServiceAccount a guest acts as may itself `list` and `watch` what
//! the guest reads from the shared cache.
//!
//! Informers run as the host and are shared, so RBAC never sees a guest's cache reads. Instead,
//! at load and then periodically, the host asks a SubjectAccessReview per kind and namespace the
//! guest reads, as that ServiceAccount. A load that fails it is rejected; a serving guest that
//! loses a right is held (no reconcile runs, keys stay queued, informers keep running), and
//! resumes when the right comes back, with no restart and no relist.
//!
//! Where it may surprise:
//! - Reviews run every [`Options::review_period`](super::Options::review_period) and shortly
//!   after any Role or RoleBinding changes: a label-less informer on each, shared by every
//!   guest, started with the first guest under review (so the host caches every Role and
//!   RoleBinding of the cluster, and needs to list and watch them). An informer rather than a
//!   bare watch, for its relists, bookmarks and reconnects. Like every informer the host runs,
//!   `/readyz` waits for them and names the rule to add if RBAC forbids them. A right lost
//!   through a ClusterRole edit shows at the next period only. The end of their first list
//!   counts as a change in every namespace, since a grant made while it ran cannot be told from
//!   the Roles that were there before.
//! - The API server's RBAC authorizer reads Roles through its own cache: a review right after
//!   an edit may still see the old rules; the next one (at most a period later) sees the new.
//! - One pass reviews each distinct (ServiceAccount, rule) once, however many guests share it,
//!   and at most [`CONCURRENT_REVIEWS`] reviews are in flight at once.
//! - A review that cannot be made (the server down) changes nothing: a held guest stays held,
//!   a serving one keeps serving.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::{Notify, Semaphore, broadcast};
use tokio::task::AbortHandle;

use super::events::Poster;
use super::outcome::Reason;
use super::source::Source;
use crate::controller::Controller;
use crate::events::Type;
use crate::guest::identity::{Rule, ServiceAccount};
use crate::informer::factory::InformerFactory;
use crate::informer::{Event, InformerKey, Namespaces, Notification, Scope, State};

/// Reviews in flight at once, over every guest: they are requests to the API server.
pub(super) const CONCURRENT_REVIEWS: usize = 4;

/// How long after a Role or RoleBinding change the reviews run: a burst of RBAC edits (a
/// `kubectl apply` of many objects) is one pass, and the API server's authorizer, which learns
/// of the change through its own informer, has had time to see it too (a review before that
/// would answer as before the change).
const SETTLE: Duration = Duration::from_secs(1);

/// How long after a pass that followed an RBAC change the same namespaces are looked at again,
/// each delay counted from the look before. The API server's authorizer reads Roles and
/// RoleBindings through a cache of its own, which on a loaded server can be seconds behind the
/// change our informers saw: a review made in that gap is denied, and without another look a
/// guest just granted would wait for the next period (a minute) to resume, or forever if its
/// load was refused. One look 5 s after proved too few on a loaded two-core machine
/// (`tenants::a_guest_refused_for_access_loads_once_its_service_account_is_granted_without_an_edit`
/// failed there once); the second, 10 s later, covers a lag of up to 16 s.
const ECHOES: [Duration; 2] = [Duration::from_secs(5), Duration::from_secs(10)];

/// Why a review did not allow the guest's reads.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// The ServiceAccount lacks some of the rules.
    #[error("{}", denied_message(.account, .missing))]
    Denied {
        /// The identity.
        account: ServiceAccount,
        /// The rules it lacks.
        missing: Vec<Rule>,
    },
    /// The review could not be made.
    #[error(
        "cannot review what ServiceAccount {account} may read: {source}; the host needs rule {{apiGroups:[\"authorization.k8s.io\"], resources:[\"subjectaccessreviews\"], verbs:[\"create\"]}} in its ClusterRole"
    )]
    Request {
        /// The identity.
        account: ServiceAccount,
        /// What kube said.
        #[source]
        source: kube::Error,
    },
}

/// Verbs by (group, resource), by namespace (`None`: cluster-wide).
type ByPlace<'a> = BTreeMap<Option<&'a str>, BTreeMap<(&'a str, &'a str), Vec<&'a str>>>;

impl Error {
    /// How a load refused by this error is rejected: the reason and the message (for a
    /// tenant's guest, saying when it is tried again).
    pub(super) fn rejection(&self, tenant: bool) -> (Reason, String) {
        match self {
            Error::Denied { .. } if tenant => (
                Reason::Access,
                // The ConfigMap source offers the bytes again when a Role or RoleBinding of the
                // namespace changes; a ClusterRole's change it cannot see.
                format!(
                    "{self} (it is loaded again when a Role or RoleBinding of its namespace changes; after granting through a ClusterRole, touch the ConfigMap)"
                ),
            ),
            Error::Denied { .. } => (Reason::Access, self.to_string()),
            Error::Request { .. } => (Reason::Host, self.to_string()),
        }
    }
}

/// `ServiceAccount a/b may not list, watch configmaps in namespace "a" ...; create ...`.
fn denied_message(account: &ServiceAccount, missing: &[Rule]) -> String {
    let mut by_place: ByPlace<'_> = BTreeMap::new();
    for r in missing {
        by_place
            .entry(r.namespace.as_deref())
            .or_default()
            .entry((r.group.as_str(), r.resource.as_str()))
            .or_default()
            .push(r.verb.as_str());
    }
    let mut parts = Vec::new();
    for (namespace, rules) in &by_place {
        let what: Vec<String> = rules
            .iter()
            .map(|((_, resource), verbs)| format!("{} {resource}", verbs.join(", ")))
            .collect();
        let rules: Vec<String> = rules
            .iter()
            .map(|((group, resource), verbs)| {
                let verbs: Vec<String> = verbs.iter().map(|v| format!("{v:?}")).collect();
                format!(
                    "{{apiGroups:[{group:?}], resources:[{resource:?}], verbs:[{}]}}",
                    verbs.join(",")
                )
            })
            .collect();
        parts.push(match namespace {
            Some(ns) => format!(
                "may not {} in namespace {ns:?}: create in namespace {ns:?} a Role with rules [{}] and a RoleBinding of it to ServiceAccount {} (see deploy/tenant.yaml)",
                what.join("; "),
                rules.join(", "),
                account.name
            ),
            None => format!(
                "may not {} cluster-wide: create a ClusterRole with rules [{}] and a ClusterRoleBinding of it to ServiceAccount {account}",
                what.join("; "),
                rules.join(", ")
            ),
        });
    }
    format!(
        "ServiceAccount {account}, which this guest acts as, {}; the guest reads these from the host's cache, and may read only what its ServiceAccount could",
        parts.join("; and ")
    )
}

/// What `controller`'s informers need the guest's identity to hold.
#[derive(Debug, Default)]
pub(super) struct Needed {
    /// `list` and `watch` of each resource, in each namespace it reads (or cluster-wide).
    rules: Vec<Rule>,
    /// Kinds not resolved yet (discovery under way, or the kind not served), whose rules are
    /// unknown: the guest stays held while there are any.
    unresolved: Vec<String>,
}

impl Needed {
    /// Why the guest stays held while some kinds are unresolved.
    fn unresolved_reason(&self, account: &ServiceAccount) -> Option<String> {
        (!self.unresolved.is_empty()).then(|| {
            format!(
                "what ServiceAccount {account} may read is reviewed once these kinds resolve: {}",
                self.unresolved.join(", ")
            )
        })
    }
}

/// What `controller` reads, as rules its identity must hold. A tenant's load waits for its
/// informers to sync, so only an operator's guest can have unresolved kinds here.
pub(super) fn needed(controller: &Controller) -> Needed {
    let mut needed = Needed::default();
    let rules = &mut needed.rules;
    for informer in controller.informers() {
        let Some(resource) = informer.resource() else {
            needed.unresolved.push(informer.key().name().to_string());
            continue;
        };
        let namespaces: Vec<Option<String>> = match &informer.key().scope.namespaces {
            Namespaces::All => vec![None],
            Namespaces::Only(set) => set.iter().cloned().map(Some).collect(),
        };
        for namespace in namespaces {
            for verb in ["list", "watch"] {
                let rule = Rule {
                    group: resource.group.clone(),
                    resource: resource.plural.clone(),
                    verb: verb.into(),
                    namespace: namespace.clone(),
                };
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }
    needed
}

/// Waits up to `timeout` for `controller`'s informers to resolve their kinds (or fail to: a kind
/// not served, a scope RBAC forbids), so a review at load sees every kind the guest reads.
async fn resolved(controller: &Controller, timeout: Duration) -> Needed {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let pending = controller.informers().iter().any(|i| {
            i.resource().is_none()
                && !matches!(i.status().state, State::Forbidden | State::KindNotFound)
        });
        if !pending || tokio::time::Instant::now() >= deadline {
            return needed(controller);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asks the API server, as the host, what ServiceAccounts may do.
pub(super) struct Reviewer {
    client: kube::Client,
    permits: Semaphore,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer").finish_non_exhaustive()
    }
}

impl Reviewer {
    pub(super) fn new(client: kube::Client) -> Self {
        Self {
            client,
            permits: Semaphore::new(CONCURRENT_REVIEWS),
        }
    }

    /// Whether `account` holds `rule`.
    async fn allowed(&self, account: &ServiceAccount, rule: &Rule) -> Result<bool, Error> {
        let _permit = self.permits.acquire().await;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(account.username()),
                groups: Some(account.groups()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(rule.group.clone()),
                    resource: Some(rule.resource.clone()),
                    verb: Some(rule.verb.clone()),
                    namespace: rule.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| Error::Request {
                account: account.clone(),
                source,
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    /// Whether `account` holds every rule of `needed`; the error names those it lacks.
    pub(super) async fn review(
        &self,
        account: &ServiceAccount,
        needed: &[Rule],
    ) -> Result<(), Error> {
        let mut memo = Memo::default();
        self.review_with(&mut memo, account, needed).await
    }

    async fn review_with(
        &self,
        memo: &mut Memo,
        account: &ServiceAccount,
        needed: &[Rule],
    ) -> Result<(), Error> {
        let unknown: Vec<&Rule> = needed
            .iter()
            .filter(|r| !memo.contains_key(&(account.clone(), (*r).clone())))
            .collect();
        // At most CONCURRENT_REVIEWS in flight: `allowed` takes a permit each.
        let answers =
            futures::future::join_all(unknown.iter().map(|r| self.allowed(account, r))).await;
        for (rule, answer) in unknown.into_iter().zip(answers) {
            memo.insert((account.clone(), rule.clone()), answer?);
        }
        let missing: Vec<Rule> = needed
            .iter()
            .filter(|r| memo.get(&(account.clone(), (*r).clone())) == Some(&false))
            .cloned()
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Error::Denied {
                account: account.clone(),
                missing,
            })
        }
    }
}

/// Answers of one pass, so guests sharing an identity and a kind cost one review.
type Memo = HashMap<(ServiceAccount, Rule), bool>;

/// A serving guest whose reads are reviewed again and again.
#[derive(Debug, Clone)]
pub(super) struct Watched {
    pub(super) account: ServiceAccount,
    pub(super) controller: Weak<Controller>,
    pub(super) source: Source,
}

/// The guests under review and the task that reviews them.
#[derive(Debug)]
pub(super) struct Access {
    shared: Arc<Shared>,
    /// The reviewing task: `None` before the first review, and `Some(None)` once stopped, for
    /// good.
    task: Mutex<Option<Option<AbortHandle>>>,
}

#[derive(Debug)]
struct Shared {
    reviewer: Reviewer,
    guests: Mutex<BTreeMap<String, Watched>>,
    /// Namespaces whose Roles or RoleBindings changed since the last pass.
    dirty: Mutex<BTreeSet<String>>,
    wake: Notify,
    period: Duration,
    events: Poster,
    /// Passes run so far.
    passes: AtomicU64,
    /// Namespaces whose RBAC changed ("" for any), for sources to offer again what was refused
    /// for access there.
    changes: broadcast::Sender<String>,
}

impl Drop for Access {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Access {
    pub(super) fn new(client: kube::Client, period: Duration, events: Poster) -> Self {
        Self {
            shared: Arc::new(Shared {
                reviewer: Reviewer::new(client),
                guests: Mutex::new(BTreeMap::new()),
                dirty: Mutex::new(BTreeSet::new()),
                wake: Notify::new(),
                period,
                events,
                passes: AtomicU64::new(0),
                changes: broadcast::Sender::new(64),
            }),
            task: Mutex::new(None),
        }
    }

    /// Reviews `name` from now on.
    pub(super) fn watch(&self, name: &str, watched: Watched) {
        self.shared
            .guests
            .lock()
            .unwrap()
            .insert(name.to_string(), watched);
    }

    /// Namespaces whose Roles or RoleBindings change from now on ("" for any).
    pub(super) fn changes(&self) -> broadcast::Receiver<String> {
        self.shared.changes.subscribe()
    }

    /// Starts the reviewing task (and the RBAC informers) unless it runs: at the first review,
    /// so a host without guests acting as a ServiceAccount neither runs nor needs them.
    fn start(&self, factory: &InformerFactory) {
        let mut task = self.task.lock().unwrap();
        if task.is_none() {
            *task = Some(Some(
                tokio::spawn(run(
                    self.shared.clone(),
                    rbac_changes(factory, &self.shared),
                ))
                .abort_handle(),
            ));
        }
    }

    /// Stops reviewing `name`.
    pub(super) fn forget(&self, name: &str) {
        self.shared.guests.lock().unwrap().remove(name);
    }

    /// Stops the reviewing task.
    pub(super) fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap().replace(None).flatten() {
            t.abort();
        }
    }
}

/// Subscribes to every Role and RoleBinding, marking their namespaces dirty as they change.
/// Returns the forwarding tasks' handles. A subscription that cannot be made is logged: the
/// periodic reviews still run.
fn rbac_changes(factory: &InformerFactory, shared: &Arc<Shared>) -> Vec<AbortHandle> {
    let mut tasks = Vec::new();
    for kind in ["RoleBinding", "Role"] {
        let key = InformerKey::new("rbac.authorization.k8s.io", "v1", kind, Scope::default());
        let mut sub = match factory.subscribe(key, &[]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%kind, "access reviews will not follow {kind} changes, only the period: {e}");
                continue;
            }
        };
        let shared = Arc::downgrade(shared);
        tasks.push(
            tokio::spawn(async move {
                let mut status = sub.informer().watch_status();
                let mut follow = Follow::new(&status.borrow_and_update().state);
                loop {
                    let review = tokio::select! {
                        n = sub.recv() => match n {
                            Some(n) => follow.notified(&n),
                            None => return,
                        },
                        changed = status.changed(), if follow.listing => match changed {
                            Ok(()) => follow.status(&status.borrow_and_update().state),
                            Err(_) => return,
                        },
                    };
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    if let Some(ns) = review {
                        shared.dirty.lock().unwrap().insert(ns);
                        shared.wake.notify_one();
                    }
                }
            })
            .abort_handle(),
        );
    }
    tasks
}

/// What an RBAC informer's news asks the reviews to look at again.
///
/// An informer started for the first review replays its initial list as background `Added`s,
/// and a Role granted while that list was in flight is among them, indistinguishable from the
/// Roles that were always there. So the end of a list this subscription saw begin counts as a
/// change everywhere: without it, a guest refused for access just before its grant was listed
/// would never be offered again.
#[derive(Debug)]
struct Follow {
    /// The informer had not synced when subscribed to.
    listing: bool,
}

impl Follow {
    fn new(at_subscribe: &State) -> Self {
        Self {
            listing: !at_subscribe.is_synced(),
        }
    }

    /// The namespace a notification asks to review (`""` for every one), if any.
    fn notified(&self, n: &Notification) -> Option<String> {
        // The initial list replayed, or a relist that changed nothing: no change the last
        // review did not see (or, while listing, one `status` covers).
        if n.background && !matches!(n.event, Event::Resync) {
            return None;
        }
        match &n.event {
            Event::Added(o) => o.namespace().map(str::to_string),
            Event::Updated { new, .. } => new.namespace().map(str::to_string),
            Event::Deleted { last_known, .. } => last_known.namespace().map(str::to_string),
            // Missed events: review everything.
            Event::Resync => Some(String::new()),
        }
    }

    /// What the informer's reaching `state` asks to review (`""` for every namespace).
    fn status(&mut self, state: &State) -> Option<String> {
        if self.listing && state.is_synced() {
            self.listing = false;
            return Some(String::new());
        }
        None
    }
}

/// Stops the forwarding tasks with the reviewing task.
struct AbortOnDrop(Vec<AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Reviews every watched guest each period, and those of a namespace shortly after its RBAC
/// changed.
async fn run(shared: Arc<Shared>, forwarders: Vec<AbortHandle>) {
    let _forwarders = AbortOnDrop(forwarders);
    let mut tick = tokio::time::interval(shared.period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate, and the load has just reviewed.
    tick.tick().await;
    // When the next look is due, at which of `ECHOES`, and for which namespaces.
    let mut echo: Option<(tokio::time::Instant, usize, BTreeSet<String>)> = None;
    loop {
        let echo_due = async {
            match &echo {
                Some((at, _, _)) => tokio::time::sleep_until(*at).await,
                None => std::future::pending().await,
            }
        };
        let only = tokio::select! {
            _ = tick.tick() => None,
            _ = echo_due => {
                let (step, again) = echo.take().map(|(_, s, e)| (s, e)).unwrap_or_default();
                for ns in &again {
                    let _ = shared.changes.send(ns.clone());
                }
                if let Some(delay) = ECHOES.get(step + 1) {
                    echo = Some((tokio::time::Instant::now() + *delay, step + 1, again.clone()));
                }
                Some(again)
            }
            _ = shared.wake.notified() => {
                tokio::time::sleep(SETTLE).await;
                let dirty = std::mem::take(&mut *shared.dirty.lock().unwrap());
                if dirty.is_empty() {
                    // A wake-up left over from a burst the last pass already covered.
                    continue;
                }
                for ns in &dirty {
                    // Nobody listening is fine: no source wants them.
                    let _ = shared.changes.send(ns.clone());
                }
                // A new change starts the looks over, for its namespaces and those still due.
                let at = tokio::time::Instant::now() + ECHOES[0];
                let mut again = echo.take().map(|(_, _, e)| e).unwrap_or_default();
                again.extend(dirty.iter().filter(|ns| !ns.is_empty()).cloned());
                if !again.is_empty() {
                    echo = Some((at, 0, again));
                }
                // "" marks a resync of the RBAC informers: everything may have changed.
                (!dirty.contains("")).then_some(dirty)
            }
        };
        pass(&shared, only.as_ref()).await;
    }
}

/// The guests a pass reviews: those acting as a ServiceAccount of a namespace in `only`, or all.
fn due(
    guests: &BTreeMap<String, Watched>,
    only: Option<&BTreeSet<String>>,
) -> Vec<(String, Watched)> {
    guests
        .iter()
        .filter(|(_, w)| only.is_none_or(|ns| ns.contains(&w.account.namespace)))
        .map(|(n, w)| (n.clone(), w.clone()))
        .collect()
}

/// One pass: reviews the watched guests (those in `only`'s namespaces, if given) and holds or
/// resumes each according to the answer.
async fn pass(shared: &Shared, only: Option<&BTreeSet<String>>) {
    shared.passes.fetch_add(1, Ordering::Relaxed);
    let guests = due(&shared.guests.lock().unwrap(), only);
    let mut memo = Memo::default();
    for (name, w) in guests {
        let Some(controller) = w.controller.upgrade() else {
            continue;
        };
        // Read at each pass: an operator's guest may resolve a kind after its load.
        let needed = needed(&controller);
        match shared
            .reviewer
            .review_with(&mut memo, &w.account, &needed.rules)
            .await
        {
            Ok(()) if !needed.unresolved.is_empty() => {
                controller.hold(needed.unresolved_reason(&w.account));
            }
            Ok(()) => {
                if controller.hold(None) {
                    let message = format!(
                        "guest {name}: ServiceAccount {} may read what the guest reads again; reconciles resumed",
                        w.account
                    );
                    tracing::info!(guest = %name, "{message}");
                    shared
                        .events
                        .post(&name, &w.source, Type::Normal, "AccessRestored", message);
                }
            }
            Err(e @ Error::Denied { .. }) => {
                let why = e.to_string();
                if controller.hold(Some(why.clone())) {
                    shared.events.post(
                        &name,
                        &w.source,
                        Type::Warning,
                        "AccessRevoked",
                        format!("guest {name}: reconciles held: {why}"),
                    );
                }
            }
            Err(e) => {
                tracing::warn!(guest = %name, "access review failed; nothing changed: {e}");
            }
        }
    }
}

impl Access {
    /// Reviews what a guest just loaded (or reloaded, `reloaded`) reads, if it acts as a
    /// ServiceAccount, and keeps reviewing it. A first load that fails is the caller's to
    /// reject; a reload has already swapped, so a failing one holds the guest instead (the
    /// older version read other kinds, and the swap cannot be undone here).
    ///
    /// The first review starts the reviewing task and the RBAC informers on `factory`; a
    /// review waits up to `sync_timeout` for the guest's informers to resolve their kinds.
    pub(super) async fn review_loaded(
        &self,
        factory: &InformerFactory,
        sync_timeout: Duration,
        name: &str,
        source: &Source,
        controller: &Arc<Controller>,
        reloaded: bool,
    ) -> Result<(), Error> {
        let Some(account) = controller.settings().identity.clone() else {
            return Ok(());
        };
        self.start(factory);
        let needed = resolved(controller, sync_timeout).await;
        let verdict = self.shared.reviewer.review(&account, &needed.rules).await;
        match (verdict, reloaded) {
            (Err(e), false) => return Err(e),
            (Err(e @ Error::Denied { .. }), true) => {
                let why = e.to_string();
                if controller.hold(Some(why.clone())) {
                    self.shared.events.post(
                        name,
                        source,
                        Type::Warning,
                        "AccessRevoked",
                        format!("guest {name}: reconciles held: {why}"),
                    );
                }
            }
            (Err(e), true) => {
                // The swap held the guest: it stays held until a review passes.
                tracing::warn!(guest = %name, "access review of the new version failed; held until the next one passes: {e}")
            }
            (Ok(()), _) => {
                controller.hold(needed.unresolved_reason(&account));
            }
        }
        let watched = Watched {
            account,
            controller: Arc::downgrade(controller),
            source: source.clone(),
        };
        self.watch(name, watched);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(group: &str, resource: &str, verb: &str, ns: Option<&str>) -> Rule {
        Rule {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: ns.map(str::to_string),
        }
    }

    fn watched(account: &str) -> Watched {
        Watched {
            account: ServiceAccount::parse(account).unwrap(),
            controller: Weak::new(),
            source: Source::File("x.wasm".into()),
        }
    }

    #[test]
    fn a_change_in_one_namespace_reviews_only_the_guests_acting_there() {
        let guests: BTreeMap<String, Watched> = [
            ("a1".to_string(), watched("team-a/reconciled-guest")),
            ("a2".to_string(), watched("team-a/deployer")),
            ("b".to_string(), watched("team-b/reconciled-guest")),
        ]
        .into();
        let names = |only: Option<&BTreeSet<String>>| -> Vec<String> {
            due(&guests, only).into_iter().map(|(n, _)| n).collect()
        };
        assert_eq!(names(Some(&["team-a".to_string()].into())), ["a1", "a2"]);
        assert_eq!(
            names(Some(&["team-c".to_string()].into())),
            Vec::<String>::new()
        );
        assert_eq!(names(None), ["a1", "a2", "b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn reviews_run_every_period_and_shortly_after_an_rbac_change() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .unwrap();
        let access = Access::new(
            client.clone(),
            Duration::from_secs(60),
            super::super::events::Poster::new(client, false, None),
        );
        let shared = access.shared.clone();
        let passes = || shared.passes.load(Ordering::Relaxed);
        let task = tokio::spawn(run(shared.clone(), Vec::new()));
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(passes(), 0, "not at load: the load reviewed already");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(passes(), 1, "one period");
        // A burst of RBAC edits in team-a: one pass, once they settle.
        for _ in 0..3 {
            shared.dirty.lock().unwrap().insert("team-a".into());
            shared.wake.notify_one();
        }
        tokio::time::sleep(SETTLE / 2).await;
        assert_eq!(passes(), 1, "still settling");
        tokio::time::sleep(SETTLE).await;
        assert_eq!(passes(), 2);
        assert!(shared.dirty.lock().unwrap().is_empty());
        let mut changes = shared.changes.subscribe();
        tokio::time::sleep(ECHOES[0]).await;
        assert_eq!(passes(), 3, "once more, for the authorizer's lag");
        assert_eq!(changes.try_recv().unwrap(), "team-a");
        tokio::time::sleep(ECHOES[1]).await;
        assert_eq!(passes(), 4, "and again, for a longer lag");
        assert_eq!(changes.try_recv().unwrap(), "team-a");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(passes(), 4, "nothing more until the next period");
        task.abort();
    }

    fn role(ns: &str) -> crate::object::ObjectRef {
        let v = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "grant", "namespace": ns, "resourceVersion": "7"},
        });
        Arc::new(
            crate::object::Object::from_value(v, &crate::object::Transform::none(), None).unwrap(),
        )
    }

    fn news(event: Event, background: bool) -> Notification {
        Notification { event, background }
    }

    #[test]
    fn a_grant_listed_by_the_rbac_informers_first_list_still_counts_as_a_change() {
        // The informer starts with the first review; the tenant's Role is created while its
        // initial list is in flight, so it arrives as a background `Added` like every old Role.
        let mut follow = Follow::new(&State::Syncing);
        let listed = news(Event::Added(role("team-a")), true);
        assert_eq!(follow.notified(&listed), None);
        assert_eq!(follow.status(&State::Syncing), None);
        assert_eq!(
            follow.status(&State::Synced),
            Some(String::new()),
            "the list's end reviews every namespace"
        );
        assert_eq!(follow.status(&State::Synced), None, "once");
        let live = news(Event::Added(role("team-b")), false);
        assert_eq!(follow.notified(&live).as_deref(), Some("team-b"));
    }

    #[test]
    fn a_subscription_to_a_synced_informer_reviews_only_what_changes_after_it() {
        // Its replay is a consistent snapshot: nothing granted during it goes unseen.
        let mut follow = Follow::new(&State::Synced);
        let replayed = news(Event::Added(role("team-a")), true);
        assert_eq!(follow.notified(&replayed), None);
        assert_eq!(follow.status(&State::Synced), None);
        let missed = news(Event::Resync, false);
        assert_eq!(follow.notified(&missed).as_deref(), Some(""));
    }

    #[test]
    fn a_denial_says_which_role_and_binding_to_create_per_namespace() {
        let sa = ServiceAccount::parse("team-a/reconciled-guest").unwrap();
        let m = denied_message(
            &sa,
            &[
                rule("", "configmaps", "list", Some("team-a")),
                rule("", "configmaps", "watch", Some("team-a")),
                rule("apps", "deployments", "watch", Some("team-a")),
            ],
        );
        assert!(
            m.starts_with("ServiceAccount team-a/reconciled-guest, which this guest acts as, may not list, watch configmaps; watch deployments in namespace \"team-a\""),
            "{m}"
        );
        assert!(
            m.contains(r#"a Role with rules [{apiGroups:[""], resources:["configmaps"], verbs:["list","watch"]}, {apiGroups:["apps"], resources:["deployments"], verbs:["watch"]}] and a RoleBinding of it to ServiceAccount reconciled-guest"#),
            "{m}"
        );
        let cluster = denied_message(&sa, &[rule("", "nodes", "list", None)]);
        assert!(
            cluster.contains("cluster-wide: create a ClusterRole"),
            "{cluster}"
        );
    }
}
