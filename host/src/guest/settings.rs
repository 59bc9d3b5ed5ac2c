//! A guest's settings: the JSON object whoever deploys a module gives it, so that one module
//! runs twice with different settings and no rebuild. Guests read them through the WIT
//! `settings` interface.

use std::sync::Arc;

use serde_json::Value;

/// Most bytes of settings, as JSON text: settings configure a reconciler, they are not a place
/// for data (a ConfigMap key beside a module holds at most the API server's 1 MiB in all).
pub const MAX_BYTES: usize = 64 << 10;

/// How a file or a ConfigMap key holding a module's settings is named: `<stem>.settings.json`
/// beside `<stem>.wasm`.
pub const FILE_SUFFIX: &str = ".settings.json";

/// Why settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not JSON at all.
    #[error("the settings are not JSON ({0}); write a JSON object, such as {{\"replicas\": 2}}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error(
        "the settings are {found}, not a JSON object; wrap them in one, such as {{\"value\": …}}"
    )]
    NotAnObject {
        /// What they are: `an array`, `a string`, ...
        found: &'static str,
    },
    /// Larger than [`MAX_BYTES`].
    #[error("the settings are {bytes} bytes of JSON, over the limit of {max}; keep data elsewhere")]
    TooLarge {
        /// Their size.
        bytes: usize,
        /// [`MAX_BYTES`].
        max: usize,
    },
}

/// Settings, validated: a JSON object of at most [`MAX_BYTES`], kept as compact JSON text with
/// its keys sorted. Cheap to clone. The default is the empty object, which is what a guest reads
/// when it was given none.
///
/// Where it may surprise: keys come out sorted, not in the order written, so two settings that
/// differ only in key order or spacing are equal (and changing one into the other reloads
/// nothing); a guest must not read meaning into the order of keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GuestSettings(Arc<str>);

impl Default for GuestSettings {
    fn default() -> Self {
        Self(Arc::from("{}"))
    }
}

impl GuestSettings {
    /// Settings from parsed JSON.
    pub fn from_value(value: &Value) -> Result<Self, Error> {
        if !value.is_object() {
            return Err(Error::NotAnObject {
                found: crate::object::kind_of(value),
            });
        }
        let text = value.to_string();
        if text.len() > MAX_BYTES {
            return Err(Error::TooLarge {
                bytes: text.len(),
                max: MAX_BYTES,
            });
        }
        Ok(Self(Arc::from(text)))
    }

    /// Settings from JSON text. Oversized text is refused before it is parsed.
    pub fn parse(text: &str) -> Result<Self, Error> {
        if text.len() > MAX_BYTES {
            return Err(Error::TooLarge {
                bytes: text.len(),
                max: MAX_BYTES,
            });
        }
        let value: Value = serde_json::from_str(text).map_err(|e| Error::NotJson(e.to_string()))?;
        Self::from_value(&value)
    }

    /// Settings from the bytes of a file: [`GuestSettings::parse`], and text that is not UTF-8
    /// is refused as not JSON.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| Error::NotJson(format!("not UTF-8 text: {e}")))?;
        Self::parse(text)
    }

    /// The settings as compact JSON text: always an object.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether these are the empty object.
    pub fn is_empty(&self) -> bool {
        &*self.0 == "{}"
    }
}

/// Read as any value, then checked as [`GuestSettings::from_value`] checks it, so that a
/// config file's `settings = { … }` is refused at its line when it is not a table.
impl<'de> serde::Deserialize<'de> for GuestSettings {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// Written as the JSON object they are (in a recording, say), not as a string of JSON.
impl serde::Serialize for GuestSettings {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value: Value = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        value.serialize(serializer)
    }
}

impl std::fmt::Display for GuestSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn bytes_that_are_not_utf8_are_refused_as_not_json() {
        let e = GuestSettings::parse_bytes(b"{\"a\": \"\xff\"}").unwrap_err();
        assert!(matches!(e, Error::NotJson(_)), "{e}");
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        assert_eq!(
            GuestSettings::parse_bytes(br#"{"b": 1, "a": 2}"#)
                .unwrap()
                .as_str(),
            r#"{"a":2,"b":1}"#
        );
    }

    #[test]
    fn settings_are_a_json_object_kept_compact() {
        let s = GuestSettings::parse("{ \"prefix\" : \"blue\", \"n\": [1, 2] }").unwrap();
        assert_eq!(
            s.as_str(),
            r#"{"n":[1,2],"prefix":"blue"}"#,
            "compact, keys sorted"
        );
        assert!(!s.is_empty());
        assert_eq!(GuestSettings::default().as_str(), "{}");
        assert!(GuestSettings::parse("{}").unwrap().is_empty());
    }

    #[test]
    fn anything_but_a_json_object_is_refused_saying_what_it_is() {
        assert_eq!(
            GuestSettings::parse("[1]"),
            Err(Error::NotAnObject { found: "an array" })
        );
        assert_eq!(
            GuestSettings::from_value(&json!("x")),
            Err(Error::NotAnObject { found: "a string" })
        );
        let e = GuestSettings::parse("{nope").unwrap_err();
        assert!(matches!(e, Error::NotJson(_)), "{e:?}");
        assert!(e.to_string().contains("write a JSON object"), "{e}");
    }

    #[test]
    fn oversized_settings_are_refused_before_they_are_parsed() {
        let big = format!("\"{}\"", "x".repeat(MAX_BYTES));
        assert_eq!(
            GuestSettings::parse(&big),
            Err(Error::TooLarge {
                bytes: MAX_BYTES + 2,
                max: MAX_BYTES
            }),
            "refused by size, not as a string"
        );
        let value = json!({ "data": "x".repeat(MAX_BYTES) });
        assert!(matches!(
            GuestSettings::from_value(&value),
            Err(Error::TooLarge { .. })
        ));
    }
}
