//! An API server in memory, behind a real `kube::Client`: the guest's writes and uncached reads
//! take the very path they take live (URL building, typed errors from HTTP statuses), and land
//! here instead of on a cluster.
//!
//! It keeps objects, assigns resourceVersions and uids, applies writes as
//! [`semantics`] models them, answers with injected faults where a fixture
//! asks for them, records every write and Event, and feeds each write to the offline informers
//! as a watch would, so that the guest reads its own writes.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::informer::Scope;
use crate::informer::store::Writer;
use crate::object::Object;
use crate::offline::feed::{Cache, fields_match};
use crate::offline::kinds::{Kind, Kinds};
use crate::offline::records::shown;
pub use crate::offline::records::{
    Change, Event, Fault, Interfered, Interference, Lifecycle, Write, error_case, object_name,
    split_key,
};
use crate::offline::semantics::{
    self, Assigned, GC_LIMITS, Refusal, meta, meta_mut, owned_by, timestamp,
};
use crate::selector::{FieldSelector, LabelSelector};

mod perturb;

type Key = (String, String, String, String);

fn key_of(kind: &Kind, namespace: &str, name: &str) -> Key {
    (
        kind.resource.group.clone(),
        kind.resource.plural.clone(),
        namespace.to_string(),
        name.to_string(),
    )
}

struct State {
    kinds: Kinds,
    objects: BTreeMap<Key, Value>,
    rv: u64,
    uids: u64,
    /// Seconds since the Unix epoch of every timestamp the server writes.
    now: Duration,
    faults: Vec<Fault>,
    writes: Vec<Write>,
    events: Vec<Event>,
    caches: Vec<Cache>,
    /// What this server could not model, for the report.
    notes: BTreeSet<&'static str>,
    /// What `--chaos` imposes on the call under way.
    interference: Interference,
    /// What the current call's interference did.
    interfered: Interfered,
    /// Writes to the caches held back while [`Interference::hold_feed`] is on.
    held: Vec<(String, String, Value, bool)>,
    /// Per object (`apiVersion/Kind namespace/name`): how many times it came into being and
    /// how many times it went.
    lifecycle: BTreeMap<String, Lifecycle>,
}

/// The in-memory API server. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct Server {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock().unwrap();
        f.debug_struct("Server")
            .field("objects", &s.objects.len())
            .field("writes", &s.writes.len())
            .finish_non_exhaustive()
    }
}

/// Why an object cannot be put on the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its kind is not served.
    #[error(transparent)]
    Kind(#[from] crate::offline::kinds::Error),
    /// It lacks what every object has.
    #[error("object {what}: {reason}")]
    Object {
        /// The object, as far as it can be named.
        what: String,
        /// What is wrong.
        reason: String,
    },
}

impl Server {
    /// An empty server for `kinds`, whose timestamps read `now` (since the Unix epoch).
    pub fn new(kinds: Kinds, now: Duration) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                kinds,
                objects: BTreeMap::new(),
                rv: 0,
                uids: 0,
                now,
                faults: Vec::new(),
                writes: Vec::new(),
                events: Vec::new(),
                caches: Vec::new(),
                notes: BTreeSet::new(),
                interference: Interference::default(),
                interfered: Interfered::default(),
                held: Vec::new(),
                lifecycle: BTreeMap::new(),
            })),
        }
    }

    /// Stores `object` as it is, filling in what the server would have assigned (uid,
    /// resourceVersion, creationTimestamp, generation) where it is missing.
    pub fn seed(&self, mut object: Value) -> Result<(), Error> {
        let mut s = self.state.lock().unwrap();
        let api_version = object["apiVersion"].as_str().unwrap_or("").to_string();
        let kind_name = object["kind"].as_str().unwrap_or("").to_string();
        let what = format!("{api_version}/{kind_name} {}", meta(&object, "name"));
        let kind = s.kinds.of_object(&api_version, &kind_name)?.clone();
        let name = meta(&object, "name").to_string();
        if name.is_empty() {
            return Err(Error::Object {
                what,
                reason: "no metadata.name".into(),
            });
        }
        let namespace = meta(&object, "namespace").to_string();
        if kind.resource.namespaced == namespace.is_empty() {
            return Err(Error::Object {
                what,
                reason: if kind.resource.namespaced {
                    "a namespaced kind needs metadata.namespace".into()
                } else {
                    "a cluster-scoped kind has no metadata.namespace".into()
                },
            });
        }
        let rv = match meta(&object, "resourceVersion").parse::<u64>() {
            Ok(rv) => rv,
            Err(_) => s.next_rv(),
        };
        s.rv = s.rv.max(rv);
        let assigned = s.assign();
        let m = meta_mut(&mut object);
        m.entry("uid").or_insert_with(|| assigned.uid.into());
        m.entry("creationTimestamp")
            .or_insert_with(|| assigned.created.into());
        m.insert("resourceVersion".into(), rv.to_string().into());
        if kind.status {
            m.entry("generation").or_insert_with(|| 1.into());
        }
        s.objects.insert(key_of(&kind, &namespace, &name), object);
        Ok(())
    }

    /// Makes the server's copy of an object one version newer than what caches attached so far
    /// hold: a write from the cached copy then conflicts, as after a change the watch has not
    /// delivered yet. Returns whether the object exists.
    pub fn advance(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let mut s = self.state.lock().unwrap();
        let Ok(kind) = s.kinds.of_object(api_version, kind).cloned() else {
            return false;
        };
        let rv = s.next_rv();
        match s.objects.get_mut(&key_of(&kind, namespace, name)) {
            Some(o) => {
                meta_mut(o).insert("resourceVersion".into(), rv.to_string().into());
                true
            }
            None => false,
        }
    }

    /// Adds a fault.
    pub fn fail(&self, fault: Fault) {
        self.state.lock().unwrap().faults.push(fault);
    }

    /// Fills `writer` with the objects of `kind` that `scope` covers, and keeps it current with
    /// every later write, as a watch would.
    pub fn attach(&self, kind: &Kind, scope: Scope, writer: Writer) {
        let mut s = self.state.lock().unwrap();
        let cache = Cache {
            group: kind.resource.group.clone(),
            plural: kind.resource.plural.clone(),
            scope,
            writer,
        };
        let items: Vec<_> = s
            .objects
            .iter()
            .filter(|(k, v)| k.0 == cache.group && k.1 == cache.plural && cache.holds(v))
            .filter_map(|(_, v)| Object::from_value(v.clone(), &cache.scope.transform, None).ok())
            .map(Arc::new)
            .collect();
        cache.writer.replace(items, s.rv);
        s.caches.push(cache);
    }

    /// The writes so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.state.lock().unwrap().writes.clone()
    }

    /// The Events so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().unwrap().events.clone()
    }

    /// What the server could not model for the writes it saw.
    pub fn notes(&self) -> Vec<&'static str> {
        self.state.lock().unwrap().notes.iter().copied().collect()
    }

    /// The stored object, if any.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let s = self.state.lock().unwrap();
        let kind = s.kinds.of_object(api_version, kind).ok()?;
        s.objects.get(&key_of(kind, namespace, name)).cloned()
    }

    /// A client whose every request this server answers.
    pub fn client(&self) -> kube::Client {
        let server = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let server = server.clone();
            async move { Ok::<_, Infallible>(server.answer(req).await) }
        });
        kube::Client::new(service, "default")
    }

    async fn answer(&self, req: http::Request<kube::client::Body>) -> http::Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return respond(Err(Refusal::new(
                    400,
                    "BadRequest",
                    format!("unreadable body: {e}"),
                )));
            }
        };
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut s = self.state.lock().unwrap();
        respond(s.handle(
            &parts.method,
            parts.uri.path(),
            parts.uri.query().unwrap_or(""),
            &content_type,
            &body,
        ))
    }
}

fn respond(answer: Result<Value, Refusal>) -> http::Response<Full<Bytes>> {
    let (code, body) = match answer {
        Ok(v) => (200, v),
        Err(r) => (r.code, r.status()),
    };
    http::Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a status code from the list above and a JSON body make a response")
}

/// What a request addresses.
struct Target {
    kind: Kind,
    namespace: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn not_found(what: String) -> Refusal {
    Refusal::new(404, "NotFound", what)
}

impl State {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn assign(&mut self) -> Assigned {
        self.uids += 1;
        Assigned {
            uid: format!("00000000-0000-4000-8000-{:012}", self.uids),
            created: timestamp(self.now),
        }
    }

    fn route(&self, path: &str) -> Result<Target, Refusal> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match parts.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return Err(not_found(format!("no API at {path}"))),
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, plural, rest @ ..] if !matches!(*plural, "status" | "finalize") => {
                (ns.to_string(), [&[*plural][..], rest].concat())
            }
            rest => (String::new(), rest.to_vec()),
        };
        let Some(plural) = rest.first() else {
            return Err(not_found(format!("no resource at {path}")));
        };
        let kind = self
            .kinds
            .by_plural(group, version, plural)
            .ok_or_else(|| {
                not_found(format!(
                    "the server could not find the requested resource ({group}/{version} {plural}): it is neither built in nor defined by a CustomResourceDefinition given"
                ))
            })?
            .clone();
        Ok(Target {
            kind,
            namespace,
            name: rest.get(1).map(|s| s.to_string()),
            subresource: rest.get(2).map(|s| s.to_string()),
        })
    }

    #[expect(
        clippy::too_many_lines,
        reason = "the API server's request path in one read: parse the target, check the verb and the kind, answer, record the write; each step is a few lines"
    )]
    fn handle(
        &mut self,
        method: &http::Method,
        path: &str,
        query: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Value, Refusal> {
        if self.interfered.crashed {
            return Err(Refusal::new(
                503,
                "ServiceUnavailable",
                "the host crashed before this request (injected by --chaos)".into(),
            ));
        }
        let target = self.route(path)?;
        let query: BTreeMap<String, String> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let parsed = || -> Result<Value, Refusal> {
            serde_json::from_slice(body)
                .map_err(|e| Refusal::new(400, "BadRequest", format!("the body is not JSON: {e}")))
        };
        let r = &target.kind.resource;
        if r.group.is_empty() && r.kind == "Event" && *method == http::Method::POST {
            return self.event(&target, parsed()?);
        }
        let verb = match (method.as_str(), &target.name) {
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            ("POST", None) => "create",
            ("PUT", Some(_)) => "update",
            ("DELETE", Some(_)) => "delete",
            ("PATCH", Some(_)) => match content_type {
                "application/merge-patch+json" => "merge-patch",
                "application/json-patch+json" => "json-patch",
                "application/strategic-merge-patch+json" => "strategic-merge-patch",
                "application/apply-patch+yaml" => "apply",
                other => {
                    return Err(Refusal::new(
                        415,
                        "UnsupportedMediaType",
                        format!("the body of type {other} is not a patch this server takes"),
                    ));
                }
            },
            (m, _) => {
                return Err(Refusal::new(
                    405,
                    "MethodNotAllowed",
                    format!("{m} is not allowed on {path}"),
                ));
            }
        };
        if let Some(sub) = &target.subresource
            && (sub != "status" || !target.kind.status)
        {
            return Err(not_found(format!(
                "{} has no subresource {sub} here",
                r.plural
            )));
        }
        let mut body = match verb {
            "create"
            | "update"
            | "merge-patch"
            | "json-patch"
            | "strategic-merge-patch"
            | "apply" => Some(parsed()?),
            _ => None,
        };
        let name = target.name.clone().unwrap_or_else(|| {
            body.as_ref()
                .map(|b| meta(b, "name").to_string())
                .unwrap_or_default()
        });
        // Every matching fault still waiting counts this request, whichever fault answers it.
        let mut chosen = None;
        for (i, f) in self.faults.iter_mut().enumerate() {
            let sub = target.subresource.as_deref();
            if !f.matches(verb, &target.kind, &target.namespace, &name, sub) {
                continue;
            }
            if f.after > 0 {
                f.after -= 1;
            } else if chosen.is_none() {
                chosen = Some(i);
            }
        }
        let (nth, chaos) = self.interfere(verb, &format!("{} {:?}", r.plural, name))?;
        let injected = match chosen.map(|i| &mut self.faults[i]) {
            _ if chaos.is_some() => chaos,
            Some(f) => {
                if let Some(t) = &mut f.times {
                    *t -= 1;
                }
                Some(
                    f.refusal(&format!("{} {:?}", r.plural, name))
                        .map_err(|e| Refusal::new(500, "InternalError", e.to_string()))?,
                )
            }
            None => None,
        };
        let mut record = (!matches!(verb, "get" | "list")).then(|| Write {
            verb: verb.to_string(),
            kind: format!("{}/{}", r.api_version, r.kind),
            namespace: target.namespace.clone(),
            name: name.clone(),
            subresource: target.subresource.clone(),
            field_manager: (verb == "apply")
                .then(|| query.get("fieldManager").cloned())
                .flatten(),
            force: (verb == "apply").then(|| query.get("force").is_some_and(|f| f == "true")),
            body: body.as_ref().map(shown),
            error: None,
            step: 0,
        });
        let answer = match injected {
            Some(refusal) => Err(refusal),
            None => self.perform(verb, &target, &name, &query, body.take()),
        };
        if let Some(record) = &mut record {
            if let Err(r) = &answer {
                record.error = Some(error_case(r.code, r.reason).into());
            }
            self.writes.push(record.clone());
        }
        if nth.is_some() && nth == self.interference.crash_after {
            self.interfered.crashed = true;
        }
        answer
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per verb (get, list, create, update, patch, delete), each as the API server answers it; the arms share the target and the store"
    )]
    fn perform(
        &mut self,
        verb: &str,
        target: &Target,
        name: &str,
        query: &BTreeMap<String, String>,
        body: Option<Value>,
    ) -> Result<Value, Refusal> {
        let kind = &target.kind;
        let ns = target.namespace.as_str();
        let key = key_of(kind, ns, name);
        let what = format!("{} {name:?}", kind.resource.plural);
        let status_only = target.subresource.is_some();
        let namespace = kind.resource.namespaced.then_some(ns);
        match verb {
            "get" => self
                .objects
                .get(&key)
                .cloned()
                .ok_or_else(|| not_found(format!("{what} not found"))),
            "list" => self.list(kind, ns, query),
            "create" => {
                let mut body = body.unwrap_or_default();
                semantics::check_body(&mut body, kind, namespace, None)?;
                let mut name = meta(&body, "name").to_string();
                if name.is_empty() {
                    let prefix = meta(&body, "generateName").to_string();
                    if prefix.is_empty() {
                        return Err(Refusal::new(
                            422,
                            "Invalid",
                            format!(
                                "{} is invalid: metadata.name: Required value: name or generateName is required",
                                kind.resource.kind
                            ),
                        ));
                    }
                    name = format!("{prefix}{:05}", self.uids + 1);
                    meta_mut(&mut body).insert("name".into(), name.clone().into());
                }
                let key = key_of(kind, ns, &name);
                if self.objects.contains_key(&key) {
                    return Err(Refusal::new(
                        409,
                        "AlreadyExists",
                        format!("{} {name:?} already exists", kind.resource.plural),
                    ));
                }
                let assigned = self.assign();
                let rv = self.next_rv();
                let stored = semantics::created(body, kind, &assigned, rv);
                Ok(self.store(kind, key, stored))
            }
            "delete" => {
                let Some(mut stored) = self.objects.get(&key).cloned() else {
                    return Err(not_found(format!("{what} not found")));
                };
                let finalizers = stored["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty());
                if finalizers && !meta(&stored, "deletionTimestamp").is_empty() {
                    // Being deleted already: a second delete changes nothing.
                    return Ok(stored);
                }
                let rv = self.next_rv();
                meta_mut(&mut stored).insert("resourceVersion".into(), rv.to_string().into());
                if finalizers {
                    let now = timestamp(self.now);
                    meta_mut(&mut stored).insert("deletionTimestamp".into(), now.into());
                    return Ok(self.store(kind, key, stored));
                }
                self.remove(kind, &key, &stored);
                let uid = meta(&stored, "uid").to_string();
                if self.objects.values().any(|o| owned_by(o, &uid)) {
                    self.notes.insert(GC_LIMITS);
                }
                Ok(json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": name, "kind": kind.resource.plural, "uid": uid},
                }))
            }
            _ => {
                let mut body = body.unwrap_or_default();
                let stored = self.objects.get(&key).cloned();
                let wanted = match (verb, stored.as_ref()) {
                    ("update", Some(s)) => {
                        semantics::check_body(&mut body, kind, namespace, Some(name))?;
                        semantics::check_version(&body, s, &what)?;
                        body
                    }
                    ("merge-patch", Some(s)) => semantics::merge_patch(s, &body),
                    ("strategic-merge-patch", Some(s)) => {
                        self.notes.insert(semantics::STRATEGIC_LIMITS);
                        semantics::merge_patch(s, &body)
                    }
                    ("json-patch", Some(s)) => semantics::json_patch(s, &body)?,
                    ("apply", _) if query.get("fieldManager").is_none_or(|m| m.is_empty()) => {
                        return Err(Refusal::new(
                            400,
                            "BadRequest",
                            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
                        ));
                    }
                    ("apply", stored) => {
                        self.notes.insert(semantics::APPLY_LIMITS);
                        semantics::check_body(&mut body, kind, namespace, Some(name))?;
                        match stored {
                            Some(s) => semantics::apply(s, &body),
                            None if status_only => {
                                return Err(not_found(format!("{what} not found")));
                            }
                            None => {
                                let assigned = self.assign();
                                let rv = self.next_rv();
                                let created = semantics::created(body, kind, &assigned, rv);
                                return Ok(self.store(kind, key, created));
                            }
                        }
                    }
                    _ => return Err(not_found(format!("{what} not found"))),
                };
                let Some(stored) = stored else {
                    return Err(not_found(format!("{what} not found")));
                };
                let mut wanted = wanted;
                if !wanted.is_object() {
                    return Err(Refusal::new(
                        422,
                        "Invalid",
                        format!("{what} is invalid: the patched object is not a JSON object"),
                    ));
                }
                // A patch may not rename or move the object, nor change its kind.
                semantics::check_body(&mut wanted, kind, namespace, Some(name))?;
                if verb != "update" {
                    semantics::check_version(&wanted, &stored, &what)?;
                }
                let rv = self.rv + 1;
                match semantics::replaced(&stored, wanted, kind, status_only, rv) {
                    Some(next) if semantics::finalized(&next) => {
                        // Its last finalizer gone while it was being deleted: now it is.
                        self.rv = rv;
                        self.remove(kind, &key, &next);
                        Ok(next)
                    }
                    Some(next) => {
                        self.rv = rv;
                        Ok(self.store(kind, key, next))
                    }
                    None => Ok(stored),
                }
            }
        }
    }

    fn store(&mut self, kind: &Kind, key: Key, object: Value) -> Value {
        if !self.objects.contains_key(&key) {
            self.lifecycle
                .entry(object_name(&object))
                .or_default()
                .created += 1;
        }
        self.feed(&kind.resource.group, &kind.resource.plural, &object, false);
        self.objects.insert(key, object.clone());
        object
    }

    /// Takes the object `key` off the server: deleted, or finalized.
    fn remove(&mut self, kind: &Kind, key: &Key, last: &Value) {
        self.objects.remove(key);
        self.lifecycle.entry(object_name(last)).or_default().deleted += 1;
        self.feed(&kind.resource.group, &kind.resource.plural, last, true);
    }

    fn caches_of<'a>(&'a self, group: &'a str, plural: &'a str) -> impl Iterator<Item = &'a Cache> {
        self.caches
            .iter()
            .filter(move |c| c.group == group && c.plural == plural)
    }

    /// Tells the caches of the kind that `object` was written (or, with `gone`, deleted), as
    /// its watch would; later, if the call's feed is held.
    fn feed(&mut self, group: &str, plural: &str, object: &Value, gone: bool) {
        if self.interference.hold_feed {
            self.held
                .push((group.into(), plural.into(), object.clone(), gone));
            return;
        }
        for c in self.caches_of(group, plural) {
            if gone {
                c.gone(object);
            } else {
                c.put(object);
            }
        }
    }

    fn list(
        &self,
        kind: &Kind,
        namespace: &str,
        query: &BTreeMap<String, String>,
    ) -> Result<Value, Refusal> {
        let bad = |e: String| Refusal::new(400, "BadRequest", e);
        let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
            .map_err(|e| bad(e.to_string()))?;
        let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
            .map_err(|e| bad(e.to_string()))?;
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(k, _)| {
                k.0 == kind.resource.group
                    && k.1 == kind.resource.plural
                    && (namespace.is_empty() || k.2 == namespace)
            })
            .map(|(_, v)| v)
            .filter(|v| {
                let l = &v["metadata"]["labels"];
                labels.matches(|k| l[k].as_str()) && fields_match(&fields, v)
            })
            .cloned()
            .collect();
        Ok(json!({
            "apiVersion": kind.resource.api_version,
            "kind": format!("{}List", kind.resource.kind),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        }))
    }

    fn event(&mut self, target: &Target, mut body: Value) -> Result<Value, Refusal> {
        let involved = &body["involvedObject"];
        let regarding = format!(
            "{} {}/{}",
            involved["kind"].as_str().unwrap_or(""),
            involved["namespace"].as_str().unwrap_or(""),
            involved["name"].as_str().unwrap_or("")
        );
        let regarding = regarding.replace(" /", " ");
        let fault = self.faults.iter_mut().find(|f| {
            f.verb.as_deref() == Some("event")
                && f.namespace.as_deref().is_none_or(|n| n == target.namespace)
                && f.times != Some(0)
        });
        if let Some(f) = fault {
            if let Some(t) = &mut f.times {
                *t -= 1;
            }
            return Err(f
                .refusal("events")
                .map_err(|e| Refusal::new(500, "InternalError", e.to_string()))?);
        }
        self.events.push(Event {
            type_: body["type"].as_str().unwrap_or("").into(),
            reason: body["reason"].as_str().unwrap_or("").into(),
            regarding,
            message: body["message"].as_str().unwrap_or("").into(),
        });
        let assigned = self.assign();
        let rv = self.next_rv();
        let name = format!("{}{:05}", meta(&body, "generateName"), self.uids);
        meta_mut(&mut body).insert("name".into(), name.into());
        Ok(semantics::created(body, &target.kind, &assigned, rv))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Api;
    use kube::api::{Patch, PatchParams, PostParams};

    use k8s_openapi::api::core::v1::ConfigMap;

    /// A cache of every ConfigMap, attached to `s`.
    fn cache_of_config_maps(s: &Server) -> crate::informer::store::Store {
        let kind = Kinds::builtin()
            .of_object("v1", "ConfigMap")
            .unwrap()
            .clone();
        let writer = Writer::new();
        let store = writer.reader();
        s.attach(&kind, Scope::default(), writer);
        store
    }

    fn server() -> Server {
        let s = Server::new(Kinds::builtin(), Duration::from_secs(1_767_225_600));
        s.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "x"}},
                      "data": {"k": "1"}}))
            .unwrap();
        s
    }

    #[tokio::test]
    async fn a_kube_client_reads_and_writes_through_it_with_the_api_servers_answers() {
        let s = server();
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        let a = api.get("a").await.unwrap();
        assert_eq!(a.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(
            a.metadata.creation_timestamp.clone().unwrap().0.to_string(),
            "2026-01-01T00:00:00Z"
        );

        let mut stale = a.clone();
        let mut fresh = a.clone();
        fresh.data = Some([("k".to_string(), "2".to_string())].into());
        let updated = api
            .replace("a", &PostParams::default(), &fresh)
            .await
            .unwrap();
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("2"));
        stale.data = Some([("k".to_string(), "3".to_string())].into());
        let kube::Error::Api(e) = api
            .replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err()
        else {
            panic!("not an API error")
        };
        assert_eq!(e.code, 409);

        let kube::Error::Api(e) = api.get("b").await.unwrap_err() else {
            panic!("not an API error")
        };
        assert_eq!(e.code, 404);
        let list = api
            .list(&kube::api::ListParams::default().labels("app=x"))
            .await
            .unwrap();
        assert_eq!(list.items.len(), 1);

        let patched = api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"extra": "y"}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.data.unwrap().len(), 2);
        let writes = s.writes();
        assert_eq!(
            writes.iter().map(|w| w.verb.as_str()).collect::<Vec<_>>(),
            ["update", "update", "merge-patch"]
        );
        assert_eq!(writes[1].error.as_deref(), Some("conflict"));
        assert!(
            writes[0].body.as_ref().unwrap()["metadata"]
                .get("resourceVersion")
                .is_none(),
            "server-assigned metadata is left out of what a write shows"
        );
    }

    #[tokio::test]
    async fn a_patch_that_would_make_the_object_not_an_object_or_rename_it_is_refused() {
        let s = server();
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        let whole = http::Request::builder()
            .method(http::Method::PATCH)
            .uri("/api/v1/namespaces/ns/configmaps/a")
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(br#"[{"op": "replace", "path": "", "value": 1}]"#.to_vec())
            .unwrap();
        let kube::Error::Api(e) = s.client().request_text(whole).await.unwrap_err() else {
            panic!("not an API error")
        };
        assert_eq!(e.code, 422);
        let rename = Patch::Merge(json!({"metadata": {"name": "b"}}));
        let kube::Error::Api(e) = api
            .patch("a", &PatchParams::default(), &rename)
            .await
            .unwrap_err()
        else {
            panic!("not an API error")
        };
        assert_eq!(e.code, 400);
        assert!(api.get("a").await.is_ok(), "the server still answers");
    }

    #[tokio::test]
    async fn removing_the_last_finalizer_of_an_object_being_deleted_deletes_it() {
        let s = server();
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        let hold = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}}));
        api.patch("a", &PatchParams::default(), &hold)
            .await
            .unwrap();
        api.delete("a", &Default::default()).await.unwrap();
        let held = api.get("a").await.unwrap();
        assert!(held.metadata.deletion_timestamp.is_some());
        api.delete("a", &Default::default()).await.unwrap();
        assert_eq!(
            api.get("a").await.unwrap().metadata.resource_version,
            held.metadata.resource_version,
            "a second delete changes nothing"
        );
        let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        api.patch("a", &PatchParams::default(), &release)
            .await
            .unwrap();
        assert!(api.get("a").await.is_err(), "gone with its last finalizer");
    }

    #[tokio::test]
    async fn a_fault_answers_as_many_times_as_it_says_then_the_model_answers() {
        let s = server();
        s.fail(Fault {
            verb: Some("delete".into()),
            kind: Some("ConfigMap".into()),
            namespace: None,
            name: Some("a".into()),
            subresource: None,
            answer: "forbidden".into(),
            times: Some(1),
            after: 0,
        });
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        let kube::Error::Api(e) = api.delete("a", &Default::default()).await.unwrap_err() else {
            panic!("not an API error")
        };
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        api.delete("a", &Default::default()).await.unwrap();
        assert!(s.get("v1", "ConfigMap", "ns", "a").is_none());
    }

    #[tokio::test]
    async fn a_crash_refuses_everything_after_its_write_and_an_injected_answer_hits_only_its_own() {
        let s = server();
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        let cm = |name: &str| -> ConfigMap {
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
        };
        s.begin_call(Interference {
            answer: Some((1, "conflict".into())),
            crash_after: Some(2),
            hold_feed: false,
        });
        let kube::Error::Api(e) = api
            .create(&PostParams::default(), &cm("b"))
            .await
            .unwrap_err()
        else {
            panic!("not an API error")
        };
        assert_eq!(e.code, 409, "the first write gets the injected answer");
        api.create(&PostParams::default(), &cm("c")).await.unwrap();
        assert!(
            api.get("a").await.is_err(),
            "after the crash even a read is refused"
        );
        let done = s.end_call();
        assert_eq!(
            done,
            Interfered {
                writes: 2,
                crashed: true,
                injected: Some((1, "conflict".into())),
            }
        );
        assert!(api.get("a").await.is_ok(), "the next call runs as modelled");
        assert_eq!(s.lifecycle()["v1/ConfigMap ns/c"].created, 1);
        assert!(!s.lifecycle().contains_key("v1/ConfigMap ns/b"));
    }

    #[tokio::test]
    async fn held_writes_reach_the_cache_when_the_call_ends_and_a_change_is_not_a_guest_write() {
        let s = server();
        let store = cache_of_config_maps(&s);
        s.begin_call(Interference {
            hold_feed: true,
            ..Interference::default()
        });
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        api.delete("a", &Default::default()).await.unwrap();
        assert!(store.get("ns/a").is_some(), "held back from the cache");
        s.end_call();
        assert!(store.get("ns/a").is_none());
        s.change(&Change::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "2"}}),
        ))
        .unwrap();
        assert_eq!(s.writes().len(), 1, "only the guest's delete");
        assert_eq!(
            store.get("ns/a").unwrap().resource_version(),
            s.get("v1", "ConfigMap", "ns", "a").unwrap()["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
        );
        assert_eq!(
            s.lifecycle()["v1/ConfigMap ns/a"],
            Lifecycle {
                created: 1,
                deleted: 1
            },
            "seeded objects were not created here; the change created it again"
        );
        s.show("v1/ConfigMap ns/a", None);
        assert!(store.get("ns/a").is_none(), "shown absent");
        s.resync();
        assert!(store.get("ns/a").is_some(), "a relist brings it back");
    }

    #[tokio::test]
    async fn a_write_reaches_an_attached_cache_as_a_watch_event_would() {
        let s = server();
        let store = cache_of_config_maps(&s);
        assert_eq!(store.get("ns/a").unwrap().resource_version(), "1");
        assert!(s.advance("v1", "ConfigMap", "ns", "a"));
        assert_eq!(
            store.get("ns/a").unwrap().resource_version(),
            "1",
            "a stale cache stays one version behind"
        );
        let api: Api<ConfigMap> = Api::namespaced(s.client(), "ns");
        let created = api
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap(),
            )
            .await
            .unwrap();
        let rv = created.metadata.resource_version.unwrap();
        assert_eq!(store.get("ns/b").unwrap().resource_version(), rv);
        assert!(store.watermark("ns") >= rv.parse::<u64>().unwrap());
        api.delete("b", &Default::default()).await.unwrap();
        assert!(store.get("ns/b").is_none());
    }
}
