//! Example reconciler: a Reservation records `spec.slots` under its own name in the data of a
//! pool ConfigMap (`spec.pool`, same namespace), exactly as `README.md` says.
//!
//! The pool is not owned by the Reservation, so the garbage collector cannot tidy it: a
//! finalizer ([`FINALIZER`]) holds the Reservation until its entry is out of the pool. Its
//! `Ready` condition and `observedGeneration` are written by server-side apply of the status
//! subresource, which a spec edit made meanwhile cannot make conflict.

pub mod crd;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciled_guest::{
    Description, Gvk, ListOptions, Outcome, Reconciler, Request, Result, cache, client, condition,
    describe, events, find_condition, set_condition, with_finalizer,
};
use serde_json::json;

use crate::crd::{Reservation, ReservationStatus};

/// Holds a Reservation until its entry is out of the pool.
pub const FINALIZER: &str = "example.reconciled.dev/release";

/// Server-side apply field manager.
const FIELD_MANAGER: &str = "reservation";

/// The index `map` lists Reservations by.
const POOL_FIELD: &str = "spec.pool";

struct Reserver;

impl Reconciler for Reserver {
    fn describe() -> Description {
        describe::<Reservation>()
            .watches_guest_map::<ConfigMap>()
            .field_index::<Reservation>(POOL_FIELD)
            .build()
    }

    fn map(_kind: Gvk, object: String) -> Vec<Request> {
        let pool: ConfigMap = match serde_json::from_str(&object) {
            Ok(pool) => pool,
            Err(e) => {
                reconciled_guest::warn!("cannot read a ConfigMap to map: {e}");
                return Vec::new();
            }
        };
        let namespace = pool.metadata.namespace.unwrap_or_default();
        let name = pool.metadata.name.unwrap_or_default();
        let using = ListOptions::new()
            .in_namespace(namespace.clone())
            .field(POOL_FIELD, name.clone());
        match cache::list::<Reservation>(using) {
            Ok(found) => found
                .into_iter()
                .map(|r| Request {
                    namespace: r.metadata.namespace.unwrap_or_default(),
                    name: r.metadata.name.unwrap_or_default(),
                })
                .collect(),
            Err(e) => {
                reconciled_guest::warn!(
                    "cannot list the Reservations of pool {namespace}/{name}: {e}"
                );
                Vec::new()
            }
        }
    }

    fn reconcile(req: Request) -> Result<Outcome> {
        let Some(r) = cache::get_opt::<Reservation>(&req.namespace, &req.name)? else {
            return Ok(Outcome::Done);
        };
        with_finalizer(&r, FINALIZER, reserve, release)
    }
}

reconciled_guest::export_reconciler!(Reserver);

/// Records the reservation in its pool and says so in the `Ready` condition.
fn reserve(r: Reservation) -> Result<Outcome> {
    let generation = r.metadata.generation.unwrap_or_default();
    let (namespace, name) = names(&r);
    let (slots, pool) = (r.slots(), r.spec.pool.as_str());
    let status = r.status.clone().unwrap_or_default();
    let mut conditions = status.conditions;

    let mut ready = match cache::get_opt::<ConfigMap>(namespace, pool)? {
        None => condition(
            "Ready",
            false,
            "PoolMissing",
            &format!("ConfigMap {pool} does not exist"),
        ),
        Some(found) => {
            let want = slots.to_string();
            let recorded = found.data.as_ref().and_then(|d| d.get(name));
            if recorded != Some(&want) {
                let patch = json!({ "data": { name: want } });
                client::merge_patch::<ConfigMap>(namespace, pool, &patch)?;
            }
            condition(
                "Ready",
                true,
                "Reserved",
                &format!("{slots} slots reserved in ConfigMap {pool}"),
            )
        }
    };
    ready.observed_generation = Some(generation);

    let before = find_condition(&conditions, "Ready").map(|c| c.status.clone());
    let changed = set_condition(&mut conditions, ready.clone());
    if changed || status.observed_generation != generation {
        let applied = Reservation {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            status: Some(ReservationStatus {
                observed_generation: generation,
                conditions,
            }),
            ..Reservation::default()
        };
        client::apply_status(&applied, FIELD_MANAGER, true)?;
    }
    if before.as_deref() != Some(ready.status.as_str()) {
        let recorded = if ready.status == "True" {
            events::normal(&r, "Reserved", &ready.message)
        } else {
            events::warning(&r, "PoolMissing", &ready.message)
        };
        if let Err(e) = recorded {
            reconciled_guest::warn!("cannot record event on {namespace}/{name}: {e}");
        }
    }
    Ok(Outcome::Done)
}

/// Takes the reservation's entry out of its pool, before the finalizer goes.
fn release(r: Reservation) -> Result<Outcome> {
    let (namespace, name) = names(&r);
    let pool = r.spec.pool.as_str();
    let pool_data = cache::get_opt::<ConfigMap>(namespace, pool)?.and_then(|p| p.data);
    if pool_data.is_some_and(|d| d.contains_key(name)) {
        let patch = json!({ "data": { name: null } });
        match client::merge_patch::<ConfigMap>(namespace, pool, &patch) {
            // A pool gone meanwhile holds no entry: that is what was wanted.
            Err(e) if !e.is_not_found() => return Err(e),
            _ => {}
        }
    }
    let message = format!("released {} slots in ConfigMap {pool}", r.slots());
    if let Err(e) = events::normal(&r, "Released", &message) {
        reconciled_guest::warn!("cannot record event on {namespace}/{name}: {e}");
    }
    Ok(Outcome::Done)
}

fn names(r: &Reservation) -> (&str, &str) {
    (
        r.metadata.namespace.as_deref().unwrap_or_default(),
        r.metadata.name.as_deref().unwrap_or_default(),
    )
}
