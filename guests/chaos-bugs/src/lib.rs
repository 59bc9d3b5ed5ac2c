//! Eight classic controller bugs of the kinds Sieve (OSDI'22) and Acto (SOSP'23) found, each
//! beside its fix, over one small custom resource, the Widget. The settings pick one:
//! `{"scenario": "create-after-crash", "buggy": true}`; without `buggy`, the fix runs.
//!
//! | scenario | the bug | the fix |
//! |---|---|---|
//! | `create-unchecked` | creates a child under a generated name when the cache shows none | a fixed name; "already exists" is success |
//! | `create-after-crash` | creates a child under a generated name, then records the name in status | the same, under a fixed name |
//! | `retry-duplicates` | creates a child whenever the status write is not yet recorded | a fixed name |
//! | `delete-on-stale-read` | deletes the child when the cache says the Widget is disabled | confirms with a read from the API server first |
//! | `status-unseen-write` | counts its children from a cache that may not show the one it just created | counts from the API server |
//! | `finalizer-before-cleanup` | removes its finalizer, then unregisters the Widget | unregisters, then removes the finalizer |
//! | `conflict-done` | answers a conflict on its status update with `done` | returns the error, so it is retried |
//! | `uid-blind` | keeps a child it finds by name, though its owner was deleted and made again | replaces a child whose controller is another uid; confirms the Widget with the API server before a create or a delete |
//!
//! The guest declares eventual consistency, so that its reads can miss its own writes: the
//! host's read-your-writes would otherwise rule that bug out.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciled_guest::{
    Description, Error, Gvk, Kind, ListOptions, Object, Outcome, Reconciler, Request, Result, api,
    cache, client, describe,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The finalizer of `finalizer-before-cleanup`.
const FINALIZER: &str = "chaos.reconciled.dev/unregister";

/// The ConfigMap whose data registers each Widget, in `finalizer-before-cleanup`.
const REGISTRY: &str = "registry";

/// The label naming a child's Widget.
const WIDGET_LABEL: &str = "chaos.reconciled.dev/widget";

/// The custom resource: a spec switch and a status the scenarios record in.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
struct Widget {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WidgetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<WidgetStatus>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
struct WidgetSpec {
    #[serde(default = "yes")]
    enabled: bool,
}

impl Default for WidgetSpec {
    fn default() -> Self {
        Self { enabled: true }
    }
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct WidgetStatus {
    #[serde(default)]
    observed_generation: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    child: String,
    #[serde(default)]
    children: i64,
}

impl Kind for Widget {
    fn gvk() -> Gvk {
        Gvk::new("chaos.reconciled.dev", "v1", "Widget")
    }
}

impl Object for Widget {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Debug, Deserialize)]
struct Settings {
    scenario: String,
    #[serde(default)]
    buggy: bool,
}

struct Bugs;

impl Reconciler for Bugs {
    fn describe() -> Description {
        describe::<Widget>().owns::<ConfigMap>().eventual().build()
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let settings: Settings = reconciled_guest::settings()?;
        let buggy = settings.buggy;
        let Some(w) = cache::get_opt::<Widget>(&req.namespace, &req.name)? else {
            if settings.scenario == "uid-blind" {
                return gone(&req, buggy);
            }
            return Ok(Outcome::Done);
        };
        match settings.scenario.as_str() {
            "create-unchecked" => create_unchecked(&w, buggy),
            "create-after-crash" => create_after_crash(&w, buggy),
            "retry-duplicates" => retry_duplicates(&w, buggy),
            "delete-on-stale-read" => delete_on_stale_read(&w, buggy),
            "status-unseen-write" => status_unseen_write(&w, buggy),
            "finalizer-before-cleanup" => finalizer_before_cleanup(&w, buggy),
            "conflict-done" => conflict_done(&w, buggy),
            "uid-blind" => uid_blind(&w, buggy),
            other => Err(Error::Invalid(format!(
                "settings: no scenario {other:?}; see the table in chaos-bugs/src/lib.rs"
            ))),
        }
    }
}

reconciled_guest::export_reconciler!(Bugs);

fn names(w: &Widget) -> (&str, &str) {
    (
        w.metadata.namespace.as_deref().unwrap_or_default(),
        w.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn status(w: &Widget) -> WidgetStatus {
    w.status.clone().unwrap_or_default()
}

/// A child of `w`: under `name`, or under a name the server generates from the Widget's.
fn child(w: &Widget, name: Option<String>) -> ConfigMap {
    let (namespace, widget) = names(w);
    ConfigMap {
        metadata: ObjectMeta {
            name: name.clone(),
            generate_name: name.is_none().then(|| format!("{widget}-")),
            namespace: Some(namespace.to_owned()),
            labels: Some([(WIDGET_LABEL.to_owned(), widget.to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("widget".to_owned(), widget.to_owned())].into()),
        ..ConfigMap::default()
    }
}

/// The Widget's one child under its fixed name: created, or found already there.
fn ensure_fixed_child(w: &Widget) -> Result<String> {
    let name = format!("{}-child", names(w).1);
    match client::create(&child(w, Some(name.clone()))) {
        Ok(_) => Ok(name),
        Err(e) if e.is_conflict() => Ok(name),
        Err(e) => Err(e),
    }
}

fn children_in_cache(w: &Widget) -> Result<Vec<ConfigMap>> {
    let (namespace, widget) = names(w);
    cache::list::<ConfigMap>(
        ListOptions::new()
            .in_namespace(namespace)
            .labels(format!("{WIDGET_LABEL}={widget}")),
    )
}

/// Bug: trusts the cache to show every child, and a stale one shows none.
fn create_unchecked(w: &Widget, buggy: bool) -> Result<Outcome> {
    if buggy {
        if children_in_cache(w)?.is_empty() {
            client::create(&child(w, None))?;
        }
    } else {
        ensure_fixed_child(w)?;
    }
    Ok(Outcome::Done)
}

/// Bug: between the create and the status write that records it, a crash loses the name.
fn create_after_crash(w: &Widget, buggy: bool) -> Result<Outcome> {
    let (namespace, name) = names(w);
    if !status(w).child.is_empty() {
        return Ok(Outcome::Done);
    }
    let made = if buggy {
        let made = client::create(&child(w, None))?;
        made.metadata.name.unwrap_or_default()
    } else {
        ensure_fixed_child(w)?
    };
    client::merge_patch_status::<Widget>(namespace, name, &json!({"status": {"child": made}}))?;
    Ok(Outcome::Done)
}

/// Bug: a failed status write retries the whole reconcile, and the create with it.
fn retry_duplicates(w: &Widget, buggy: bool) -> Result<Outcome> {
    let (namespace, name) = names(w);
    let generation = w.metadata.generation.unwrap_or_default();
    if status(w).observed_generation == generation {
        return Ok(Outcome::Done);
    }
    if buggy {
        client::create(&child(w, None))?;
    } else {
        ensure_fixed_child(w)?;
    }
    let patch = json!({"status": {"observedGeneration": generation}});
    client::merge_patch_status::<Widget>(namespace, name, &patch)?;
    Ok(Outcome::Done)
}

/// Bug: a destructive call on what may be an old view of the Widget.
fn delete_on_stale_read(w: &Widget, buggy: bool) -> Result<Outcome> {
    let (namespace, name) = names(w);
    let child_name = format!("{name}-child");
    if w.spec.enabled {
        ensure_fixed_child(w)?;
        return Ok(Outcome::Done);
    }
    if cache::get_opt::<ConfigMap>(namespace, &child_name)?.is_none() {
        return Ok(Outcome::Done);
    }
    // The fix: a quorum read before a delete that cannot be undone.
    if !buggy && api::get::<Widget>(namespace, name)?.spec.enabled {
        return Ok(Outcome::Done);
    }
    match client::delete::<ConfigMap>(namespace, &child_name) {
        Err(e) if !e.is_not_found() => Err(e),
        _ => Ok(Outcome::Done),
    }
}

/// Bug: the count is copied from a read that need not show this call's own create, and the
/// observed generation then says there is nothing more to do.
fn status_unseen_write(w: &Widget, buggy: bool) -> Result<Outcome> {
    let (namespace, name) = names(w);
    let generation = w.metadata.generation.unwrap_or_default();
    if status(w).observed_generation == generation {
        return Ok(Outcome::Done);
    }
    ensure_fixed_child(w)?;
    let children = if buggy {
        children_in_cache(w)?.len()
    } else {
        api::list::<ConfigMap>(
            ListOptions::new()
                .in_namespace(namespace)
                .labels(format!("{WIDGET_LABEL}={name}")),
        )?
        .len()
    };
    let patch = json!({"status": {"observedGeneration": generation, "children": children}});
    client::merge_patch_status::<Widget>(namespace, name, &patch)?;
    Ok(Outcome::Done)
}

/// Bug: the finalizer goes first, so a crash before the cleanup leaves the registry entry of
/// a Widget that no longer exists, forever.
fn finalizer_before_cleanup(w: &Widget, buggy: bool) -> Result<Outcome> {
    let (namespace, name) = names(w);
    let held = reconciled_guest::has_finalizer(w, FINALIZER);
    if w.metadata.deletion_timestamp.is_none() {
        if !held {
            let patch = json!({"metadata": {"finalizers": [FINALIZER]}});
            client::merge_patch::<Widget>(namespace, name, &patch)?;
        }
        let registered = cache::get_opt::<ConfigMap>(namespace, REGISTRY)?
            .and_then(|r| r.data)
            .is_some_and(|d| d.contains_key(name));
        if !registered {
            let patch = json!({"data": {name: "registered"}});
            client::merge_patch::<ConfigMap>(namespace, REGISTRY, &patch)?;
        }
        return Ok(Outcome::Done);
    }
    if !held {
        return Ok(Outcome::Done);
    }
    let release = json!({"metadata": {"finalizers": null}});
    let unregister = json!({"data": {name: null}});
    if buggy {
        client::merge_patch::<Widget>(namespace, name, &release)?;
        client::merge_patch::<ConfigMap>(namespace, REGISTRY, &unregister)?;
    } else {
        client::merge_patch::<ConfigMap>(namespace, REGISTRY, &unregister)?;
        client::merge_patch::<Widget>(namespace, name, &release)?;
    }
    Ok(Outcome::Done)
}

/// Bug: a lost race is taken for success, and the status is never written.
fn conflict_done(w: &Widget, buggy: bool) -> Result<Outcome> {
    let generation = w.metadata.generation.unwrap_or_default();
    if status(w).observed_generation == generation {
        return Ok(Outcome::Done);
    }
    let mut next = w.clone();
    next.status = Some(WidgetStatus {
        observed_generation: generation,
        ..status(w)
    });
    match client::update_status(&next) {
        Ok(_) => Ok(Outcome::Done),
        Err(e) if buggy && e.is_conflict() => Ok(Outcome::Done),
        Err(e) => Err(e),
    }
}

/// `uid-blind`: the Widget is gone, so its child goes too (as an external resource would, which
/// no garbage collector tidies). The fix makes sure first: a cache that lags may not show a
/// Widget made again.
fn gone(req: &Request, buggy: bool) -> Result<Outcome> {
    if !buggy && quorum_uid(&req.namespace, &req.name)?.is_some() {
        return Ok(Outcome::Done);
    }
    let child = format!("{}-child", req.name);
    match client::delete::<ConfigMap>(&req.namespace, &child) {
        Err(e) if !e.is_not_found() => Err(e),
        _ => Ok(Outcome::Done),
    }
}

/// The uid of the Widget the API server holds, if any: a read no cache can make stale.
fn quorum_uid(namespace: &str, name: &str) -> Result<Option<String>> {
    match api::get::<Widget>(namespace, name) {
        Ok(w) => Ok(w.metadata.uid),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Bug: a Widget deleted and made again between two reconciles looks like an update, and the
/// child of the old one, found by name, is kept with its dead owner. The fix replaces a child
/// another incarnation controls, and acts only for the Widget the API server holds.
fn uid_blind(w: &Widget, buggy: bool) -> Result<Outcome> {
    let (namespace, name) = names(w);
    if !buggy && quorum_uid(namespace, name)? != w.metadata.uid {
        // The cache shows a Widget that is no more: its events are on their way.
        return Ok(Outcome::Done);
    }
    let child_name = format!("{name}-child");
    if let Some(found) = cache::get_opt::<ConfigMap>(namespace, &child_name)? {
        if buggy || reconciled_guest::is_controlled_by(&found, w) {
            return Ok(Outcome::Done);
        }
        match client::delete::<ConfigMap>(namespace, &child_name) {
            Err(e) if !e.is_not_found() => return Err(e),
            _ => {}
        }
    }
    let mut made = child(w, Some(child_name));
    reconciled_guest::set_controller_reference(w, &mut made)?;
    match client::create(&made) {
        Err(e) if !e.is_conflict() => Err(e),
        _ => Ok(Outcome::Done),
    }
}
