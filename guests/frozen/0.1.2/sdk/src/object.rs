//! Objects to and from the JSON text that crosses the boundary.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cache::Page;
use crate::{Error, Gvk, Kind, ListOptions, ListPage, Result};

/// An object ready for a write.
pub(crate) struct Encoded {
    /// `metadata.namespace`, empty if absent.
    pub(crate) namespace: String,
    /// `metadata.name`, empty if absent (the server then says what is wrong).
    pub(crate) name: String,
    /// The JSON text.
    pub(crate) body: String,
}

/// Encodes an object for a write, with `apiVersion` and `kind` filled in from `K` where missing
/// or empty (a CRD type need not carry them).
pub(crate) fn encode<K: Kind + Serialize>(obj: &K) -> Result<Encoded> {
    let mut value = serde_json::to_value(obj)
        .map_err(|e| Error::Invalid(format!("cannot serialize {}: {e}", K::gvk())))?;
    let Value::Object(map) = &mut value else {
        return Err(Error::Invalid(format!(
            "{} does not serialize to a JSON object",
            K::gvk()
        )));
    };
    let gvk = K::gvk();
    for (field, want) in [
        ("apiVersion", gvk.api_version()),
        ("kind", gvk.kind.clone()),
    ] {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => {
                map.insert(field.to_owned(), Value::String(want));
            }
        }
    }
    let metadata = |field: &str| {
        map.get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (namespace, name) = (metadata("namespace"), metadata("name"));
    Ok(Encoded {
        namespace,
        name,
        body: value.to_string(),
    })
}

/// Decodes an object of kind `gvk` that the host sent.
pub(crate) fn decode<K: DeserializeOwned>(gvk: &Gvk, json: &str) -> Result<K> {
    serde_json::from_str(json).map_err(|e| {
        Error::Other(format!(
            "cannot deserialize {gvk} from the host into {}: {e}",
            std::any::type_name::<K>()
        ))
    })
}

/// Decodes every item of a page, keeping its continue token.
pub(crate) fn decode_page<K: DeserializeOwned>(gvk: &Gvk, page: ListPage) -> Result<Page<K>> {
    Ok(Page {
        items: page
            .items
            .iter()
            .map(|item| decode(gvk, item))
            .collect::<Result<_>>()?,
        continue_token: page.continue_token,
    })
}

/// Follows continue tokens from `options.continue_token` to the last page.
pub(crate) fn list_all<K: DeserializeOwned>(
    gvk: &Gvk,
    mut options: ListOptions,
    list_page: impl Fn(&Gvk, &ListOptions) -> Result<ListPage>,
) -> Result<Vec<K>> {
    let mut all = Vec::new();
    loop {
        let page = list_page(gvk, &options)?;
        for item in &page.items {
            all.push(decode(gvk, item)?);
        }
        if page.continue_token.is_empty() {
            return Ok(all);
        }
        options.continue_token = page.continue_token;
    }
}

/// Whether `held` has every field of `wanted` with the same value: objects by key (a `null`
/// wanted means absent or null), lists element by element with the same length, numbers by
/// value (`1` and `1.0` agree).
pub(crate) fn contains(held: &Value, wanted: &Value) -> bool {
    match (held, wanted) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, wv)| match h.get(k) {
            Some(hv) => contains(hv, wv),
            None => wv.is_null(),
        }),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| contains(hv, wv))
        }
        (Value::Number(h), Value::Number(w)) => h.as_f64() == w.as_f64(),
        _ => held == wanted,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::Deserialize;

    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Crd {
        metadata: ObjectMeta,
    }

    impl Kind for Crd {
        fn gvk() -> Gvk {
            Gvk::new("example.com", "v1", "Crd")
        }
    }

    fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: namespace.map(str::to_owned),
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn encode_fills_in_type_meta_and_reads_namespace_and_name() {
        let obj = encode(&Crd {
            metadata: meta(Some("team-a"), "x"),
        })
        .unwrap();
        assert_eq!((obj.namespace.as_str(), obj.name.as_str()), ("team-a", "x"));
        let body: Value = serde_json::from_str(&obj.body).unwrap();
        assert_eq!(body["apiVersion"], "example.com/v1");
        assert_eq!(body["kind"], "Crd");
    }

    #[test]
    fn encode_keeps_type_meta_and_allows_cluster_scope() {
        let cm = ConfigMap {
            metadata: meta(None, "y"),
            data: Some(BTreeMap::from([("k".into(), "v".into())])),
            ..ConfigMap::default()
        };
        let obj = encode(&cm).unwrap();
        assert_eq!(obj.namespace, "");
        let back: ConfigMap = decode(&ConfigMap::gvk(), &obj.body).unwrap();
        assert_eq!(back, cm);
        let body: Value = serde_json::from_str(&obj.body).unwrap();
        assert_eq!(
            (&body["apiVersion"], &body["kind"]),
            (&"v1".into(), &"ConfigMap".into())
        );
    }

    #[test]
    fn decode_failure_is_other_and_names_the_kind() {
        let err = decode::<ConfigMap>(&ConfigMap::gvk(), "[1]").unwrap_err();
        assert_eq!(err.case(), "other");
        assert!(err.message().contains("v1/ConfigMap"), "{err}");
    }

    #[test]
    fn list_all_follows_continue_tokens() {
        let pages = |_: &Gvk, o: &ListOptions| -> Result<ListPage> {
            let (item, next) = match o.continue_token.as_str() {
                "" => ("1", "a"),
                "a" => ("2", "b"),
                _ => ("3", ""),
            };
            Ok(ListPage {
                items: vec![item.to_owned()],
                continue_token: next.to_owned(),
            })
        };
        let all: Vec<u32> = list_all(&ConfigMap::gvk(), ListOptions::new(), pages).unwrap();
        assert_eq!(all, [1, 2, 3]);
    }

    #[test]
    fn contains_holds_every_wanted_field_and_ignores_the_rest() {
        use serde_json::json;
        let held = json!({
            "metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"}},
            "data": {"k": "v"}, "spec": {"replicas": 2, "list": [{"a": 1, "b": 2}]},
        });
        assert!(contains(
            &held,
            &json!({"metadata": {"name": "a"}, "data": {"k": "v"}})
        ));
        assert!(contains(
            &held,
            &json!({"spec": {"replicas": 2.0, "list": [{"a": 1}]}})
        ));
        assert!(contains(&held, &json!({"data": {"gone": null}})));
        assert!(!contains(&held, &json!({"data": {"k": "w"}})));
        assert!(!contains(&held, &json!({"data": {"new": "v"}})));
        assert!(!contains(
            &held,
            &json!({"spec": {"list": [{"a": 1}, {"a": 2}]}})
        ));
        assert!(!contains(&held, &json!({"metadata": {"labels": null}})));
    }
}
