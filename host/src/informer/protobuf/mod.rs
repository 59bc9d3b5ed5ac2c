//! Protobuf on the wire for built-in kinds: the reflector asks for
//! `application/vnd.kubernetes.protobuf` where a kind has a table here, and turns each object
//! into the store's compact JSON once, as it arrives.
//!
//! Why: decoding JSON is most of an initial sync's CPU, and protobuf is what client-go and
//! controller-runtime read by default. The objects are still stored and handed to guests as JSON,
//! byte for byte what the JSON path would store (the unit tests and the integration test
//! `protobuf` compare the two on the same objects), so nothing downstream can tell.
//!
//! Where it may surprise:
//! - Only the kinds in `schema.rs` are read as protobuf; everything else, custom resources
//!   included, stays JSON. The Accept header always offers JSON too, and the reflector follows
//!   the Content-Type of each answer.
//! - Anything the tables do not know (a field a newer server added, a string that is not UTF-8)
//!   is an [`Error`], never skipped: the reflector then reads that informer as JSON from a fresh
//!   sync, and says so in its log.

mod envelope;
mod error;
mod meta;
mod schema;
mod to_json;
mod wire;

pub use error::Error;

pub(crate) use envelope::{list_page, status, watch_event};
pub(crate) use meta::{annotation, identity};
#[cfg(test)]
pub(crate) use wire::encode;

use crate::informer::discovery::Resource;
use crate::object::{Object, Transform};
use schema::Message;
use to_json::Trim;

/// What the reflector asks for on a LIST of a kind read as protobuf.
pub(crate) const ACCEPT_LIST: &str = "application/vnd.kubernetes.protobuf, application/json";

/// What the reflector asks for on a watch of a kind read as protobuf.
pub(crate) const ACCEPT_WATCH: &str =
    "application/vnd.kubernetes.protobuf;stream=watch, application/json";

/// The largest watch frame accepted: the API server refuses objects over about 1.5 MiB, so a
/// frame far beyond that is a broken stream, not an object.
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Whether a response's `Content-Type` is protobuf.
pub(crate) fn is_protobuf(content_type: Option<&http::HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/vnd.kubernetes.protobuf"))
}

/// A kind read as protobuf: the table its objects are written to JSON by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kind {
    message: &'static Message,
}

impl Kind {
    /// The kind of `resource`, if it is read as protobuf: ConfigMap, Namespace, Secret and
    /// ServiceAccount.
    pub(crate) fn of(resource: &Resource) -> Option<Kind> {
        schema::KINDS
            .iter()
            .find(|(g, v, k, _)| {
                *g == resource.group && *v == resource.version && *k == resource.kind
            })
            .map(|(_, _, _, message)| Kind { message })
    }

    /// The Go type's name, `ConfigMap` say.
    pub(crate) fn name(&self) -> &'static str {
        self.message.name
    }

    /// Turns one encoded object (a list item, or an event's `raw`) into what the store holds,
    /// with `transform` applied.
    pub(crate) fn decode(self, item: &[u8], transform: &Transform) -> Result<Object, Error> {
        let trim = Trim {
            metadata_only: transform.metadata_only,
            strip_managed_fields: transform.strip_managed_fields,
            strip_annotations: &transform.strip_annotations,
        };
        // Most of an object is its body, and JSON is a little larger than protobuf.
        let mut json = Vec::with_capacity(item.len() + item.len() / 4 + 64);
        to_json::write_object(&mut json, self.message, item, trim)?;
        if !transform.drop_paths.is_empty() {
            // Paths may name any field: drop them on the JSON, as the JSON path does.
            let value = serde_json::from_slice(&json).map_err(Error::BadJson)?;
            return Ok(Object::from_value(value, transform, None)?);
        }
        let fields = meta::index_fields(item)?;
        Ok(Object::from_parts(
            fields.id.namespace,
            fields.id.name,
            fields.uid,
            fields.id.resource_version,
            fields
                .labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            fields.owners,
            json,
        )?)
    }
}

/// A whole LIST response body of `resource`, read as the reflector reads each page, for
/// benchmarks. `None` when the kind is not read as protobuf.
#[cfg(feature = "bench")]
pub fn decode_list(
    resource: &Resource,
    body: &[u8],
    transform: &Transform,
) -> Option<Result<Vec<Object>, Error>> {
    let kind = Kind::of(resource)?;
    Some(list_page(body).and_then(|page| {
        page.items
            .iter()
            .map(|item| kind.decode(item, transform))
            .collect()
    }))
}

/// The API error in a protobuf error body (a `Status`), as kube reports one read from JSON, so
/// that 410 and 403 are told apart the same way on both paths. A body that is not a `Status`
/// keeps the HTTP code.
pub(crate) fn api_error(code: http::StatusCode, body: &[u8]) -> kube::Error {
    let status = envelope::unknown(body)
        .ok()
        .filter(|u| u.kind == "Status")
        .and_then(|u| status(u.raw).ok());
    let (code, reason, message) = match status {
        // As kube reads a JSON Status: its own code, where it has one.
        Some(s) => (
            u16::try_from(s.code)
                .ok()
                .filter(|c| (100..600).contains(c))
                .unwrap_or(code.as_u16()),
            s.reason,
            s.message,
        ),
        None => (
            code.as_u16(),
            code.canonical_reason().unwrap_or("Unknown").to_string(),
            format!(
                "HTTP {code} with a body that is not a Status ({} bytes)",
                body.len()
            ),
        ),
    };
    kube::Error::Api(
        kube::core::Status::failure(&message, &reason)
            .with_code(code)
            .boxed(),
    )
}

/// The protobuf path against the JSON path: the same object, as the API server would send it
/// either way, must become the same stored [`Object`].
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::wire::encode::{bytes, entry, int};
    use super::*;
    use crate::informer::discovery::Resource;

    fn resource(kind: &str) -> Resource {
        Resource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced: true,
        }
    }

    fn message(build: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut m = Vec::new();
        build(&mut m);
        m
    }

    /// 2026-12-06T02:45:29Z.
    const T: u64 = 1_796_525_129;

    fn time(seconds: u64) -> Vec<u8> {
        message(|m| int(m, 1, seconds))
    }

    /// A ConfigMap with every field the tables know, as protobuf ...
    fn config_map_pb() -> Vec<u8> {
        let owner = message(|m| {
            bytes(m, 1, b"Deployment");
            bytes(m, 3, b"web");
            bytes(m, 4, b"u-owner");
            bytes(m, 5, b"apps/v1");
            int(m, 6, 1);
            int(m, 7, 0);
        });
        let managed = message(|m| {
            bytes(m, 1, b"kubectl");
            bytes(m, 2, b"Apply");
            bytes(m, 3, b"v1");
            bytes(m, 4, &time(T));
            bytes(m, 6, b"FieldsV1");
            bytes(
                m,
                7,
                &message(|f| bytes(f, 1, br#"{"f:data":{"f:b":{},"f:a":{}}}"#)),
            );
        });
        let meta = message(|m| {
            bytes(m, 1, b"settings");
            bytes(m, 3, b"team-a");
            bytes(m, 5, b"3f1c-uid");
            bytes(m, 6, b"4711");
            int(m, 7, 3);
            bytes(m, 8, &time(T));
            bytes(m, 9, &time(T + 30));
            int(m, 10, 30);
            entry(m, 11, "tier", b"web");
            entry(m, 11, "app", b"shop");
            entry(
                m,
                12,
                "kubectl.kubernetes.io/last-applied-configuration",
                b"{}",
            );
            entry(m, 12, "note", "<a & \"b\">\n\u{e9}".as_bytes());
            bytes(m, 13, &owner);
            bytes(m, 14, b"example.com/hold");
            bytes(m, 14, b"example.com/second");
            bytes(m, 17, &managed);
        });
        message(|m| {
            bytes(m, 1, &meta);
            entry(m, 2, "b", b"two");
            entry(m, 2, "a", "one \u{1F600}".as_bytes());
            entry(m, 3, "bin", &[0, 1, 2, 0xff]);
            int(m, 4, 0);
        })
    }

    /// ... and as JSON.
    fn config_map_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": "team-a",
                "uid": "3f1c-uid",
                "resourceVersion": "4711",
                "generation": 3,
                "creationTimestamp": "2026-12-06T02:45:29Z",
                "deletionTimestamp": "2026-12-06T02:45:59Z",
                "deletionGracePeriodSeconds": 30,
                "labels": {"tier": "web", "app": "shop"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "note": "<a & \"b\">\n\u{e9}"
                },
                "ownerReferences": [{
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "uid": "u-owner",
                    "controller": true,
                    "blockOwnerDeletion": false
                }],
                "finalizers": ["example.com/hold", "example.com/second"],
                "managedFields": [{
                    "manager": "kubectl",
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": "2026-12-06T02:45:29Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:b": {}, "f:a": {}}}
                }]
            },
            "data": {"b": "two", "a": "one \u{1F600}"},
            "binaryData": {"bin": "AAEC/w=="},
            "immutable": false
        })
    }

    fn transforms() -> Vec<Transform> {
        vec![
            Transform::default(),
            Transform::none(),
            Transform {
                metadata_only: true,
                ..Transform::default()
            },
            Transform {
                strip_annotations: vec![
                    "note".into(),
                    "kubectl.kubernetes.io/last-applied-configuration".into(),
                ],
                ..Transform::none()
            },
            Transform {
                drop_paths: vec!["data.a".into(), "metadata.ownerReferences".into()],
                ..Transform::default()
            },
        ]
    }

    #[test]
    fn a_config_map_is_stored_byte_for_byte_as_from_json_under_every_transform() {
        let kind = Kind::of(&resource("ConfigMap")).unwrap();
        for t in transforms() {
            let from_pb = kind.decode(&config_map_pb(), &t).unwrap();
            let from_json = Object::from_value(config_map_json(), &t, None).unwrap();
            assert_eq!(
                String::from_utf8_lossy(from_pb.json()),
                String::from_utf8_lossy(from_json.json()),
                "{t:?}"
            );
            assert_eq!(from_pb, from_json, "{t:?}");
        }
    }

    #[test]
    fn zero_values_are_left_out_where_the_servers_json_leaves_them_out() {
        // Everything at its zero value, as Go marshals a mostly empty object: non-pointer strings
        // and ints are on the wire even when empty, pointers only when set.
        let owner = message(|m| {
            bytes(m, 1, b"");
            bytes(m, 3, b"");
            bytes(m, 4, b"");
            bytes(m, 5, b"");
        });
        let meta = message(|m| {
            bytes(m, 1, b"bare");
            bytes(m, 2, b"");
            bytes(m, 3, b"");
            bytes(m, 4, b"");
            bytes(m, 5, b"");
            bytes(m, 6, b"1");
            int(m, 7, 0);
            bytes(m, 8, b"");
            bytes(m, 13, &owner);
        });
        let cm = message(|m| bytes(m, 1, &meta));
        let kind = Kind::of(&resource("ConfigMap")).unwrap();
        let obj = kind.decode(&cm, &Transform::none()).unwrap();
        assert_eq!(
            std::str::from_utf8(obj.json()).unwrap(),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bare","ownerReferences":[{"apiVersion":"","kind":"","name":"","uid":""}],"resourceVersion":"1"}}"#
        );
        assert_eq!(obj.key(), "bare");
        assert_eq!(obj.namespace(), None);
    }

    #[test]
    fn a_secret_shows_its_data_in_base64_and_its_type() {
        let meta = message(|m| {
            bytes(m, 1, b"token");
            bytes(m, 3, b"ns");
            bytes(m, 6, b"9");
        });
        let secret = message(|m| {
            bytes(m, 1, &meta);
            entry(m, 2, "key", b"s3cr3t\0");
            bytes(m, 3, b"Opaque");
            int(m, 5, 1);
        });
        let want = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "token", "namespace": "ns", "resourceVersion": "9"},
            "data": {"key": "czNjcjN0AA=="}, "type": "Opaque", "immutable": true
        });
        let kind = Kind::of(&resource("Secret")).unwrap();
        let t = Transform::default();
        assert_eq!(
            kind.decode(&secret, &t).unwrap(),
            Object::from_value(want, &t, None).unwrap()
        );
    }

    #[test]
    fn a_namespace_shows_an_empty_spec_and_a_zero_condition_time_as_go_does() {
        let condition = |time: &[u8]| {
            message(|m| {
                bytes(m, 1, b"NamespaceDeletionDiscoveryFailure");
                bytes(m, 2, b"False");
                bytes(m, 4, time);
                bytes(m, 5, b"ResourcesDiscovered");
                bytes(m, 6, b"All resources successfully discovered");
            })
        };
        let meta = message(|m| {
            bytes(m, 1, b"team-a");
            bytes(m, 5, b"ns-uid");
            bytes(m, 6, b"12");
            bytes(m, 8, &time(T));
            entry(m, 11, "kubernetes.io/metadata.name", b"team-a");
        });
        let ns = message(|m| {
            bytes(m, 1, &meta);
            bytes(m, 2, &message(|s| bytes(s, 1, b"kubernetes")));
            bytes(
                m,
                3,
                &message(|s| {
                    bytes(s, 1, b"Terminating");
                    bytes(s, 2, &condition(&time(T)));
                    bytes(s, 2, &condition(b""));
                }),
            );
        });
        let condition_json = |time: serde_json::Value| {
            json!({
                "type": "NamespaceDeletionDiscoveryFailure", "status": "False",
                "lastTransitionTime": time, "reason": "ResourcesDiscovered",
                "message": "All resources successfully discovered"
            })
        };
        let want = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {
                "name": "team-a", "uid": "ns-uid", "resourceVersion": "12",
                "creationTimestamp": "2026-12-06T02:45:29Z",
                "labels": {"kubernetes.io/metadata.name": "team-a"}
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {
                "phase": "Terminating",
                "conditions": [condition_json(json!("2026-12-06T02:45:29Z")), condition_json(json!(null))]
            }
        });
        let mut r = resource("Namespace");
        r.namespaced = false;
        let kind = Kind::of(&r).unwrap();
        let t = Transform::default();
        assert_eq!(
            kind.decode(&ns, &t).unwrap(),
            Object::from_value(want, &t, None).unwrap()
        );
        // Empty spec and status are on the wire, as Go marshals struct values, and shown.
        let bare = message(|m| {
            bytes(m, 1, &message(|x| bytes(x, 1, b"bare")));
            bytes(m, 2, b"");
            bytes(m, 3, b"");
        });
        assert_eq!(
            std::str::from_utf8(kind.decode(&bare, &t).unwrap().json()).unwrap(),
            r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bare"},"spec":{},"status":{}}"#
        );
    }

    #[test]
    fn a_service_account_shows_its_references_and_a_false_automount() {
        let sa = message(|m| {
            bytes(
                m,
                1,
                &message(|x| {
                    bytes(x, 1, b"builder");
                    bytes(x, 3, b"ci");
                }),
            );
            bytes(
                m,
                2,
                &message(|r| {
                    bytes(r, 1, b"Secret");
                    bytes(r, 3, b"builder-token");
                    bytes(r, 2, b"");
                }),
            );
            bytes(m, 3, &message(|r| bytes(r, 1, b"registry")));
            int(m, 4, 0);
        });
        let want = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": "ci"},
            "secrets": [{"kind": "Secret", "name": "builder-token"}],
            "imagePullSecrets": [{"name": "registry"}],
            "automountServiceAccountToken": false
        });
        let kind = Kind::of(&resource("ServiceAccount")).unwrap();
        let t = Transform::default();
        assert_eq!(
            kind.decode(&sa, &t).unwrap(),
            Object::from_value(want, &t, None).unwrap()
        );
    }

    #[test]
    fn the_last_of_a_map_key_sent_twice_wins_as_in_go() {
        let meta = message(|m| {
            bytes(m, 1, b"twice");
            entry(m, 11, "k", b"first");
            entry(m, 11, "k", b"second");
        });
        let cm = message(|m| bytes(m, 1, &meta));
        let obj = Kind::of(&resource("ConfigMap"))
            .unwrap()
            .decode(&cm, &Transform::none())
            .unwrap();
        assert_eq!(obj.label("k"), Some("second"));
        assert_eq!(obj.to_value()["metadata"]["labels"], json!({"k": "second"}));
    }

    #[test]
    fn an_unknown_field_is_an_error_naming_it_never_a_silent_loss() {
        let kind = Kind::of(&resource("ConfigMap")).unwrap();
        let mut cm = config_map_pb();
        bytes(&mut cm, 9, b"a field from a newer server");
        let err = kind.decode(&cm, &Transform::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "field 9 of ConfigMap is not known to this host (a newer API server?)"
        );
        let meta = message(|m| {
            bytes(m, 1, b"x");
            int(m, 18, 1);
        });
        let err = kind
            .decode(&message(|m| bytes(m, 1, &meta)), &Transform::default())
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::UnknownField {
                    message: "ObjectMeta",
                    number: 18
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        let kind = Kind::of(&resource("ConfigMap")).unwrap();
        let good = config_map_pb();
        // Every truncation of a valid object, and every single-byte corruption of it.
        for n in 0..good.len() {
            let _ = kind.decode(&good[..n], &Transform::none());
            for b in [0x00, 0x7f, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[n] = b;
                let _ = kind.decode(&bad, &Transform::none());
                let _ = identity(&bad);
                let _ = watch_event(&bad);
                let _ = list_page(&bad);
            }
        }
        let meta = message(|m| bytes(m, 1, &[0xff, 0xfe]));
        assert!(matches!(
            kind.decode(&message(|m| bytes(m, 1, &meta)), &Transform::none()),
            Err(Error::Wire(wire::WireError::NotUtf8))
        ));
        let meta = message(|m| {
            bytes(m, 1, b"x");
            bytes(m, 8, &time(1 << 60));
        });
        assert!(matches!(
            kind.decode(&message(|m| bytes(m, 1, &meta)), &Transform::none()),
            Err(Error::BadTime(s)) if s == 1 << 60
        ));
    }

    fn wrapped(kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut body = b"k8s\0".to_vec();
        let type_meta = message(|m| {
            bytes(m, 1, b"v1");
            bytes(m, 2, kind.as_bytes());
        });
        bytes(&mut body, 1, &type_meta);
        bytes(&mut body, 2, raw);
        body
    }

    #[test]
    fn a_list_page_gives_its_resource_version_continue_token_and_items() {
        let list_meta = message(|m| {
            bytes(m, 2, b"5000");
            bytes(m, 3, b"next-page");
        });
        let raw = message(|m| {
            bytes(m, 1, &list_meta);
            bytes(m, 2, &config_map_pb());
            bytes(m, 2, &config_map_pb());
        });
        let body = wrapped("ConfigMapList", &raw);
        let page = list_page(&body).unwrap();
        assert_eq!(
            (page.resource_version, page.continue_token),
            ("5000", "next-page")
        );
        assert_eq!(page.items.len(), 2);
        assert_eq!(
            identity(page.items[0]).unwrap(),
            meta::Identity {
                namespace: "team-a",
                name: "settings",
                resource_version: "4711"
            }
        );
        assert!(matches!(
            list_page(&wrapped("Status", &[])),
            Err(Error::NotAList(k)) if k == "Status"
        ));
        assert!(matches!(list_page(&raw), Err(Error::NoMagic)));
    }

    #[test]
    fn a_watch_frame_gives_its_type_and_object_and_a_bookmark_its_annotation() {
        let meta = message(|m| {
            bytes(m, 6, b"77");
            entry(m, 12, "k8s.io/initial-events-end", b"true");
        });
        let bookmark = message(|m| bytes(m, 1, &meta));
        let frame = message(|m| {
            bytes(m, 1, b"BOOKMARK");
            bytes(
                m,
                2,
                &message(|r| bytes(r, 1, &wrapped("ConfigMap", &bookmark))),
            );
        });
        let event = watch_event(&frame).unwrap();
        assert_eq!((event.kind, event.object.kind), ("BOOKMARK", "ConfigMap"));
        assert_eq!(identity(event.object.raw).unwrap().resource_version, "77");
        assert_eq!(
            annotation(event.object.raw, "k8s.io/initial-events-end").unwrap(),
            Some("true")
        );
        assert!(matches!(
            watch_event(&message(|m| bytes(m, 1, b"ADDED"))),
            Err(Error::NoObject)
        ));
    }

    fn status_body(code: u64, reason: &str, msg: &str) -> Vec<u8> {
        wrapped(
            "Status",
            &message(|m| {
                bytes(m, 2, b"Failure");
                bytes(m, 3, msg.as_bytes());
                bytes(m, 4, reason.as_bytes());
                int(m, 6, code);
            }),
        )
    }

    #[test]
    fn a_protobuf_error_body_keeps_its_code_reason_and_message() {
        let body = status_body(410, "Expired", "too old resource version: 1 (2)");
        match api_error(http::StatusCode::GONE, &body) {
            kube::Error::Api(s) => {
                assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
                assert_eq!(s.message, "too old resource version: 1 (2)");
            }
            other => panic!("{other:?}"),
        }
        match api_error(http::StatusCode::FORBIDDEN, b"<html>nope</html>") {
            kube::Error::Api(s) => {
                assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
                assert!(s.message.contains("not a Status"), "{}", s.message);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_the_kinds_with_a_table_are_read_as_protobuf() {
        assert_eq!(
            Kind::of(&resource("ConfigMap")).unwrap().name(),
            "ConfigMap"
        );
        assert_eq!(Kind::of(&resource("Secret")).unwrap().name(), "Secret");
        assert_eq!(
            Kind::of(&resource("Namespace")).unwrap().name(),
            "Namespace"
        );
        assert!(Kind::of(&resource("Pod")).is_none());
        let mut crd = resource("ConfigMap");
        crd.group = "example.com".into();
        assert!(Kind::of(&crd).is_none());
        assert!(is_protobuf(Some(&http::HeaderValue::from_static(
            "application/vnd.kubernetes.protobuf;stream=watch"
        ))));
        assert!(!is_protobuf(Some(&http::HeaderValue::from_static(
            "application/json"
        ))));
        assert!(!is_protobuf(None));
    }
}
