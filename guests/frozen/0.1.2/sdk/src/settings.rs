//! The settings whoever deployed this module gave it: a `[[guest]]`'s `settings` in the host
//! config, or a `<stem>.settings.json` key beside a ConfigMap module. One module can so run
//! twice, differently, without a rebuild.
//!
//! Where it may surprise:
//! - They are always a JSON object, `{}` when none were given: decode them into a type whose
//!   fields have serde defaults, and a deployment without settings still works.
//! - They are fixed for the life of a version: new settings reload the guest.
//! - They cannot be read in `describe` (no host call can): what a guest watches does not depend
//!   on them.

use serde::de::DeserializeOwned;

use crate::bindings::reconciled::runtime::settings as raw;
use crate::{Error, Result};

/// The settings, decoded into `T`.
///
/// An object that does not fit `T` is [`Error::Invalid`], naming `T` and what serde said:
/// return it from `reconcile` and the reconcile is retried, failing the same way until the
/// settings are fixed (which reloads the guest).
///
/// ```ignore
/// #[derive(serde::Deserialize, Default)]
/// #[serde(default)]
/// struct Config { prefix: String, replicas: u32 }
///
/// let config: Config = reconciled_guest::settings()?;
/// ```
pub fn settings<T: DeserializeOwned>() -> Result<T> {
    decode(&raw::get())
}

/// The settings as JSON text: always an object.
pub fn settings_json() -> String {
    raw::get()
}

fn decode<T: DeserializeOwned>(json: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| {
        Error::Invalid(format!(
            "the settings do not fit {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Default, serde::Deserialize)]
    #[serde(default)]
    struct Config {
        prefix: String,
        replicas: u32,
    }

    #[test]
    fn settings_decode_into_a_type_with_defaults_for_what_they_lack() {
        let c: Config = decode(r#"{"prefix":"blue"}"#).unwrap();
        assert_eq!(
            c,
            Config {
                prefix: "blue".into(),
                replicas: 0
            }
        );
        assert_eq!(decode::<Config>("{}").unwrap(), Config::default());
    }

    #[test]
    fn settings_that_do_not_fit_are_invalid_naming_the_type() {
        let Err(Error::Invalid(message)) = decode::<Config>(r#"{"replicas":"two"}"#) else {
            panic!("a string is not a u32");
        };
        assert!(
            message.contains("Config") && message.contains("expected u32"),
            "{message}"
        );
    }
}
