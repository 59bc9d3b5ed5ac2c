//! Modules in ConfigMaps: reading them out of `binaryData` (plain or gzipped, against gzip
//! bombs) and packing a module into a ConfigMap manifest for `reconciled pack`.

use base64::Engine as _;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use crate::controller::Settings;
use crate::guest::settings::GuestSettings;

/// The label that makes a ConfigMap a module source (value `true`).
pub const LABEL: &str = "reconciled.dev/reconciler";

/// The API server's limit on one ConfigMap: all data and binaryData together.
pub const CONFIGMAP_LIMIT: usize = 1 << 20;

/// Why a ConfigMap's modules cannot be read, or a module cannot be packed into one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object is not a ConfigMap as JSON.
    #[error("not a ConfigMap: {0}")]
    NotAConfigMap(#[source] serde_json::Error),
    /// A `binaryData` value that does not decode.
    #[error("binaryData key {key:?} is not base64: {source}")]
    NotBase64 {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: base64::DecodeError,
    },
    /// `reconciled pack` was given a key stem a ConfigMap cannot hold.
    #[error(
        "key {0:?} cannot be a ConfigMap key: use letters, digits, '-', '_' and '.' only (pass --key)"
    )]
    BadKey(String),
    /// Gzip failed while packing.
    #[error("cannot gzip the module: {0}")]
    Gzip(#[source] std::io::Error),
    /// The module does not fit even gzipped.
    #[error(
        "the module is {size} bytes ({gzipped} gzipped); a ConfigMap holds at most {CONFIGMAP_LIMIT} bytes, so it cannot be delivered this way. Shrink it (opt-level = \"s\", lto = true, strip = true, panic = \"abort\"; drop large dependencies) or load it from the host's config instead"
    )]
    TooLarge {
        /// The module's size.
        size: usize,
        /// Its size gzipped.
        gzipped: usize,
    },
}

/// A module key whose bytes cannot be loaded, with the digest of the bytes as delivered (so that
/// the same bad bytes are refused once).
#[derive(Debug, thiserror::Error)]
#[error("{problem}")]
pub(crate) struct Unpackable {
    /// The sha256 of the packed bytes.
    pub(crate) digest: String,
    problem: Problem,
}

/// What is wrong with a module key's bytes.
#[derive(Debug, thiserror::Error)]
enum Problem {
    #[error("key {0:?} holds gzip data; name the key {0}.gz so that it is unpacked")]
    GzipUnnamed(String),
    #[error(
        "key {0:?} unpacks to more than {1} bytes, the largest module tenants may load; ask the operator to raise tenants.max_module_bytes"
    )]
    TooLarge(String, usize),
    #[error(
        "key {key:?} is not valid gzip ({source}); create it with `gzip -9 -k module.wasm` and a key ending in .wasm.gz, or use a .wasm key for an uncompressed module"
    )]
    NotGzip {
        key: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) struct Modules {
    pub(crate) uid: String,
    pub(crate) modules: Vec<Packed>,
    /// Guest names (key stems) more than one key maps to, with those keys.
    pub(crate) duplicates: BTreeMap<String, Vec<String>>,
    /// `data` (text) keys that look like modules: a common mistake.
    pub(crate) text_wasm_keys: Vec<String>,
    /// `data` keys ending in `.wasm.ref`: modules named by OCI reference, in key order.
    pub(crate) refs: Vec<Named>,
}

/// A module named by reference: `data` key `<stem>.wasm.ref` holding `registry/repo:tag@sha256:…`.
pub(crate) struct Named {
    pub(crate) key: String,
    pub(crate) stem: String,
    pub(crate) reference: String,
    pub(crate) settings: Option<SettingsKey>,
}

pub(crate) struct Packed {
    pub(crate) key: String,
    pub(crate) stem: String,
    pub(crate) bytes: Vec<u8>,
    pub(crate) settings: Option<SettingsKey>,
}

pub(crate) use crate::guest::settings::FILE_SUFFIX as SETTINGS_SUFFIX;

/// A module's settings key: `data` key `<stem>.settings.json`, holding a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettingsKey {
    pub(crate) key: String,
    pub(crate) text: String,
}

impl SettingsKey {
    /// The settings, or why the key does not hold any, naming the key.
    pub(crate) fn parse(&self) -> Result<GuestSettings, String> {
        GuestSettings::parse(&self.text).map_err(|e| format!("key {:?}: {e}", self.key))
    }
}

/// `settings` with the guest settings of `key`, if the module has a settings key; the message
/// to refuse the module with, if that key holds no settings.
pub(crate) fn with_guest_settings(
    settings: Settings,
    key: Option<&SettingsKey>,
) -> Result<Settings, String> {
    let Some(key) = key else {
        return Ok(settings);
    };
    Ok(Settings {
        guest_settings: key.parse()?,
        ..settings
    })
}

/// The module keys of a ConfigMap's JSON, base64-decoded, in key order.
pub(crate) fn modules_of(json: &[u8]) -> Result<Modules, Error> {
    #[derive(serde::Deserialize)]
    struct Cm {
        metadata: Meta,
        #[serde(default, rename = "binaryData")]
        binary_data: HashMap<String, String>,
        #[serde(default)]
        data: HashMap<String, String>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default)]
        uid: String,
    }
    let cm: Cm = serde_json::from_slice(json).map_err(Error::NotAConfigMap)?;
    let mut keys: Vec<&String> = cm.binary_data.keys().collect();
    keys.sort();
    let mut by_stem: BTreeMap<String, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    let TextKeys { refs, settings } = text_keys(&cm.data);
    for key in keys {
        let Some(stem) = key
            .strip_suffix(".wasm.gz")
            .or_else(|| key.strip_suffix(".wasm"))
        else {
            continue;
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&cm.binary_data[key])
            .map_err(|source| Error::NotBase64 {
                key: key.clone(),
                source,
            })?;
        by_stem
            .entry(stem_of(stem))
            .or_default()
            .push((key.clone(), bytes));
    }
    let mut modules = Vec::new();
    let mut duplicates = BTreeMap::new();
    let mut named = Vec::new();
    for (stem, mut found) in refs {
        match (found.len(), by_stem.remove(&stem)) {
            (1, None) => {
                let (key, reference) = found.remove(0);
                named.push(Named {
                    key,
                    settings: settings.get(&stem).cloned(),
                    stem,
                    reference,
                });
            }
            (_, also) => {
                let mut keys: Vec<String> = found.into_iter().map(|(k, _)| k).collect();
                keys.extend(also.unwrap_or_default().into_iter().map(|(k, _)| k));
                keys.sort();
                duplicates.insert(stem, keys);
            }
        }
    }
    for (stem, mut found) in by_stem {
        if found.len() == 1 {
            let (key, bytes) = found.remove(0);
            let settings = settings.get(&stem).cloned();
            modules.push(Packed {
                key,
                stem,
                bytes,
                settings,
            });
        } else {
            duplicates.insert(stem, found.into_iter().map(|(k, _)| k).collect());
        }
    }
    let mut text_wasm_keys: Vec<String> = cm
        .data
        .keys()
        .filter(|k| k.ends_with(".wasm") || k.ends_with(".wasm.gz"))
        .cloned()
        .collect();
    text_wasm_keys.sort();
    Ok(Modules {
        uid: cm.metadata.uid,
        modules,
        duplicates,
        text_wasm_keys,
        refs: named,
    })
}

/// The guest-name part of a key's stem: `My_Rec` and `my-rec` name one guest.
fn stem_of(stem: &str) -> String {
    stem.replace('_', "-").to_lowercase()
}

/// The `data` keys a ConfigMap's modules use, by normalised stem.
#[derive(Debug, Default)]
struct TextKeys {
    /// `<stem>.wasm.ref` keys with their references: a stem may have several, which are
    /// refused as duplicates.
    refs: BTreeMap<String, Vec<(String, String)>>,
    /// `<stem>.settings.json` keys.
    settings: BTreeMap<String, SettingsKey>,
}

/// The module references and settings among `data`'s keys.
fn text_keys(data: &HashMap<String, String>) -> TextKeys {
    let mut found = TextKeys::default();
    let mut keys: Vec<&String> = data.keys().collect();
    keys.sort();
    for key in keys {
        if let Some(stem) = key.strip_suffix(".wasm.ref") {
            found
                .refs
                .entry(stem_of(stem))
                .or_default()
                .push((key.clone(), data[key].trim().to_string()));
        } else if let Some(stem) = key.strip_suffix(SETTINGS_SUFFIX) {
            // Two keys for one stem (`a_b` and `a-b`): the first in key order; the module
            // keys of such a pair are refused as duplicates anyway.
            found
                .settings
                .entry(stem_of(stem))
                .or_insert_with(|| SettingsKey {
                    key: key.clone(),
                    text: data[key].clone(),
                });
        }
    }
    found
}

/// The module bytes of key `key`: as is, or gunzipped for `.wasm.gz`, refusing more than `max`
/// bytes unpacked.
pub(crate) fn unpack(key: &str, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>, Unpackable> {
    let refuse = |bytes: &[u8], problem| Unpackable {
        digest: crate::guest::digest_of(bytes),
        problem,
    };
    let key = key.to_string();
    if !key.ends_with(".gz") {
        if bytes.starts_with(&[0x1f, 0x8b]) {
            return Err(refuse(&bytes, Problem::GzipUnnamed(key)));
        }
        return Ok(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() * 3);
    let mut reader = flate2::read::GzDecoder::new(&bytes[..]).take(max as u64 + 1);
    match reader.read_to_end(&mut out) {
        Ok(n) if n > max => Err(refuse(&bytes, Problem::TooLarge(key, max))),
        Ok(_) => Ok(out),
        Err(source) => Err(refuse(&bytes, Problem::NotGzip { key, source })),
    }
}

/// What `reconciled pack` makes of a module: a ConfigMap manifest, or why it cannot fit.
///
/// Modules that fit uncompressed go as `<stem>.wasm`; others are gzipped into `<stem>.wasm.gz`.
///
/// Where it may surprise: apply the manifest with `kubectl apply --server-side` or `kubectl
/// create`. A plain client-side `kubectl apply` copies the whole object into the
/// last-applied-configuration annotation, which is capped at 256 KiB, so it fails for any
/// module over about 190 KB.
pub fn pack(
    namespace: &str,
    name: &str,
    stem: &str,
    module: &[u8],
) -> Result<serde_json::Value, Error> {
    // Headroom for the object's metadata, which counts against the same limit in etcd.
    const BUDGET: usize = CONFIGMAP_LIMIT - 4096;
    if stem.is_empty()
        || !stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Error::BadKey(stem.to_string()));
    }
    let (key, bytes) = if module.len() <= BUDGET {
        (format!("{stem}.wasm"), module.to_vec())
    } else {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, module).map_err(Error::Gzip)?;
        let packed = gz.finish().map_err(Error::Gzip)?;
        if packed.len() > BUDGET {
            return Err(Error::TooLarge {
                size: module.len(),
                gzipped: packed.len(),
            });
        }
        (format!("{stem}.wasm.gz"), packed)
    };
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { LABEL: "true" },
        },
        "binaryData": { key: base64::engine::general_purpose::STANDARD.encode(bytes) },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmap(data: serde_json::Value, binary: &[&str]) -> Modules {
        let binary: serde_json::Map<String, serde_json::Value> = binary
            .iter()
            .map(|k| {
                let b64 = base64::engine::general_purpose::STANDARD.encode(b"module");
                (k.to_string(), b64.into())
            })
            .collect();
        let json = serde_json::json!({
            "metadata": { "uid": "u-1" },
            "data": data,
            "binaryData": binary,
        });
        modules_of(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_settings_key_goes_with_the_module_of_its_stem_however_the_stem_is_spelt() {
        let m = configmap(
            serde_json::json!({
                "My_Rec.settings.json": "{\"v\": 1}",
                "other.wasm.ref": "r.example/a:1",
                "other.settings.json": "[1]",
            }),
            &["my-rec.wasm", "lonely.wasm"],
        );
        let by_stem: BTreeMap<&str, Option<&SettingsKey>> = m
            .modules
            .iter()
            .map(|p| (p.stem.as_str(), p.settings.as_ref()))
            .collect();
        let mine = by_stem["my-rec"].expect("My_Rec's settings are my-rec's");
        assert_eq!(mine.key, "My_Rec.settings.json");
        assert_eq!(mine.parse().unwrap().as_str(), r#"{"v":1}"#);
        assert!(by_stem["lonely"].is_none(), "no settings key, no settings");
        let named = &m.refs[0];
        let e = named.settings.as_ref().unwrap().parse().unwrap_err();
        assert!(
            e.starts_with("key \"other.settings.json\": ") && e.contains("not a JSON object"),
            "a bad key is named: {e}"
        );
    }
}
