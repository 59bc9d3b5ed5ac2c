//! Event handlers: map informer notifications to the primary keys (`namespace/name` of the `for`
//! kind) to reconcile.
//!
//! - `for`: an object is its own primary;
//! - `owns` (and `watches` with the owner mapping): the controller ownerReference to the `for`
//!   kind names the primary;
//! - `watches` with a label mapping: that label's value names the primary, in the object's
//!   namespace;
//! - `watches` with the guest mapping: the guest's exported `map` decides (called by the
//!   controller, since it runs guest code).

use std::collections::BTreeSet;

pub use super::plan::Role;
use super::shared::Shared;
use super::traffic::{Change, Seen};
use super::work_queue::Priority;
use crate::guest::bindings::{Gvk, Request};
use crate::guest::grant::Grant;
use crate::guest::imports::{Access, GuestContext, check_access, errors};
use crate::informer::discovery::Resource;
use crate::informer::{Event, Namespaces, Notification};
use crate::names;
use crate::object::{ObjectRef, object_key};

/// The objects a notification is about: both versions of an update, since a changed owner or
/// label moves an object from one primary to another and both must hear of it.
pub fn objects(n: &Notification) -> Vec<&ObjectRef> {
    match &n.event {
        Event::Added(o) => vec![o],
        Event::Updated { old, new } if std::sync::Arc::ptr_eq(old, new) => vec![new],
        Event::Updated { old, new } => vec![old, new],
        Event::Deleted { last_known, .. } => vec![last_known],
        Event::Resync => vec![],
    }
}

/// What `n`, about an object of `kind`, says changed, for the traffic a rollout judges (see
/// `traffic`); `None` for a resync, which is no change.
pub(super) fn change_of(kind: &Gvk, n: &Notification) -> Option<Change> {
    let (object, seen) = match &n.event {
        Event::Added(o) | Event::Updated { new: o, .. } => {
            (o, Seen::Version(o.resource_version_number()))
        }
        Event::Deleted { last_known, .. } => (last_known, Seen::Deleted(last_known.uid().into())),
        Event::Resync => return None,
    };
    Some(Change::Object {
        kind: kind.clone(),
        object: object.key().to_string(),
        seen,
    })
}

/// The priority of a notification's reconciles.
pub fn priority(n: &Notification) -> Priority {
    if n.background {
        Priority::Low
    } else {
        Priority::High
    }
}

/// Primary keys for `obj` under `role` (not for [`Role::GuestMap`], which needs the guest).
pub fn primaries(role: &Role, for_kind: &Gvk, obj: &ObjectRef) -> Vec<String> {
    match role {
        Role::For => vec![obj.key().to_string()],
        Role::Owner => obj
            .controller()
            .filter(|o| *o.kind == *for_kind.kind && group_of(&o.api_version) == for_kind.group)
            .map(|o| object_key(obj.namespace(), &o.name))
            .into_iter()
            .collect(),
        Role::Label(label) => obj
            .label(label)
            .filter(|v| !v.is_empty())
            .map(|v| object_key(obj.namespace(), v))
            .into_iter()
            .collect(),
        Role::GuestMap => Vec::new(),
    }
}

/// The group part of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Maps one subscription's notifications to primary keys, with the roles the serving version
/// gives this kind.
pub(super) async fn handle(
    controller: std::sync::Weak<Shared>,
    kind: Gvk,
    mut sub: crate::informer::Subscription,
) {
    while let Some(n) = sub.recv().await {
        let Some(c) = controller.upgrade() else {
            return;
        };
        if matches!(n.event, Event::Resync) {
            c.enqueue_all(Priority::Low);
            continue;
        }
        let version = c.current();
        let Some(roles) = version.roles.get(&kind) else {
            // A reload dropped this kind; the task is being aborted.
            continue;
        };
        let priority = priority(&n);
        // Traffic for a rollout's analysis, once the reconcile begins (see `traffic`): what
        // changed, unless this is the initial list or a relist.
        let change = (!n.background).then(|| change_of(&kind, &n)).flatten();
        let enqueue = |key: String| {
            if let Some(change) = &change {
                c.traffic.mark(&key, change.clone());
            }
            c.queue.add(key, priority);
        };
        for role in roles {
            for obj in objects(&n) {
                if *role == Role::GuestMap {
                    let json = String::from_utf8_lossy(obj.json()).into_owned();
                    let (mapped, usage) = version
                        .module
                        .map(version.ctx.clone(), kind.clone(), json)
                        .await;
                    // Outside any slot: a map is one call per event, and holding the event
                    // stream for a slot would stall every later event of this kind.
                    c.counters.add_cpu(usage.cpu);
                    c.share.charge(usage.cpu);
                    match mapped {
                        Ok(requests) => {
                            // Guest-controlled: only keys that could name a primary are
                            // queued; the rest are dropped with one bounded warning per call.
                            let mapped = map_keys(&version.ctx, &version.for_kind, &requests);
                            if let Some(dropped) = &mapped.dropped {
                                tracing::warn!(guest = %c.name, key = obj.key(), "{dropped}");
                            }
                            for key in mapped.keys {
                                enqueue(key);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(guest = %c.name, key = obj.key(), error = %e, "map() failed; object not mapped")
                        }
                    }
                    continue;
                }
                if *role == Role::For && c.keys.is_some() {
                    // Its shard, for after it is gone from the cache (see `key_gates`).
                    match &n.event {
                        Event::Deleted { .. } => c.tombstones.bury(obj.key(), obj.uid()),
                        _ => c.tombstones.forget(obj.key()),
                    }
                }
                for key in primaries(role, &version.for_kind, obj) {
                    enqueue(key);
                }
            }
        }
    }
}

/// The work-queue keys of what the guest's `map` answered for kind `for_kind`: each request
/// that could name a primary, once, and a count of the rest with why the first was dropped.
///
/// `requests` is guest-controlled. A request is dropped when no reconcile of it could ever
/// read its primary: a name or namespace Kubernetes refuses, a namespace on a
/// cluster-scoped kind (or none on a namespaced one), a namespace outside the grant or
/// outside the namespaces the `for` informer covers. While the `for` kind is not resolved
/// yet, only the names' form is checked.
pub fn map_keys(ctx: &GuestContext, for_kind: &Gvk, requests: &[Request]) -> Mapped {
    let declared = ctx.declared(for_kind).ok();
    let target = Target {
        guest: &ctx.name,
        grant: &ctx.grant,
        kind: for_kind,
        resource: declared.and_then(|d| d.informer.resource()),
        namespaces: declared.map(|d| &d.informer.key().scope.namespaces),
    };
    let mut mapped = Mapped::default();
    let mut seen = BTreeSet::new();
    for r in requests {
        match target.key(r) {
            Ok(key) => {
                if seen.insert(key.clone()) {
                    mapped.keys.push(key);
                }
            }
            Err(reason) => {
                let dropped = mapped.dropped.get_or_insert_with(|| Dropped {
                    count: 0,
                    first: format!(
                        "{}/{}: {reason}",
                        names::shown(&r.namespace),
                        names::shown(&r.name)
                    ),
                });
                dropped.count += 1;
            }
        }
    }
    mapped
}

/// The primaries a `map` answer may name, for [`map_keys`].
struct Target<'a> {
    guest: &'a str,
    grant: &'a Grant,
    kind: &'a Gvk,
    /// `None` while the `for` kind is not resolved.
    resource: Option<&'a Resource>,
    /// The namespaces the `for` informer covers.
    namespaces: Option<&'a Namespaces>,
}

impl Target<'_> {
    /// The work-queue key of `r`, or why no reconcile of it could ever read its primary.
    fn key(&self, r: &Request) -> Result<String, Unmappable> {
        match self.resource {
            Some(resource) => check_access(
                self.guest,
                self.grant,
                resource,
                &r.namespace,
                Some(&r.name),
                Access::CacheRead,
            )
            .map_err(|e| Unmappable::Refused(errors::message(&e).to_string()))?,
            None => {
                names::object_name(&self.kind.group, &self.kind.kind, &r.name)?;
                if !r.namespace.is_empty() {
                    names::namespace(&r.namespace)?;
                }
            }
        }
        if let Some(Namespaces::Only(set)) = self.namespaces
            && !r.namespace.is_empty()
            && !set.contains(&r.namespace)
        {
            return Err(Unmappable::Outside(names::shown(&r.namespace)));
        }
        Ok(object_key(Some(&r.namespace), &r.name))
    }
}

/// Why a request a `map` answered can never be reconciled.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum Unmappable {
    /// A reconcile of it would be refused: the message the guest would get.
    #[error("{0}")]
    Refused(String),
    /// A name or namespace Kubernetes refuses.
    #[error(transparent)]
    Name(#[from] names::Error),
    /// A namespace the `for` informer does not cover, shown shortened.
    #[error("namespace {0} is outside the namespaces this guest watches")]
    Outside(String),
}

/// What a guest's `map` answered, sorted by [`map_keys`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mapped {
    /// Keys to queue, each once, in the order answered.
    pub keys: Vec<String>,
    /// The requests dropped, if any.
    pub dropped: Option<Dropped>,
}

/// Requests from `map` that could never be reconciled: how many, and the first, so that one
/// warning per call says enough without repeating a hostile answer.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "map() answered {count} request(s) that can never be reconciled, dropped; the first, {first}; answer namespace/name pairs of the `for` kind in namespaces the guest watches"
)]
pub struct Dropped {
    /// How many were dropped.
    pub count: usize,
    /// The first dropped, shown shortened, and why.
    pub first: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::imports::access::tests::res;
    use crate::object::{Object, Transform};
    use std::sync::Arc;

    fn gen_kind() -> Gvk {
        Gvk {
            group: "example.reconciled.dev".into(),
            version: "v1alpha1".into(),
            kind: "ConfigMapGenerator".into(),
        }
    }

    fn cm(owner: Option<(&str, &str, bool)>, labels: serde_json::Value) -> ObjectRef {
        let refs: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|(api, name, controller)| serde_json::json!({"apiVersion": api, "kind": "ConfigMapGenerator", "name": name, "uid": "u", "controller": controller}))
            .collect();
        let v = serde_json::json!({"metadata": {"name": "child", "namespace": "a", "ownerReferences": refs, "labels": labels}});
        Arc::new(Object::from_value(v, &Transform::none(), None).unwrap())
    }

    #[test]
    fn a_notification_says_which_object_changed_to_which_version() {
        let at = |rv: u64| -> ObjectRef {
            let v = serde_json::json!({"metadata": {"name": "x", "namespace": "a", "uid": "u1", "resourceVersion": rv.to_string()}});
            Arc::new(Object::from_value(v, &Transform::none(), None).unwrap())
        };
        let kind = gen_kind();
        let updated = Notification {
            event: Event::Updated {
                old: at(6),
                new: at(7),
            },
            background: false,
        };
        assert_eq!(
            change_of(&kind, &updated),
            Some(Change::Object {
                kind: kind.clone(),
                object: "a/x".into(),
                seen: Seen::Version(Some(7)),
            })
        );
        let deleted = Notification {
            event: Event::Deleted {
                last_known: at(8),
                final_state_unknown: false,
            },
            background: false,
        };
        assert!(matches!(
            change_of(&kind, &deleted),
            Some(Change::Object { seen: Seen::Deleted(uid), .. }) if uid == "u1"
        ));
        let resync = Notification {
            event: Event::Resync,
            background: true,
        };
        assert_eq!(change_of(&kind, &resync), None);
    }

    #[test]
    fn for_maps_to_itself() {
        assert_eq!(
            primaries(&Role::For, &gen_kind(), &cm(None, serde_json::json!({}))),
            ["a/child"]
        );
    }

    #[test]
    fn owns_follows_only_the_controller_reference_of_the_for_kind() {
        let k = gen_kind();
        let owned = cm(
            Some(("example.reconciled.dev/v1alpha1", "gen-1", true)),
            serde_json::json!({}),
        );
        assert_eq!(primaries(&Role::Owner, &k, &owned), ["a/gen-1"]);
        let not_controller = cm(
            Some(("example.reconciled.dev/v1alpha1", "gen-1", false)),
            serde_json::json!({}),
        );
        assert!(primaries(&Role::Owner, &k, &not_controller).is_empty());
        let other_group = cm(Some(("other.io/v1", "gen-1", true)), serde_json::json!({}));
        assert!(primaries(&Role::Owner, &k, &other_group).is_empty());
        // Another version of the same group is still our kind.
        let other_version = cm(
            Some(("example.reconciled.dev/v1", "gen-2", true)),
            serde_json::json!({}),
        );
        assert_eq!(primaries(&Role::Owner, &k, &other_version), ["a/gen-2"]);
    }

    #[test]
    fn label_mapping_names_the_primary_in_the_same_namespace() {
        let o = cm(None, serde_json::json!({"app.example/owner": "gen-9"}));
        assert_eq!(
            primaries(&Role::Label("app.example/owner".into()), &gen_kind(), &o),
            ["a/gen-9"]
        );
        assert!(primaries(&Role::Label("missing".into()), &gen_kind(), &o).is_empty());
    }

    #[test]
    fn an_update_reaches_both_the_old_and_the_new_primary() {
        let old = cm(
            Some(("example.reconciled.dev/v1alpha1", "before", true)),
            serde_json::json!({}),
        );
        let new = cm(
            Some(("example.reconciled.dev/v1alpha1", "after", true)),
            serde_json::json!({}),
        );
        let n = Notification {
            event: Event::Updated { old, new },
            background: false,
        };
        let keys: Vec<String> = objects(&n)
            .into_iter()
            .flat_map(|o| primaries(&Role::Owner, &gen_kind(), o))
            .collect();
        assert_eq!(keys, ["a/before", "a/after"]);
        assert_eq!(priority(&n), Priority::High);
    }

    fn request(namespace: &str, name: &str) -> Request {
        Request {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn map_answers_that_could_never_be_reconciled_are_dropped() {
        let grant = Grant::namespaces(["team-a", "team-b"]);
        let kind = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Thing".into(),
        };
        let resource = res(true);
        let watched = Namespaces::Only(["team-a".to_string()].into());
        let target = Target {
            guest: "g",
            grant: &grant,
            kind: &kind,
            resource: Some(&resource),
            namespaces: Some(&watched),
        };
        assert_eq!(target.key(&request("team-a", "x")), Ok("team-a/x".into()));
        for (ns, name) in [
            ("team-a", "a<b"),
            ("team-a", ""),
            ("team-a", ".."),
            ("", "x"),
            ("..", "x"),
            ("team-a/x", "y"),
            ("kube-system", "x"),
            ("team-b", "x"),
        ] {
            assert!(target.key(&request(ns, name)).is_err(), "{ns:?}/{name:?}");
        }
        // Not resolved yet: only the form is checked.
        let unresolved = Target {
            resource: None,
            namespaces: None,
            ..target
        };
        assert!(unresolved.key(&request("kube-system", "x")).is_ok());
        assert!(unresolved.key(&request("a\0", "x")).is_err());
    }

    #[test]
    fn a_dropped_map_answer_is_one_short_message() {
        let d = Dropped {
            count: 9_999,
            first: format!(
                "{}/{}: bad",
                names::shown("x"),
                names::shown(&"y".repeat(100_000))
            ),
        };
        let message = d.to_string();
        assert!(message.contains("9999 request(s)"), "{message}");
        assert!(message.len() < 400, "{message}");
    }
}
