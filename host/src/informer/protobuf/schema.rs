//! The messages converted from protobuf, as tables: each field's number, its JSON name, its type
//! and when the API server's JSON would show it.
//!
//! The tables are the Go types' `protobuf` and `json` struct tags (k8s.io/api and
//! k8s.io/apimachinery), which is what decides the JSON the server sends for the same object.
//! Fields are sorted by JSON name, the order the store's compact JSON keeps keys in (serde_json's
//! map is sorted), so a converted object is byte for byte what the JSON path would store.
//!
//! A field number not in a table is an error, never skipped: a newer server's new field would
//! otherwise vanish from the cache unseen. The reflector then reads that kind as JSON.

/// One message type.
#[derive(Debug)]
pub(super) struct Message {
    /// The Go type's name, for errors.
    pub(super) name: &'static str,
    /// Sorted by [`Field::json`].
    pub(super) fields: &'static [Field],
}

/// One field of a [`Message`].
#[derive(Debug)]
pub(super) struct Field {
    /// The protobuf field number; 0 for a [`Ty::Const`], which is not on the wire.
    pub(super) number: u32,
    /// The JSON name.
    pub(super) json: &'static str,
    pub(super) ty: Ty,
    pub(super) emit: Emit,
}

/// A field's type, as JSON shows it.
#[derive(Debug)]
pub(super) enum Ty {
    /// Not on the wire: `apiVersion` and `kind`, which protobuf carries outside the object.
    Const(&'static str),
    String,
    Bool,
    Int64,
    /// `metav1.Time`: `{1: seconds}`, shown as RFC 3339 in UTC to the second; empty is the zero
    /// time, shown as `null`.
    Time,
    /// `metav1.FieldsV1`: `{1: raw JSON}`, shown as that JSON.
    RawJson,
    Message(&'static Message),
    /// `map<string, string>`.
    MapString,
    /// `map<string, bytes>`, values in base64.
    MapBytes,
    /// `repeated` of the inner type, shown as an array.
    Repeated(&'static Ty),
}

/// When a field is shown, from its Go type and json tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Emit {
    /// `omitempty` on a value: absent, zero, empty or `false` is not shown.
    OmitEmpty,
    /// `omitempty` on a pointer (or a struct, which Go always shows): shown whenever it is on the
    /// wire, even when zero, as `false` or `null`.
    Present,
    /// No `omitempty`: always shown, the zero value when absent.
    Always,
    /// `omitzero` on `metav1.Time`: not shown when absent or the zero time.
    OmitZero,
}

const fn f(number: u32, json: &'static str, ty: Ty, emit: Emit) -> Field {
    Field {
        number,
        json,
        ty,
        emit,
    }
}

use Emit::*;

/// `metav1.OwnerReference`.
pub(super) static OWNER_REFERENCE: Message = Message {
    name: "OwnerReference",
    fields: &[
        f(5, "apiVersion", Ty::String, Always),
        f(7, "blockOwnerDeletion", Ty::Bool, Present),
        f(6, "controller", Ty::Bool, Present),
        f(1, "kind", Ty::String, Always),
        f(3, "name", Ty::String, Always),
        f(4, "uid", Ty::String, Always),
    ],
};

/// `metav1.ManagedFieldsEntry`.
pub(super) static MANAGED_FIELDS_ENTRY: Message = Message {
    name: "ManagedFieldsEntry",
    fields: &[
        f(3, "apiVersion", Ty::String, OmitEmpty),
        f(6, "fieldsType", Ty::String, OmitEmpty),
        f(7, "fieldsV1", Ty::RawJson, Present),
        f(1, "manager", Ty::String, OmitEmpty),
        f(2, "operation", Ty::String, OmitEmpty),
        f(8, "subresource", Ty::String, OmitEmpty),
        f(4, "time", Ty::Time, Present),
    ],
};

/// `metav1.ObjectMeta`. The reflector's transform reaches into it: `managedFields` and some
/// annotations may be left out.
pub(super) static OBJECT_META: Message = Message {
    name: "ObjectMeta",
    fields: &[
        f(12, "annotations", Ty::MapString, OmitEmpty),
        f(8, "creationTimestamp", Ty::Time, OmitZero),
        f(10, "deletionGracePeriodSeconds", Ty::Int64, Present),
        f(9, "deletionTimestamp", Ty::Time, Present),
        f(14, "finalizers", Ty::Repeated(&Ty::String), OmitEmpty),
        f(2, "generateName", Ty::String, OmitEmpty),
        f(7, "generation", Ty::Int64, OmitEmpty),
        f(11, "labels", Ty::MapString, OmitEmpty),
        f(
            17,
            "managedFields",
            Ty::Repeated(&Ty::Message(&MANAGED_FIELDS_ENTRY)),
            OmitEmpty,
        ),
        f(1, "name", Ty::String, OmitEmpty),
        f(3, "namespace", Ty::String, OmitEmpty),
        f(
            13,
            "ownerReferences",
            Ty::Repeated(&Ty::Message(&OWNER_REFERENCE)),
            OmitEmpty,
        ),
        f(6, "resourceVersion", Ty::String, OmitEmpty),
        f(4, "selfLink", Ty::String, OmitEmpty),
        f(5, "uid", Ty::String, OmitEmpty),
    ],
};

/// `v1.ConfigMap`.
pub(super) static CONFIG_MAP: Message = Message {
    name: "ConfigMap",
    fields: &[
        f(0, "apiVersion", Ty::Const("v1"), Always),
        f(3, "binaryData", Ty::MapBytes, OmitEmpty),
        f(2, "data", Ty::MapString, OmitEmpty),
        f(4, "immutable", Ty::Bool, Present),
        f(0, "kind", Ty::Const("ConfigMap"), Always),
        f(1, "metadata", Ty::Message(&OBJECT_META), Present),
    ],
};

/// `v1.Secret`. `stringData` is write-only: the server never sends it, but it is in the table so
/// that it would be shown, not refused, if it did.
pub(super) static SECRET: Message = Message {
    name: "Secret",
    fields: &[
        f(0, "apiVersion", Ty::Const("v1"), Always),
        f(2, "data", Ty::MapBytes, OmitEmpty),
        f(5, "immutable", Ty::Bool, Present),
        f(0, "kind", Ty::Const("Secret"), Always),
        f(1, "metadata", Ty::Message(&OBJECT_META), Present),
        f(4, "stringData", Ty::MapString, OmitEmpty),
        f(3, "type", Ty::String, OmitEmpty),
    ],
};

/// `v1.ObjectReference`.
pub(super) static OBJECT_REFERENCE: Message = Message {
    name: "ObjectReference",
    fields: &[
        f(5, "apiVersion", Ty::String, OmitEmpty),
        f(7, "fieldPath", Ty::String, OmitEmpty),
        f(1, "kind", Ty::String, OmitEmpty),
        f(3, "name", Ty::String, OmitEmpty),
        f(2, "namespace", Ty::String, OmitEmpty),
        f(6, "resourceVersion", Ty::String, OmitEmpty),
        f(4, "uid", Ty::String, OmitEmpty),
    ],
};

/// `v1.LocalObjectReference`.
pub(super) static LOCAL_OBJECT_REFERENCE: Message = Message {
    name: "LocalObjectReference",
    fields: &[f(1, "name", Ty::String, OmitEmpty)],
};

/// `v1.ServiceAccount`.
pub(super) static SERVICE_ACCOUNT: Message = Message {
    name: "ServiceAccount",
    fields: &[
        f(0, "apiVersion", Ty::Const("v1"), Always),
        f(4, "automountServiceAccountToken", Ty::Bool, Present),
        f(
            3,
            "imagePullSecrets",
            Ty::Repeated(&Ty::Message(&LOCAL_OBJECT_REFERENCE)),
            OmitEmpty,
        ),
        f(0, "kind", Ty::Const("ServiceAccount"), Always),
        f(1, "metadata", Ty::Message(&OBJECT_META), Present),
        f(
            2,
            "secrets",
            Ty::Repeated(&Ty::Message(&OBJECT_REFERENCE)),
            OmitEmpty,
        ),
    ],
};

/// `v1.NamespaceCondition`. `lastTransitionTime` is a `metav1.Time` value with `omitempty`,
/// which Go never omits: the zero time shows as `null`.
pub(super) static NAMESPACE_CONDITION: Message = Message {
    name: "NamespaceCondition",
    fields: &[
        f(4, "lastTransitionTime", Ty::Time, Present),
        f(6, "message", Ty::String, OmitEmpty),
        f(5, "reason", Ty::String, OmitEmpty),
        f(2, "status", Ty::String, Always),
        f(1, "type", Ty::String, Always),
    ],
};

/// `v1.NamespaceSpec`.
pub(super) static NAMESPACE_SPEC: Message = Message {
    name: "NamespaceSpec",
    fields: &[f(1, "finalizers", Ty::Repeated(&Ty::String), OmitEmpty)],
};

/// `v1.NamespaceStatus`.
pub(super) static NAMESPACE_STATUS: Message = Message {
    name: "NamespaceStatus",
    fields: &[
        f(
            2,
            "conditions",
            Ty::Repeated(&Ty::Message(&NAMESPACE_CONDITION)),
            OmitEmpty,
        ),
        f(1, "phase", Ty::String, OmitEmpty),
    ],
};

/// `v1.Namespace`. `spec` and `status` are struct values, which Go always shows, as `{}` when
/// empty.
pub(super) static NAMESPACE: Message = Message {
    name: "Namespace",
    fields: &[
        f(0, "apiVersion", Ty::Const("v1"), Always),
        f(0, "kind", Ty::Const("Namespace"), Always),
        f(1, "metadata", Ty::Message(&OBJECT_META), Present),
        f(2, "spec", Ty::Message(&NAMESPACE_SPEC), Present),
        f(3, "status", Ty::Message(&NAMESPACE_STATUS), Present),
    ],
};

/// The kinds read as protobuf: `(group, version, kind)` and their top-level message.
pub(super) static KINDS: &[(&str, &str, &str, &Message)] = &[
    ("", "v1", "ConfigMap", &CONFIG_MAP),
    ("", "v1", "Namespace", &NAMESPACE),
    ("", "v1", "Secret", &SECRET),
    ("", "v1", "ServiceAccount", &SERVICE_ACCOUNT),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn messages() -> Vec<&'static Message> {
        vec![
            &OWNER_REFERENCE,
            &MANAGED_FIELDS_ENTRY,
            &OBJECT_META,
            &CONFIG_MAP,
            &SECRET,
            &OBJECT_REFERENCE,
            &LOCAL_OBJECT_REFERENCE,
            &SERVICE_ACCOUNT,
            &NAMESPACE_CONDITION,
            &NAMESPACE_SPEC,
            &NAMESPACE_STATUS,
            &NAMESPACE,
        ]
    }

    #[test]
    fn every_table_is_sorted_as_the_store_sorts_keys_and_numbers_are_unique() {
        for m in messages() {
            assert!(
                m.fields.len() <= 16,
                "{}: the writer keeps 16 slots",
                m.name
            );
            let names: Vec<_> = m.fields.iter().map(|f| f.json).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(names, sorted, "{}", m.name);
            let mut numbers: Vec<_> = m
                .fields
                .iter()
                .map(|f| f.number)
                .filter(|n| *n != 0)
                .collect();
            let n = numbers.len();
            numbers.sort_unstable();
            numbers.dedup();
            assert_eq!(numbers.len(), n, "{}", m.name);
        }
    }

    #[test]
    fn every_kind_has_its_metadata_at_field_one() {
        for (_, version, kind, m) in KINDS {
            let meta = m.fields.iter().find(|f| f.json == "metadata").unwrap();
            assert_eq!(meta.number, 1, "{kind}");
            assert!(matches!(meta.ty, Ty::Message(m) if std::ptr::eq(m, &OBJECT_META)));
            let consts: Vec<_> = m
                .fields
                .iter()
                .filter_map(|f| match f.ty {
                    Ty::Const(v) => Some((f.json, v)),
                    _ => None,
                })
                .collect();
            assert_eq!(consts, [("apiVersion", *version), ("kind", *kind)]);
        }
    }
}
