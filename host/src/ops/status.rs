//! The status document: what `/status` serves and `reconciled status` renders as a table.
//!
//! One schema for everyone who touches the document: the supervisor builds a [`Status`], the
//! endpoint serialises it, and `reconciled status` and the tests deserialise it. The JSON field
//! names are an interface (scripts, the README and the deploy test read them), so a field
//! renamed here is a breaking change, not a refactor.
//!
//! Where it may surprise:
//! - Reading is strict about words and lenient about fields. A guest state, blame or informer
//!   state this version does not know is an error (rendering a guess would be worse), while
//!   unknown fields are ignored and missing lists are empty, so a host one version apart
//!   still renders unless it added a word.
//! - Timestamps are RFC 3339 strings rounded to the second, as the host formats them; they are
//!   not parsed.

use serde::{Deserialize, Serialize};

use crate::controller::Snapshot;
use crate::guest::Blame;
use crate::informer::{self, Informer, Staleness};

/// The whole document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Every guest the host knows, by name, including those that are only configured
    /// (`loading`) or have no version that could be loaded (`rejected`).
    #[serde(default)]
    pub guests: Vec<GuestStatus>,
    /// Every informer of the host, the guests' and the host's own (the ConfigMap source's).
    #[serde(default)]
    pub informers: Vec<InformerStatus>,
    /// Sources that deliver nothing loadable (a labelled ConfigMap without a module), which
    /// therefore have no guest to show their trouble on.
    #[serde(default)]
    pub sources_without_guests: Vec<SourceProblem>,
    /// Seconds since the supervisor was created.
    #[serde(default)]
    pub uptime_seconds: u64,
    /// Each tenant's share of the host's CPU, the operator's own guests (tenant `""`) included.
    #[serde(default)]
    pub tenants: Vec<TenantStatus>,
    /// The replicas this host shares its guests with; absent for a host alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicasStatus>,
}

/// This replica among the others, and every shard as it sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicasStatus {
    /// This replica's identity.
    pub identity: String,
    /// Where the Leases live.
    pub namespace: String,
    /// Replicas alive, this one included.
    #[serde(default)]
    pub members: Vec<String>,
    /// Shards this replica holds: its guests on them reconcile here.
    #[serde(default)]
    pub held: Vec<u32>,
    /// Every shard.
    #[serde(default)]
    pub shards: Vec<ShardStatus>,
}

/// One shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStatus {
    /// The shard.
    pub shard: u32,
    /// The replica holding its Lease, if one does.
    #[serde(default)]
    pub holder: Option<String>,
    /// The replica it is planned to go to (it moves when the plan has wanted that for a while).
    #[serde(default)]
    pub planned: Option<String>,
    /// Guests on it.
    #[serde(default)]
    pub guests: u32,
}

/// One guest.
///
/// `reason`, `blame` and the `failing_*` fields are set according to `state`: see
/// [`GuestState`]. Everything from `digest` to `informers` describes the version serving, so it
/// is empty (or zero) while none is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestStatus {
    /// The guest's name: a config or dev-folder name, or `<namespace>/<configmap>/<key>`.
    pub name: String,
    /// What it is doing.
    pub state: GuestState,
    /// Why it is not serving: `loading` while loading, the informer and its trouble while
    /// waiting, the latest failure while failing, the last rejection while rejected.
    #[serde(default)]
    pub reason: Option<String>,
    /// Whose doing the failure is; set only while failing.
    #[serde(default, with = "blame_label")]
    pub blame: Option<Blame>,
    /// When it started failing (its oldest failing key).
    #[serde(default)]
    pub failing_since: Option<String>,
    /// How many keys are failing.
    #[serde(default)]
    pub failing_keys: Option<usize>,
    /// sha256 of the module serving, lowercase hex.
    #[serde(default)]
    pub digest: Option<String>,
    /// Where the module comes from, as the supervisor describes its source.
    pub source: String,
    /// When the serving version was swapped in.
    #[serde(default)]
    pub loaded_at: Option<String>,
    /// Versions swapped in (first load and reloads).
    #[serde(default)]
    pub loads: u64,
    /// Modules rejected, all reasons together.
    #[serde(default)]
    pub rejections: u64,
    /// The last rejection, kept while an older version serves.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Duration of the last successful load, from bytes to serving, in milliseconds.
    #[serde(default)]
    pub last_load_ms: Option<f64>,
    /// Reconciles of every version so far.
    #[serde(default)]
    pub reconciles: Reconciles,
    /// Keys waiting in its work queue.
    #[serde(default)]
    pub queued: usize,
    /// The informers the serving version reads.
    #[serde(default)]
    pub informers: Vec<GuestInformer>,
    /// What it holds in memory; `None` while no version serves.
    #[serde(default)]
    pub memory: Option<GuestMemory>,
    /// Its shard, when the host shares its guests with other replicas (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The replica reconciling it (holding its shard), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Its shadow version, when it has one (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<GuestShadow>,
}

/// A shadow version beside a guest's live one: it runs on the same requests with dry-run
/// writes, and its writes, Events and outcome are compared with the live version's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestShadow {
    /// sha256 of the shadow module, lowercase hex.
    pub digest: String,
    /// Requests it reconciled beside the live version.
    pub reconciles: u64,
    /// Of those, the ones where it would have written, recorded or answered differently.
    pub divergent: u64,
    /// The latest divergence: the request and the first thing that differed.
    #[serde(default)]
    pub last_divergence: Option<String>,
    /// Why it is not running, if it is not (the live version is unaffected).
    #[serde(default)]
    pub problem: Option<String>,
}

impl GuestShadow {
    /// The shadow of a running controller.
    pub fn of(s: &crate::controller::shadow::ShadowSnapshot) -> Self {
        Self {
            digest: s.digest.clone(),
            reconciles: s.reconciles,
            divergent: s.divergent,
            last_divergence: s.last_divergence.clone(),
            problem: s.problem.clone(),
        }
    }
}

/// The memory a serving guest accounts for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestMemory {
    /// Its share of the shared cache: each informer it reads, split evenly between the guests
    /// that read it, so that the shares of all guests (or of one tenant's) sum to what their
    /// informers hold. What it would cost alone is the sum of its informers' `cached_bytes`
    /// in [`Status::informers`]. Moves when another guest starts or stops sharing.
    pub cached_bytes: u64,
    /// The most linear memory one call into it (a reconcile or a `map`) held at once, over
    /// every version since it started; 0 before its first call.
    pub peak_instance_bytes: u64,
    /// The serving module's compiled native code image.
    pub compiled_bytes: u64,
}

/// What a guest is doing, serialised lower-case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestState {
    /// Configured and not yet loaded or rejected; `/readyz` waits for it.
    Loading,
    /// A version serves and its informers are synced.
    Serving,
    /// Loaded, but an informer it reads has not synced, so reconciles wait (`reason` says
    /// which and why).
    Waiting,
    /// Its last reconcile trapped or a worker died running it (`reason` and `blame` say why).
    Failing,
    /// Loaded and synced here, but another replica holds its shard and reconciles it (`owner`
    /// says which); this one takes over, warm, if that one goes.
    Standby,
    /// No version could be loaded (`reason` and `last_error` say why).
    Rejected,
}

impl GuestState {
    /// The word in the document and in the table.
    pub fn label(self) -> &'static str {
        match self {
            GuestState::Loading => "loading",
            GuestState::Serving => "serving",
            GuestState::Waiting => "waiting",
            GuestState::Failing => "failing",
            GuestState::Standby => "standby",
            GuestState::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for GuestState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A guest's reconciles, over every version it has run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciles {
    /// Returned Ok.
    pub ok: u64,
    /// Returned an error.
    pub failed: u64,
    /// Trapped.
    pub traps: u64,
    /// Worker panics caught (each restarted its worker).
    #[serde(default)]
    pub worker_panics: u64,
    /// Failed reconciles (errors, traps, worker panics) by blame.
    #[serde(default)]
    pub errors_by_blame: ByBlame,
}

impl Reconciles {
    /// The counts of a running controller.
    pub fn of(snapshot: &Snapshot) -> Self {
        let by = |b: Blame| snapshot.errors_by_blame[b as usize];
        Self {
            ok: snapshot.reconciles_ok,
            failed: snapshot.reconciles_failed,
            traps: snapshot.traps,
            worker_panics: snapshot.worker_panics,
            errors_by_blame: ByBlame {
                guest: by(Blame::Guest),
                host: by(Blame::Host),
                cluster: by(Blame::Cluster),
            },
        }
    }
}

/// A count per [`Blame`], under the blame's label.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByBlame {
    /// The guest's own code.
    pub guest: u64,
    /// The host.
    pub host: u64,
    /// The API server.
    pub cluster: u64,
}

/// One informer a guest reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestInformer {
    /// `group/version/Kind`, or `version/Kind` for the core group.
    pub kind: String,
    /// Its health.
    pub state: InformerState,
    /// Why, when it is not synced; `None` when it is (a past error is in the log, not here).
    #[serde(default)]
    pub message: Option<String>,
    /// Seconds since the API server last showed a sign of life for it; `None` until every
    /// watch has heard from the server.
    #[serde(default)]
    pub silent_for_seconds: Option<f64>,
    /// The highest resourceVersion applied to its cache.
    #[serde(default)]
    pub resource_version: u64,
}

impl GuestInformer {
    /// The informer of `kind`, as a controller's snapshot describes it.
    pub fn new(kind: &str, status: &informer::Status, staleness: &Staleness) -> Self {
        Self {
            kind: kind.to_string(),
            state: (&status.state).into(),
            message: status.message.clone(),
            silent_for_seconds: staleness.silent_for.map(|d| d.as_secs_f64()),
            resource_version: staleness.resource_version,
        }
    }
}

/// One informer of the host, whoever reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InformerStatus {
    /// `group/version/Kind`, or `version/Kind` for the core group.
    pub kind: String,
    /// What it watches: every namespace, or which.
    pub scope: String,
    /// Its health.
    pub state: InformerState,
    /// Why, when it is not synced.
    #[serde(default)]
    pub message: Option<String>,
    /// Objects in its cache.
    #[serde(default)]
    pub objects: usize,
    /// Bytes its objects hold, all of them, whoever reads them (see
    /// [`Store::object_bytes`](crate::informer::store::Store::object_bytes)).
    #[serde(default)]
    pub cached_bytes: u64,
    /// Seconds since the API server last showed a sign of life for it.
    #[serde(default)]
    pub silent_for_seconds: Option<f64>,
    /// The highest resourceVersion applied to its cache.
    #[serde(default)]
    pub resource_version: u64,
}

impl InformerStatus {
    /// Reads `informer` now: its status, staleness and cache size are three reads, not one.
    pub fn of(informer: &Informer) -> Self {
        let (key, status, stale) = (informer.key(), informer.status(), informer.staleness());
        let gvk = kube::core::GroupVersionKind::gvk(&key.group, &key.version, &key.kind);
        Self {
            kind: crate::informer::discovery::gvk_string(&gvk),
            scope: key.scope.to_string(),
            state: (&status.state).into(),
            message: status.message,
            objects: informer.store().len(),
            cached_bytes: informer.store().object_bytes() as u64,
            silent_for_seconds: stale.silent_for.map(|d| d.as_secs_f64()),
            resource_version: stale.resource_version,
        }
    }
}

/// An informer's health, named as [`informer::State`]'s variants are.
///
/// A copy of that enum for the wire: the conversion is an exhaustive match, so a state added
/// there does not compile until it is added here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InformerState {
    /// Discovery, preflight or the initial list is under way.
    Syncing,
    /// The cache holds the initial list and is watching.
    Synced,
    /// RBAC denies list or watch (or the scope does not fit the kind).
    Forbidden,
    /// The kind is not served.
    KindNotFound,
    /// Synced, but a watch is failing: reads are served and may be stale.
    Degraded,
}

impl From<&informer::State> for InformerState {
    fn from(state: &informer::State) -> Self {
        match state {
            informer::State::Syncing => InformerState::Syncing,
            informer::State::Synced => InformerState::Synced,
            informer::State::Forbidden => InformerState::Forbidden,
            informer::State::KindNotFound => InformerState::KindNotFound,
            informer::State::Degraded => InformerState::Degraded,
        }
    }
}

impl std::fmt::Display for InformerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A source that delivers no guest, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceProblem {
    /// The source, for example `configmap team-a/x`.
    pub source: String,
    /// What is wrong with it, on one line.
    pub problem: String,
}

/// One tenant's share of the host's CPU: what its guests used and whether it is throttled.
///
/// Where it may surprise: these totals count from the host's start and survive a guest's
/// unload, unlike a guest's reconcile counters; and compile time is wall time (compiling uses
/// several threads), added to the CPU the budget is compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantStatus {
    /// The tenant namespace; empty for the operator's own guests.
    pub tenant: String,
    /// Its weight in the fair share.
    pub weight: u32,
    /// CPU its guests' calls used, in seconds.
    pub cpu_seconds: f64,
    /// Time its modules took to compile or load, in seconds.
    pub compile_seconds: f64,
    /// CPU and compile time over the last minute, in milliseconds.
    pub used_ms_last_minute: f64,
    /// Its CPU budget per minute, in milliseconds, if it has one.
    #[serde(default)]
    pub cpu_budget_ms_per_minute: Option<f64>,
    /// Set while its reconciles are held back for its budget.
    #[serde(default)]
    pub throttled: Option<Throttled>,
    /// Seconds spent throttled so far.
    #[serde(default)]
    pub throttled_seconds: f64,
    /// Spells of throttling so far.
    #[serde(default)]
    pub throttles: u64,
    /// CPU of each of its serving guests, in seconds.
    #[serde(default)]
    pub guests: Vec<GuestCpu>,
}

/// A tenant held back for its CPU budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throttled {
    /// Since when.
    pub since: String,
    /// The budget per minute, in milliseconds.
    pub budget_ms_per_minute: f64,
    /// What it used over the last minute, in milliseconds.
    pub used_ms_last_minute: f64,
}

/// A guest's CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestCpu {
    /// The guest's name.
    pub name: String,
    /// CPU its calls used (all versions of the running controller), in seconds.
    pub cpu_seconds: f64,
}

/// [`Blame`] as its label (`guest`, `host`, `cluster`): the same word as in logs and metrics.
mod blame_label {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::guest::Blame;

    pub(super) fn serialize<S: Serializer>(blame: &Option<Blame>, s: S) -> Result<S::Ok, S::Error> {
        blame.map(Blame::label).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Blame>, D::Error> {
        let Some(label) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        match Blame::ALL.into_iter().find(|b| b.label() == label) {
            Some(blame) => Ok(Some(blame)),
            None => Err(D::Error::custom(format!(
                "unknown variant `{label}`, expected one of {}",
                Blame::ALL.map(Blame::label).join(", ")
            ))),
        }
    }
}

/// The table columns, in order.
const COLUMNS: [&str; 7] = [
    "NAME",
    "STATE",
    "DIGEST",
    "SOURCE",
    "LOADED",
    "RECONCILES",
    "LAST ERROR",
];

/// How much of the last error a table row shows; `/status` has all of it.
const LAST_ERROR_CHARS: usize = 80;

impl Status {
    /// The guest called `name`, if the host has one.
    pub fn guest(&self, name: &str) -> Option<&GuestStatus> {
        self.guests.iter().find(|g| g.name == name)
    }

    /// The document as `reconciled status` prints it: one row per guest, then the sources that
    /// deliver no guest and the guests' informers that are not synced, if any.
    ///
    /// Absent values show as `-`. The last column says why a guest is not serving (its
    /// `reason`, after its blame) and otherwise its last rejection (`last_error`), cut to 80
    /// characters. The digest shows its first 12 hex characters. Control characters (line
    /// breaks, but also terminal escapes from a guest's error message) show as spaces. Widths
    /// count characters, which lines up for all but double-width scripts.
    pub fn table(&self) -> String {
        if self.guests.is_empty() && self.sources_without_guests.is_empty() {
            return "no guests are loaded\n".into();
        }
        let sharded = self.replicas.is_some();
        let rows: Vec<Vec<String>> = self.guests.iter().map(|g| row(g, sharded)).collect();
        let mut columns: Vec<&str> = COLUMNS.to_vec();
        if sharded {
            columns.insert(2, "SHARD");
        }
        let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        for cells in std::iter::once(header).chain(rows) {
            for (i, (cell, width)) in cells.iter().zip(widths.iter().copied()).enumerate() {
                if i + 1 == cells.len() {
                    // No padding after the last column: trailing spaces only get in the way.
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}  "));
                }
            }
            out.push('\n');
        }
        if let Some(r) = &self.replicas {
            let held: Vec<String> = r.held.iter().map(u32::to_string).collect();
            out.push_str(&format!(
                "\nreplica {} (Leases in {}): holds shards [{}] of {}; replicas alive: {}\n",
                cell(Some(&r.identity)),
                cell(Some(&r.namespace)),
                held.join(","),
                r.shards.len(),
                r.members
                    .iter()
                    .map(|m| cell(Some(m)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !self.sources_without_guests.is_empty() {
            out.push_str("\nsources that deliver no guest:\n");
            for s in &self.sources_without_guests {
                let (source, problem) = (cell(Some(&s.source)), cell(Some(&s.problem)));
                out.push_str(&format!("  {source}: {problem}\n"));
            }
        }
        let throttled: Vec<String> = self
            .tenants
            .iter()
            .filter_map(|t| {
                let th = t.throttled.as_ref()?;
                Some(format!(
                    "  {}: since {}, used {:.0} ms of {:.0} ms in the last minute",
                    cell(Some(&t.tenant)),
                    th.since,
                    th.used_ms_last_minute,
                    th.budget_ms_per_minute
                ))
            })
            .collect();
        if !throttled.is_empty() {
            out.push_str(
                "
tenants throttled for their CPU budget:
",
            );
            out.push_str(&throttled.join("\n"));
            out.push('\n');
        }
        let unsynced: Vec<String> = self.guests.iter().flat_map(unsynced_informers).collect();
        if !unsynced.is_empty() {
            out.push_str("\ninformers not synced:\n");
            for line in unsynced {
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }
}

fn row(guest: &GuestStatus, sharded: bool) -> Vec<String> {
    let digest = guest.digest.as_deref().map(|d| {
        let hex = d.strip_prefix("sha256:").unwrap_or(d);
        hex.chars().take(12).collect::<String>()
    });
    let r = &guest.reconciles;
    // Why it is not serving now, if it is not; else the last rejection.
    let mut last_error = match (&guest.reason, guest.blame) {
        (None, _) => cell(guest.last_error.as_deref()),
        (Some(reason), None) => cell(Some(reason)),
        (Some(reason), Some(blame)) => format!("[blame: {blame}] {}", cell(Some(reason))),
    };
    if last_error.chars().count() > LAST_ERROR_CHARS {
        last_error = last_error.chars().take(LAST_ERROR_CHARS - 1).collect();
        last_error.push('…');
    }
    let mut row = vec![
        cell(Some(&guest.name)),
        guest.state.to_string(),
        cell(digest.as_deref()),
        cell(Some(&guest.source)),
        cell(guest.loaded_at.as_deref()),
        format!("{}/{}/{}", r.ok, r.failed, r.traps),
        last_error,
    ];
    if sharded {
        let shard = match (guest.shard, &guest.owner) {
            (Some(s), Some(o)) => format!("{s} on {}", cell(Some(o))),
            (Some(s), None) => format!("{s} on -"),
            (None, _) => "-".into(),
        };
        row.insert(2, shard);
    }
    row
}

fn unsynced_informers(guest: &GuestStatus) -> impl Iterator<Item = String> + '_ {
    let name = cell(Some(&guest.name));
    guest
        .informers
        .iter()
        .filter(|i| i.state != InformerState::Synced)
        .map(move |i| {
            let mut line = format!("  {name}: {} is {}", cell(Some(&i.kind)), i.state);
            if let Some(message) = &i.message {
                line.push_str(": ");
                line.push_str(&cell(Some(message)));
            }
            line
        })
}

/// A value as a table cell: absent or empty as `-`, control characters as spaces.
fn cell(text: Option<&str>) -> String {
    match text {
        None | Some("") => "-".into(),
        Some(text) => crate::text::one_line(text),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn guest(name: &str, state: GuestState) -> GuestStatus {
        GuestStatus {
            name: name.into(),
            state,
            reason: None,
            blame: None,
            failing_since: None,
            failing_keys: None,
            digest: None,
            source: format!("file /{name}.wasm"),
            loaded_at: None,
            loads: 0,
            rejections: 0,
            last_error: None,
            last_load_ms: None,
            reconciles: Reconciles::default(),
            queued: 0,
            informers: Vec::new(),
            memory: None,
            shard: None,
            owner: None,
            shadow: None,
        }
    }

    fn informer(kind: &str, state: InformerState, message: Option<&str>) -> GuestInformer {
        GuestInformer {
            kind: kind.into(),
            state,
            message: message.map(String::from),
            silent_for_seconds: None,
            resource_version: 0,
        }
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "the whole document as scripts read it, field by field, in one literal to compare against"
    )]
    fn the_document_keeps_the_field_names_and_words_scripts_read() {
        let failing = GuestStatus {
            reason: Some("worker panicked on team-a/work".into()),
            blame: Some(Blame::Host),
            failing_since: Some("2026-11-29T15:00:00Z".into()),
            failing_keys: Some(1),
            digest: Some("ab".repeat(32)),
            loaded_at: Some("2026-11-29T14:00:00Z".into()),
            loads: 2,
            rejections: 1,
            last_error: Some("not a valid wasm component".into()),
            last_load_ms: Some(12.5),
            reconciles: Reconciles {
                ok: 10,
                failed: 1,
                traps: 2,
                worker_panics: 3,
                errors_by_blame: ByBlame {
                    guest: 3,
                    host: 3,
                    cluster: 0,
                },
            },
            queued: 4,
            informers: vec![GuestInformer {
                silent_for_seconds: Some(1.5),
                resource_version: 42,
                ..informer("v1/ConfigMap", InformerState::KindNotFound, Some("gone"))
            }],
            memory: Some(GuestMemory {
                cached_bytes: 3500,
                peak_instance_bytes: 1_179_648,
                compiled_bytes: 420_000,
            }),
            ..guest("team-a/rec/rec", GuestState::Failing)
        };
        let status = Status {
            guests: vec![failing],
            informers: vec![InformerStatus {
                kind: "v1/ConfigMap".into(),
                scope: "all namespaces".into(),
                state: InformerState::Synced,
                message: None,
                objects: 7,
                cached_bytes: 7000,
                silent_for_seconds: None,
                resource_version: 42,
            }],
            sources_without_guests: vec![SourceProblem {
                source: "configmap team-b/x".into(),
                problem: "no .wasm key".into(),
            }],
            uptime_seconds: 60,
            tenants: vec![TenantStatus {
                tenant: "team-a".into(),
                weight: 2,
                cpu_seconds: 1.5,
                compile_seconds: 0.25,
                used_ms_last_minute: 900.0,
                cpu_budget_ms_per_minute: Some(600.0),
                throttled: Some(Throttled {
                    since: "2026-11-29T15:00:00Z".into(),
                    budget_ms_per_minute: 600.0,
                    used_ms_last_minute: 900.0,
                }),
                throttled_seconds: 12.0,
                throttles: 1,
                guests: vec![GuestCpu {
                    name: "team-a/rec/rec".into(),
                    cpu_seconds: 1.5,
                }],
            }],
            replicas: None,
        };
        let wire = json!({
            "guests": [{
                "name": "team-a/rec/rec",
                "state": "failing",
                "reason": "worker panicked on team-a/work",
                "blame": "host",
                "failing_since": "2026-11-29T15:00:00Z",
                "failing_keys": 1,
                "digest": "ab".repeat(32),
                "source": "file /team-a/rec/rec.wasm",
                "loaded_at": "2026-11-29T14:00:00Z",
                "loads": 2,
                "rejections": 1,
                "last_error": "not a valid wasm component",
                "last_load_ms": 12.5,
                "reconciles": {
                    "ok": 10, "failed": 1, "traps": 2, "worker_panics": 3,
                    "errors_by_blame": {"guest": 3, "host": 3, "cluster": 0},
                },
                "queued": 4,
                "informers": [{
                    "kind": "v1/ConfigMap",
                    "state": "KindNotFound",
                    "message": "gone",
                    "silent_for_seconds": 1.5,
                    "resource_version": 42,
                }],
                "memory": {"cached_bytes": 3500, "peak_instance_bytes": 1_179_648, "compiled_bytes": 420_000},
            }],
            "informers": [{
                "kind": "v1/ConfigMap",
                "scope": "all namespaces",
                "state": "Synced",
                "message": null,
                "objects": 7,
                "cached_bytes": 7000,
                "silent_for_seconds": null,
                "resource_version": 42,
            }],
            "sources_without_guests": [{"source": "configmap team-b/x", "problem": "no .wasm key"}],
            "uptime_seconds": 60,
            "tenants": [{
                "tenant": "team-a",
                "weight": 2,
                "cpu_seconds": 1.5,
                "compile_seconds": 0.25,
                "used_ms_last_minute": 900.0,
                "cpu_budget_ms_per_minute": 600.0,
                "throttled": {
                    "since": "2026-11-29T15:00:00Z",
                    "budget_ms_per_minute": 600.0,
                    "used_ms_last_minute": 900.0,
                },
                "throttled_seconds": 12.0,
                "throttles": 1,
                "guests": [{"name": "team-a/rec/rec", "cpu_seconds": 1.5}],
            }],
        });
        assert_eq!(serde_json::to_value(&status).unwrap(), wire);
        assert_eq!(serde_json::from_value::<Status>(wire).unwrap(), status);
    }

    #[test]
    fn every_guest_state_and_blame_is_written_lower_case() {
        for state in [
            GuestState::Loading,
            GuestState::Serving,
            GuestState::Waiting,
            GuestState::Failing,
            GuestState::Rejected,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), json!(state.label()));
        }
        for blame in Blame::ALL {
            let g = GuestStatus {
                blame: Some(blame),
                ..guest("g", GuestState::Failing)
            };
            let wire = serde_json::to_value(&g).unwrap();
            assert_eq!(wire["blame"], json!(blame.label()));
            assert_eq!(serde_json::from_value::<GuestStatus>(wire).unwrap(), g);
        }
    }

    #[test]
    fn a_document_with_an_unknown_word_is_refused_and_unknown_fields_are_ignored() {
        let err = serde_json::from_value::<Status>(json!({
            "guests": [{"name": "g", "state": "paused", "source": "s"}]
        }))
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `paused`"),
            "{err}"
        );
        let err = serde_json::from_value::<Status>(json!({
            "guests": [{"name": "g", "state": "failing", "blame": "moon", "source": "s"}]
        }))
        .unwrap_err();
        assert!(err.to_string().contains("unknown variant `moon`"), "{err}");

        let lenient: Status = serde_json::from_value(json!({
            "guests": [{"name": "g", "state": "serving", "source": "s", "new_field": 1}],
            "something_new": true
        }))
        .unwrap();
        let expected = GuestStatus {
            source: "s".into(),
            ..guest("g", GuestState::Serving)
        };
        assert_eq!(lenient.guests, [expected]);
        assert_eq!(lenient.uptime_seconds, 0);
    }

    #[test]
    fn renders_guests_as_an_aligned_table() {
        let status = Status {
            guests: vec![
                GuestStatus {
                    digest: Some(
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
                    ),
                    source: "configmap team-a/my-rec key rec.wasm".into(),
                    loaded_at: Some("2026-11-29T15:00:00Z".into()),
                    loads: 3,
                    rejections: 1,
                    reconciles: Reconciles {
                        ok: 10,
                        failed: 1,
                        ..Reconciles::default()
                    },
                    informers: vec![informer("v1/ConfigMap", InformerState::Synced, None)],
                    ..guest("team-a/my-rec/rec", GuestState::Serving)
                },
                GuestStatus {
                    reason: Some(format!(
                        "component does not export reconcile\nline two {}",
                        "x".repeat(80)
                    )),
                    last_error: Some("component does not export reconcile".into()),
                    source: "file /x.wasm".into(),
                    reconciles: Reconciles {
                        failed: 2,
                        ..Reconciles::default()
                    },
                    informers: vec![
                        informer("v1/Secret", InformerState::Forbidden, Some("forbidden")),
                        informer("v1/Pod", InformerState::Syncing, None),
                    ],
                    ..guest("cmgen", GuestState::Rejected)
                },
            ],
            ..Status::default()
        };
        let expected = "\
NAME               STATE     DIGEST        SOURCE                                LOADED                RECONCILES  LAST ERROR
team-a/my-rec/rec  serving   0123456789ab  configmap team-a/my-rec key rec.wasm  2026-11-29T15:00:00Z  10/1/0      -
cmgen              rejected  -             file /x.wasm                          -                     0/2/0       component does not export reconcile line two xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…

informers not synced:
  cmgen: v1/Secret is Forbidden: forbidden
  cmgen: v1/Pod is Syncing
";
        let table = status.table();
        assert_eq!(table, expected);
        let last = table.lines().nth(2).unwrap();
        let error = &last[last.find("component").unwrap()..];
        assert_eq!(error.chars().count(), 80);
        assert!(error.ends_with('…'));
    }

    #[test]
    fn a_failing_guest_shows_its_blame_before_its_reason() {
        let status = Status {
            guests: vec![GuestStatus {
                reason: Some("worker panicked on ns/work".into()),
                blame: Some(Blame::Host),
                last_error: Some("an older rejection".into()),
                ..guest("rec", GuestState::Failing)
            }],
            ..Status::default()
        };
        let table = status.table();
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.starts_with("rec   failing")
                && row.ends_with("[blame: host] worker panicked on ns/work"),
            "{table}"
        );
    }

    #[test]
    fn renders_absent_and_empty_values_as_dashes() {
        let status = Status {
            guests: vec![GuestStatus {
                source: String::new(),
                digest: Some(String::new()),
                ..guest("a", GuestState::Loading)
            }],
            ..Status::default()
        };
        assert_eq!(
            status.table(),
            "\
NAME  STATE    DIGEST  SOURCE  LOADED  RECONCILES  LAST ERROR
a     loading  -       -       -       0/0/0       -
"
        );
    }

    #[test]
    fn a_terminal_escape_in_a_guest_error_is_shown_as_spaces() {
        let status = Status {
            guests: vec![GuestStatus {
                reason: Some("bad\x1b[2Jthing\r\nhere".into()),
                ..guest("a", GuestState::Rejected)
            }],
            ..Status::default()
        };
        let table = status.table();
        assert!(
            !table.contains('\x1b') && !table.contains('\r'),
            "{table:?}"
        );
        assert!(table.ends_with("bad [2Jthing  here\n"), "{table:?}");
    }

    #[test]
    fn sources_without_guests_are_listed_under_the_table() {
        let status = Status {
            sources_without_guests: vec![SourceProblem {
                source: "configmap team-b/x".into(),
                problem: "no key ends in .wasm or .wasm.gz".into(),
            }],
            ..Status::default()
        };
        assert_eq!(
            status.table(),
            "\
NAME  STATE  DIGEST  SOURCE  LOADED  RECONCILES  LAST ERROR

sources that deliver no guest:
  configmap team-b/x: no key ends in .wasm or .wasm.gz
"
        );
    }

    #[test]
    fn throttled_tenants_are_listed_under_the_table() {
        let tenant = |name: &str, throttled: Option<Throttled>| TenantStatus {
            tenant: name.into(),
            weight: 1,
            cpu_seconds: 3.0,
            compile_seconds: 0.5,
            used_ms_last_minute: 7200.0,
            cpu_budget_ms_per_minute: Some(6000.0),
            throttled,
            throttled_seconds: 4.0,
            throttles: 1,
            guests: Vec::new(),
        };
        let status = Status {
            guests: vec![guest("team-a/x/rec", GuestState::Serving)],
            tenants: vec![
                tenant(
                    "team-a",
                    Some(Throttled {
                        since: "2026-12-01T19:00:00Z".into(),
                        budget_ms_per_minute: 6000.0,
                        used_ms_last_minute: 7200.0,
                    }),
                ),
                tenant("team-b", None),
            ],
            ..Status::default()
        };
        let table = status.table();
        assert!(
            table.ends_with(
                "\ntenants throttled for their CPU budget:\n  team-a: since 2026-12-01T19:00:00Z, used 7200 ms of 6000 ms in the last minute\n"
            ),
            "{table}"
        );
        assert!(!table.contains("team-b"), "only throttled tenants: {table}");
    }

    #[test]
    fn renders_no_guests_as_a_sentence() {
        assert_eq!(Status::default().table(), "no guests are loaded\n");
        let empty: Status = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.table(), "no guests are loaded\n");
    }

    #[test]
    fn among_replicas_the_table_shows_each_guests_shard_and_owner_and_this_replicas_view() {
        let standby = GuestStatus {
            shard: Some(3),
            owner: Some("replica-b".into()),
            reason: Some("shard 3 is not held by this replica".into()),
            ..guest("stamp", GuestState::Standby)
        };
        let status = Status {
            guests: vec![standby],
            replicas: Some(ReplicasStatus {
                identity: "replica-a".into(),
                namespace: "reconciled-system".into(),
                members: vec!["replica-a".into(), "replica-b".into()],
                held: vec![0, 2],
                shards: (0..4)
                    .map(|shard| ShardStatus {
                        shard,
                        ..ShardStatus::default()
                    })
                    .collect(),
            }),
            ..Status::default()
        };
        let table = status.table();
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        assert!(header.starts_with("NAME   STATE    SHARD"), "{table}");
        assert!(
            lines.next().unwrap().contains("standby  3 on replica-b"),
            "{table}"
        );
        assert!(
            table.contains("replica replica-a (Leases in reconciled-system): holds shards [0,2] of 4; replicas alive: replica-a, replica-b"),
            "{table}"
        );
        let alone = Status {
            replicas: None,
            ..status
        };
        assert!(
            !alone.table().contains("SHARD"),
            "a host alone has no shard column"
        );
    }
}
