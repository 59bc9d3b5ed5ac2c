//! What `--chaos` does through the server: a call under [`Interference`], older views shown to
//! the caches and a relist, a user's changes, and the objects and their lifecycles read back.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::{Error, Server, State, Target, key_of};
use crate::object::Object;
use crate::offline::records::{
    Change, Fault, Interfered, Interference, Lifecycle, error_case, object_name, split_key,
};
use crate::offline::semantics::{Refusal, meta};

impl Server {
    /// Starts a call under `interference`; [`Server::end_call`] says what it came to.
    pub fn begin_call(&self, interference: Interference) {
        let mut s = self.state.lock().unwrap();
        s.interference = interference;
        s.interfered = Interfered::default();
    }

    /// Ends the call begun last: the caches get the writes held back, and the interference
    /// stops.
    pub fn end_call(&self) -> Interfered {
        let mut s = self.state.lock().unwrap();
        s.interference = Interference::default();
        for (group, plural, object, gone) in std::mem::take(&mut s.held) {
            s.feed(&group, &plural, &object, gone);
        }
        std::mem::take(&mut s.interfered)
    }

    /// Makes the caches of the object named `key` (as [`Server::objects`] names it) show
    /// `version` (an older copy; `None`: absent) instead of the server's, until
    /// [`Server::resync`]. A write the guest makes meanwhile reaches the caches as usual.
    pub fn show(&self, key: &str, version: Option<&Value>) {
        let s = self.state.lock().unwrap();
        let Some((api_version, kind, namespace, name)) = split_key(key) else {
            return;
        };
        let Ok(kind) = s.kinds.of_object(api_version, kind) else {
            return;
        };
        for c in s.caches_of(&kind.resource.group, &kind.resource.plural) {
            match version {
                Some(v) => c.put(v),
                None => {
                    c.writer
                        .remove(&crate::object::object_key(Some(namespace), name));
                    c.writer.publish_watermarks();
                }
            }
        }
    }

    /// Refills every cache from the server's objects, as a relist does.
    pub fn resync(&self) {
        let s = self.state.lock().unwrap();
        for cache in &s.caches {
            let items: Vec<_> = s
                .objects
                .iter()
                .filter(|(k, v)| k.0 == cache.group && k.1 == cache.plural && cache.holds(v))
                .filter_map(|(_, v)| {
                    Object::from_value(v.clone(), &cache.scope.transform, None).ok()
                })
                .map(Arc::new)
                .collect();
            cache.writer.replace(items, s.rv);
        }
    }

    /// Makes `change` as a user would: not a guest write (not in [`Server::writes`]), but seen
    /// by the caches as any other.
    pub fn change(&self, change: &Change) -> Result<(), Error> {
        let mut s = self.state.lock().unwrap();
        let (api_version, kind_name, namespace, name) = match change {
            Change::Apply(v) => (
                v["apiVersion"].as_str().unwrap_or(""),
                v["kind"].as_str().unwrap_or(""),
                meta(v, "namespace"),
                meta(v, "name"),
            ),
            Change::Delete(o) => (
                o.api_version.as_str(),
                o.kind.as_str(),
                o.namespace.as_str(),
                o.name.as_str(),
            ),
        };
        let kind = s.kinds.of_object(api_version, kind_name)?.clone();
        let target = |name: Option<&str>| Target {
            kind: kind.clone(),
            namespace: namespace.to_string(),
            name: name.map(str::to_string),
            subresource: None,
        };
        let what = format!("{api_version}/{kind_name} {namespace}/{name}");
        let refused = |r: Refusal| Error::Object {
            what: what.clone(),
            reason: r.status()["message"].as_str().unwrap_or("").to_string(),
        };
        let none = BTreeMap::new();
        match change {
            Change::Delete(_) => s
                .perform("delete", &target(Some(name)), name, &none, None)
                .map(drop)
                .map_err(refused),
            Change::Apply(v) => {
                let exists = s.objects.contains_key(&key_of(&kind, namespace, name));
                let answer = if exists {
                    let mut patch = v.clone();
                    if let Some(m) = patch["metadata"].as_object_mut() {
                        m.remove("resourceVersion");
                    }
                    s.perform("merge-patch", &target(Some(name)), name, &none, Some(patch))
                } else {
                    s.perform("create", &target(None), name, &none, Some(v.clone()))
                };
                answer.map(drop).map_err(refused)
            }
        }
    }

    /// Every object the server holds, by `apiVersion/Kind namespace/name` (`apiVersion/Kind
    /// name` for a cluster-scoped one).
    pub fn objects(&self) -> BTreeMap<String, Value> {
        let s = self.state.lock().unwrap();
        s.objects
            .values()
            .map(|v| (object_name(v), v.clone()))
            .collect()
    }

    /// How many times each object came and went, keyed as [`Server::objects`] keys them.
    pub fn lifecycle(&self) -> BTreeMap<String, Lifecycle> {
        self.state.lock().unwrap().lifecycle.clone()
    }
}

impl State {
    /// Counts a request that is a write, and the answer the call's interference gives it
    /// instead of the server's, if any: the write's number and that answer.
    pub(super) fn interfere(
        &mut self,
        verb: &str,
        what: &str,
    ) -> Result<(Option<u32>, Option<Refusal>), Refusal> {
        if matches!(verb, "get" | "list") {
            return Ok((None, None));
        }
        self.interfered.writes += 1;
        let n = self.interfered.writes;
        let answer = match &self.interference.answer {
            Some((at, answer)) if *at == n => answer.clone(),
            _ => return Ok((Some(n), None)),
        };
        let fault = Fault {
            verb: None,
            kind: None,
            namespace: None,
            name: None,
            subresource: None,
            answer,
            times: None,
            after: 0,
        };
        let refusal = fault
            .refusal(what)
            .map_err(|e| Refusal::new(500, "InternalError", e.to_string()))?;
        self.interfered.injected = Some((n, error_case(refusal.code, refusal.reason).into()));
        Ok((Some(n), Some(refusal)))
    }
}
