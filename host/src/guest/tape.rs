//! Recording what a guest did in one reconcile: its request, every read with its answer, every
//! write and Event with how it was answered, and how it ended. `reconciled run --record` writes
//! these to a folder for `reconciled replay`; `reconciled test` and `replay` read the same record
//! of a guest run offline.
//!
//! Secrets' values never reach a recording. In a Secret's objects and in merge and JSON patches
//! of one (the kind the call names decides, since a patch says nothing of its kind), `data` and
//! `stringData` keep their keys and patch operations their paths, each value replaced by
//! [`REDACTED`], and the last-applied annotation is dropped. Where it may surprise: a secret
//! copied into another kind (a password in a ConfigMap) is recorded like any other data.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::guest::bindings::{GuestError, Gvk, Outcome};
use crate::guest::call::CallError;

/// What a Secret's values read as in a recording.
pub const REDACTED: &str = "(redacted)";

/// One write the guest made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    /// `create`, `update`, `merge-patch`, `json-patch`, `strategic-merge-patch`, `apply` or
    /// `delete`.
    pub verb: String,
    /// `apiVersion/Kind`, e.g. `v1/ConfigMap`.
    pub kind: String,
    /// Empty for cluster-scoped kinds.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name (for a create, from the body).
    pub name: String,
    /// `status` for a write to the status subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
    /// The field manager of an apply.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "fieldManager"
    )]
    pub field_manager: Option<String>,
    /// Whether an apply forces conflicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// What was sent, without the metadata the server assigns (uid, resourceVersion,
    /// generation, creationTimestamp, managedFields), which would only make a diff noisy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The error it was answered with (`conflict`, `not-found`…), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its place among the call's reads and writes, from 1 (0: not recorded).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Write {
    /// What identifies the write when two runs are compared: verb, kind, object, subresource.
    pub fn key(&self) -> String {
        let sub = self
            .subresource
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let at = if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        };
        format!("{} {} {at}{sub}", self.verb, self.kind)
    }
}

/// One Event the guest recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// UpperCamelCase reason.
    pub reason: String,
    /// `Kind namespace/name` of the object it is about.
    pub regarding: String,
    /// The message.
    pub message: String,
}

/// One read and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Read {
    /// `cache.get`, `cache.list`, `api.get` or `api.list`.
    pub op: String,
    /// `apiVersion/Kind`.
    pub kind: String,
    /// The namespace asked for (empty: all, for a list).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The name, for a get.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Label selector, field matches and continue token of a list, as one line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query: String,
    /// The objects answered (one for a get).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Value>,
    /// The error answered, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its place among the call's reads and writes, from 1.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step: u32,
}

impl Read {
    /// What identifies the read when two runs are compared (the answer aside).
    pub fn key(&self) -> String {
        format!(
            "{} {} {}/{} {}",
            self.op, self.kind, self.namespace, self.name, self.query
        )
    }
}

/// What one reconcile did, so far (kept in the call's store while it runs).
#[derive(Debug, Clone, Default)]
pub struct Tape {
    /// Seed of the guest's random bytes in this call.
    pub seed: u64,
    /// Bytes of answers and bodies kept so far (see [`TAPE_BYTES`]).
    pub bytes: usize,
    /// Whether something was left out for [`TAPE_BYTES`].
    pub cut: bool,
    /// Reads, in order.
    pub reads: Vec<Read>,
    /// Writes, in order.
    pub writes: Vec<Write>,
    /// Events, in order.
    pub events: Vec<Event>,
}

impl Tape {
    /// The place of the next read or write.
    pub fn next_step(&self) -> u32 {
        (self.reads.len() + self.writes.len() + 1) as u32
    }

    /// Whether `bytes` more fit in [`TAPE_BYTES`]; counts them if they do, marks the tape cut
    /// if not.
    pub fn room_for(&mut self, bytes: usize) -> bool {
        if self.bytes.saturating_add(bytes) > TAPE_BYTES {
            self.cut = true;
            return false;
        }
        self.bytes += bytes;
        true
    }
}

/// The object a reconcile was about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestKey {
    /// Empty for cluster-scoped kinds.
    #[serde(default)]
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// One recorded reconcile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    /// The guest's name.
    pub guest: String,
    /// The sha256 of the module that ran.
    pub module: String,
    /// What was reconciled.
    pub request: RequestKey,
    /// When the reconcile started (RFC 3339): a replay's guest clock starts here.
    pub started: String,
    /// Seed of the guest's random bytes: a replay's guest gets the same ones.
    pub seed: u64,
    /// How it ended: see [`outcome_of`].
    pub outcome: String,
    /// The guest's error or trap message, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether answers or bodies were left out to keep the recording under its size bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
    /// Reads, in order.
    #[serde(default)]
    pub reads: Vec<Read>,
    /// Writes, in order.
    #[serde(default)]
    pub writes: Vec<Write>,
    /// Events, in order.
    #[serde(default)]
    pub events: Vec<Event>,
    /// The settings the guest read from, when it was given any: a replay hands it the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<crate::guest::settings::GuestSettings>,
}

/// `apiVersion/Kind` of a declared kind.
pub fn kind_name(kind: &Gvk) -> String {
    if kind.group.is_empty() {
        format!("{}/{}", kind.version, kind.kind)
    } else {
        format!("{}/{}/{}", kind.group, kind.version, kind.kind)
    }
}

/// Most bytes of answers and bodies one call's tape keeps: past it, reads keep no objects and
/// writes no bodies, and the recording says it was cut (a guest cannot make the host hold its
/// whole 64 MiB answer budget a second time, parsed).
pub const TAPE_BYTES: usize = 4 << 20;

/// Whether `kind` is core/v1 Secret, whose values a recording never holds.
pub fn is_secret(kind: &Gvk) -> bool {
    kind.group.is_empty() && kind.kind == "Secret"
}

/// A JSON text (an object, a merge patch or a JSON patch of `kind`) as a recording shows it:
/// parsed, with a Secret's values redacted. Decided by the kind the call names, not by what
/// the text says it is: a patch carries no `kind`. Unparseable text is kept as a string, unless
/// it is about a Secret.
pub fn recorded(text: &str, kind: &Gvk) -> Value {
    let secret = is_secret(kind);
    let mut v: Value = serde_json::from_str(text)
        .unwrap_or_else(|_| Value::String(if secret { REDACTED.into() } else { text.into() }));
    if secret || v["kind"] == "Secret" {
        redact(&mut v);
    }
    v
}

/// Replaces a Secret's values with [`REDACTED`], keeping the keys: `data` and `stringData`,
/// the `value` of every JSON patch operation, and the last-applied annotation (a copy of it
/// all).
pub fn redact(v: &mut Value) {
    if let Some(ops) = v.as_array_mut() {
        for op in ops {
            if let Some(value) = op.get_mut("value") {
                *value = Value::String(REDACTED.into());
            }
        }
        return;
    }
    for field in ["data", "stringData"] {
        if let Some(m) = v.get_mut(field).and_then(Value::as_object_mut) {
            for value in m.values_mut() {
                *value = Value::String(REDACTED.into());
            }
        }
    }
    if let Some(a) = v
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A body as a write record shows it: server-assigned metadata left out (redact Secrets first,
/// with [`recorded`]).
pub fn shown(body: &Value) -> Value {
    let mut v = body.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        ] {
            m.remove(f);
        }
    }
    v
}

/// The WIT error case of a guest error: `conflict`, `not-found`…
pub fn error_case(e: &GuestError) -> (&'static str, &str) {
    match e {
        GuestError::NotFound(m) => ("not-found", m),
        GuestError::Conflict(m) => ("conflict", m),
        GuestError::Forbidden(m) => ("forbidden", m),
        GuestError::Invalid(m) => ("invalid", m),
        GuestError::TooLarge(m) => ("too-large", m),
        GuestError::NotDeclared(m) => ("not-declared", m),
        GuestError::UnindexedField(m) => ("unindexed-field", m),
        GuestError::Timeout(m) => ("timeout", m),
        GuestError::Other(m) => ("other", m),
    }
}

/// How a reconcile ended, as one word (with its detail): `done`, `requeue-after <ms>ms`,
/// `error <case>` (`error conflict`), `trap`, `deadline` or `memory`; and the message that goes
/// with an error.
pub fn outcome_of(
    result: &Result<Result<Outcome, GuestError>, CallError>,
) -> (String, Option<String>) {
    match result {
        Ok(Ok(Outcome::Done)) => ("done".into(), None),
        Ok(Ok(Outcome::RequeueAfter(ms))) => (format!("requeue-after {ms}ms"), None),
        Ok(Err(e)) => {
            let (case, m) = error_case(e);
            (format!("error {case}"), Some(m.to_string()))
        }
        Err(e) => {
            let word = match e {
                CallError::Deadline { .. } => "deadline",
                CallError::Memory(_) => "memory",
                CallError::Trap { .. } => "trap",
            };
            (word.into(), Some(e.to_string()))
        }
    }
}

#[derive(Debug)]
struct State {
    /// One YAML file per reconcile in this folder.
    dir: PathBuf,
    kept: u64,
    bytes: u64,
    full: bool,
}

/// Takes the recordings of one guest's reconciles, up to a size and until a time.
///
/// Where it may surprise: a guest with a recorder gets random bytes from a generator seeded per
/// reconcile (the seed is recorded, so a replay gets the same bytes), not from the operating
/// system's source: recording is for debugging, not for guests that make keys.
#[derive(Debug)]
pub struct Recorder {
    max_bytes: u64,
    until: Option<Instant>,
    state: Mutex<State>,
}

impl Recorder {
    /// Records into `dir` (created if missing), at most `max_bytes` of YAML, for `for_at_most`.
    pub fn to_dir(dir: PathBuf, max_bytes: u64, for_at_most: Duration) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            max_bytes,
            until: Instant::now().checked_add(for_at_most),
            state: Mutex::new(State {
                dir,
                kept: 0,
                bytes: 0,
                full: false,
            }),
        })
    }

    /// Whether it still takes recordings (neither full nor out of time).
    pub fn active(&self) -> bool {
        !self.state.lock().unwrap().full && self.until.is_none_or(|t| Instant::now() < t)
    }

    /// How many reconciles were recorded.
    pub fn kept(&self) -> u64 {
        self.state.lock().unwrap().kept
    }

    /// Keeps one recording, unless the size or time bound is reached (said once, in the log).
    pub fn keep(&self, recording: Recording) {
        let mut s = self.state.lock().unwrap();
        if s.full {
            return;
        }
        if self.until.is_some_and(|t| Instant::now() >= t) {
            s.full = true;
            tracing::warn!(guest = %recording.guest, recorded = s.kept, "recording stopped: its time is up");
            return;
        }
        let State {
            dir,
            kept,
            bytes,
            full,
        } = &mut *s;
        let text = match serde_saphyr::to_string(&recording) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(guest = %recording.guest, "cannot record a reconcile: {e}");
                return;
            }
        };
        let size = text.len() as u64;
        if *bytes + size > self.max_bytes {
            *full = true;
            tracing::warn!(guest = %recording.guest, recorded = *kept, bytes = *bytes, "recording stopped: its size limit is reached");
            return;
        }
        let path = dir.join(format!("{:06}.yaml", *kept + 1));
        // Through a temporary name: a host stopped mid-write leaves no half recording.
        let partial = path.with_extension("yaml.partial");
        let written =
            std::fs::write(&partial, text).and_then(|()| std::fs::rename(&partial, &path));
        if let Err(e) = written {
            *full = true;
            tracing::warn!(guest = %recording.guest, "recording stopped: cannot write {}: {e}", path.display());
            return;
        }
        *bytes += size;
        *kept += 1;
    }
}

/// A shared [`Recorder`], compared by identity, so that settings holding one stay comparable.
#[derive(Debug, Clone)]
pub struct RecorderRef(pub std::sync::Arc<Recorder>);

impl PartialEq for RecorderRef {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RecorderRef {}

/// The current time as RFC 3339, for [`Recording::started`].
pub fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::new(since.as_secs() as i64, since.subsec_nanos() as i32)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_values_are_redacted_and_its_keys_kept() {
        let secret = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Secret".into(),
        };
        let configmap = Gvk {
            kind: "ConfigMap".into(),
            ..secret.clone()
        };
        let v = recorded(
            r#"{"kind":"Secret","metadata":{"name":"s"},"data":{"password":"aHVudGVyMg=="},"stringData":{"token":"t"}}"#,
            &configmap,
        );
        assert_eq!(
            v["data"]["password"], REDACTED,
            "a body that says it is a Secret"
        );
        assert_eq!(v["stringData"]["token"], REDACTED);
        // Patches of a Secret say nothing of their kind: the call's kind decides.
        let merge = recorded(r#"{"data":{"password":"cGxhaW4="}}"#, &secret);
        assert_eq!(merge["data"]["password"], REDACTED);
        let ops = recorded(
            r#"[{"op":"replace","path":"/data/password","value":"cGxhaW4="}]"#,
            &secret,
        );
        assert_eq!(ops[0]["value"], REDACTED);
        assert_eq!(ops[0]["path"], "/data/password", "where it went is kept");
        let applied = recorded(
            r#"{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"p\":\"x\"}}"}},"data":{"p":"eA=="}}"#,
            &secret,
        );
        assert!(
            applied["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .is_empty()
        );
        assert_eq!(recorded("not json", &secret), REDACTED);
        let cm = recorded(
            r#"{"kind":"ConfigMap","data":{"password":"plain"}}"#,
            &configmap,
        );
        assert_eq!(cm["data"]["password"], "plain", "only Secrets");
    }

    #[test]
    fn a_recorder_stops_at_its_size_limit_and_says_so_once() {
        let dir = std::env::temp_dir().join(format!("reconciled-tape-{}", std::process::id()));
        let r = Recorder::to_dir(dir.clone(), 600, Duration::from_secs(60)).unwrap();
        let rec = Recording {
            guest: "g".into(),
            module: "m".into(),
            request: RequestKey {
                namespace: "ns".into(),
                name: "n".into(),
            },
            started: now_rfc3339(),
            seed: 1,
            outcome: "done".into(),
            message: None,
            cut: false,
            reads: vec![],
            writes: vec![],
            events: vec![],
            settings: None,
        };
        for _ in 0..20 {
            r.keep(rec.clone());
        }
        let files = std::fs::read_dir(&dir).unwrap().count() as u64;
        assert_eq!(files, r.kept());
        assert!((1..20).contains(&files), "{files}");
        let back: Recording =
            serde_saphyr::from_str(&std::fs::read_to_string(dir.join("000001.yaml")).unwrap())
                .unwrap();
        assert_eq!(back, rec);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
