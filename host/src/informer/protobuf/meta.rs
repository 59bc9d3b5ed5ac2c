//! What the store indexes by, read straight from an object's `metav1.ObjectMeta` on the wire:
//! the key, uid, resourceVersion, labels and owners, with no trip through JSON.
//!
//! Only the fields read here are looked at; the full check of every field is the JSON writer's
//! ([`super::to_json`]), which always runs on the same bytes before an object is stored.

use super::error::Error;
use super::to_json::map_entries;
use super::wire::{self, Fields, Value};
use crate::object::OwnerRef;

/// An object's `metadata` (field 1 of every Kubernetes object).
pub(super) fn metadata(object: &[u8]) -> Result<&[u8], Error> {
    let mut meta = None;
    for field in Fields::new(object) {
        if let (1, value) = field? {
            let Value::Bytes(b) = value else {
                return Err(Error::WireType {
                    message: "object",
                    field: "metadata",
                });
            };
            meta = Some(b);
        }
    }
    meta.ok_or(Error::NoMetadata)
}

fn string_field<'a>(value: Value<'a>, field: &'static str) -> Result<&'a str, Error> {
    match value {
        Value::Bytes(b) => Ok(wire::text(b)?),
        _ => Err(Error::WireType {
            message: "ObjectMeta",
            field,
        }),
    }
}

/// Where an object is and which version it is: enough to tell whether the store already holds
/// it unchanged.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity<'a> {
    /// Empty for a cluster-scoped object.
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) resource_version: &'a str,
}

/// Reads the [`Identity`] of an encoded object.
pub(crate) fn identity(object: &[u8]) -> Result<Identity<'_>, Error> {
    let mut id = Identity::default();
    for field in Fields::new(metadata(object)?) {
        match field? {
            (1, v) => id.name = string_field(v, "name")?,
            (3, v) => id.namespace = string_field(v, "namespace")?,
            (6, v) => id.resource_version = string_field(v, "resourceVersion")?,
            _ => {}
        }
    }
    Ok(id)
}

/// The fields the store keeps beside an object's JSON.
#[derive(Debug, Default)]
pub(super) struct IndexFields<'a> {
    pub(super) id: Identity<'a>,
    pub(super) uid: &'a str,
    /// Sorted by key.
    pub(super) labels: Vec<(&'a str, &'a str)>,
    pub(super) owners: Vec<OwnerRef>,
}

/// Reads the [`IndexFields`] of an encoded object.
pub(super) fn index_fields(object: &[u8]) -> Result<IndexFields<'_>, Error> {
    let meta = metadata(object)?;
    let mut out = IndexFields::default();
    for field in Fields::new(meta) {
        match field? {
            (1, v) => out.id.name = string_field(v, "name")?,
            (3, v) => out.id.namespace = string_field(v, "namespace")?,
            (5, v) => out.uid = string_field(v, "uid")?,
            (6, v) => out.id.resource_version = string_field(v, "resourceVersion")?,
            (13, Value::Bytes(b)) => out.owners.push(owner(b)?),
            _ => {}
        }
    }
    out.labels = map_entries(meta, 11, &[])?
        .into_iter()
        .map(|(k, v)| Ok((k, wire::text(v)?)))
        .collect::<Result<_, Error>>()?;
    Ok(out)
}

fn owner(b: &[u8]) -> Result<OwnerRef, Error> {
    let (mut api_version, mut kind, mut name, mut uid, mut controller) = ("", "", "", "", false);
    for field in Fields::new(b) {
        match field? {
            (5, v) => api_version = string_field(v, "ownerReferences.apiVersion")?,
            (1, v) => kind = string_field(v, "ownerReferences.kind")?,
            (3, v) => name = string_field(v, "ownerReferences.name")?,
            (4, v) => uid = string_field(v, "ownerReferences.uid")?,
            (6, Value::Varint(c)) => controller = c != 0,
            _ => {}
        }
    }
    Ok(OwnerRef {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller,
    })
}

/// One annotation of an encoded object, as a watch bookmark carries
/// `k8s.io/initial-events-end`.
pub(crate) fn annotation<'a>(object: &'a [u8], key: &str) -> Result<Option<&'a str>, Error> {
    let entries = map_entries(metadata(object)?, 12, &[])?;
    match entries.iter().find(|(k, _)| *k == key) {
        Some((_, v)) => Ok(Some(wire::text(v)?)),
        None => Ok(None),
    }
}
