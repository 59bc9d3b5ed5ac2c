//! The status document: what `/status` serves and `reconciled status` renders as a table
//! (`table`). The schema only: the supervisor builds it (see `supervisor/report.rs`).
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

mod table;

use serde::{Deserialize, Serialize};

use crate::guest::Blame;

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
    /// The hash of the serving version's settings
    /// ([`settings_hash`](crate::rollout::progress::settings_hash)): with `digest`, the
    /// revision serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_hash: Option<String>,
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
    /// When the last rejection happened, RFC 3339 with microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
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
    /// For a guest whose keys are split across replicas (`shard_keys`), the uid ranges of the
    /// keys this replica watches and reconciles (`none` when it holds no shard); `shard` and
    /// `owner` are then absent, since no one replica runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_shards: Option<String>,
    /// Its shadow version, when it has one (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<GuestShadow>,
    /// Its latest step-by-step rollout, running or ended (absent if it never had one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::rollout::progress::Progress>,
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
    /// Another replica holds its shard and reconciles it (`owner` says which). Under warm
    /// standby it is loaded and synced here, and this replica takes over at once if that one
    /// goes; under cold standby it is not loaded here, and a takeover loads it first.
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

/// A guest's reconciles, over every version it has served (not those a rollout's new revision
/// ran before it served: `rollout` counts those).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciles {
    /// Returned Ok.
    pub ok: u64,
    /// Returned an error, or were cut off by a deadline the cluster or the host caused.
    pub failed: u64,
    /// Trapped by the guest's own fault (a panic, its deadline or a limit).
    pub traps: u64,
    /// Worker panics caught (each restarted its worker).
    #[serde(default)]
    pub worker_panics: u64,
    /// Failed reconciles (errors, traps, worker panics) by blame.
    #[serde(default)]
    pub errors_by_blame: ByBlame,
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

/// An informer's health, named as [`crate::informer::State`]'s variants are.
///
/// A copy of that enum for the wire: the conversion (in `supervisor/report.rs`) is an
/// exhaustive match, so a state added there does not compile until it is added here.
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
impl Status {
    /// The guest called `name`, if the host has one.
    pub fn guest(&self, name: &str) -> Option<&GuestStatus> {
        self.guests.iter().find(|g| g.name == name)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A guest of `state` with nothing else to say, for tests to fill in.
    pub(crate) fn guest(name: &str, state: GuestState) -> GuestStatus {
        GuestStatus {
            name: name.into(),
            state,
            reason: None,
            blame: None,
            failing_since: None,
            failing_keys: None,
            digest: None,
            settings_hash: None,
            source: format!("file /{name}.wasm"),
            loaded_at: None,
            loads: 0,
            rejections: 0,
            last_error: None,
            last_error_at: None,
            last_load_ms: None,
            reconciles: Reconciles::default(),
            queued: 0,
            informers: Vec::new(),
            memory: None,
            shard: None,
            owner: None,
            key_shards: None,
            shadow: None,
            rollout: None,
        }
    }

    pub(super) fn informer(
        kind: &str,
        state: InformerState,
        message: Option<&str>,
    ) -> GuestInformer {
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
            last_error_at: None,
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
}
