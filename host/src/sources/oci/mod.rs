//! Guests delivered as OCI artifacts: `oci://registry/repository:tag@sha256:…`, in the host
//! config, on the command line, or in a tenant's ConfigMap (a `data` key `rec.wasm.ref`).
//!
//! The layout is the CNCF TAG Runtime's Wasm OCI artifact, which wasm-pkg-tools and
//! Kubewarden's newer tooling publish: an OCI image manifest whose config is
//! [`CONFIG_MEDIA_TYPE`] and whose single layer is the component, [`LAYER_MEDIA_TYPE`].
//! `reconciled push` writes exactly that, its layer named [`LAYER_TITLE`] (`module.wasm`), and
//! `oras pull` (which writes that file) or `crane` read it back.
//!
//! Every pull fetches the manifest from the registry with the requester's own credentials,
//! checks it against the pinned digest, its media types and the size limit, and only then
//! takes the layer: from the cache when this registry's repository gave that very layer before,
//! or else from the registry, checked against its digest as it streams. A module named by a tag
//! is polled (see [`watch`]) and reloads when the tag moves.
//!
//! Where it may surprise:
//! - The manifest is fetched on every pull and poll, even when the module is cached, and the
//!   cache is keyed by registry, repository and digest: a cache hit never stands in for the
//!   registry's word that a requester may read a repository, so one tenant cannot load
//!   another's private module by naming its digest from a repository of its own.
//! - Pulls are bounded in time ([`Settings::pull_timeout`]) and the layer in size; a registry
//!   that never answers delays only the guest that names it.
//! - With [`Settings::verify_key`], a module without a valid cosign signature is rejected
//!   (see [`signature`]), and tenants' ConfigMaps may deliver modules only by reference: an
//!   inline module cannot carry a signature.

pub mod credentials;
mod error;
mod media;
pub mod reference;
pub mod referrers;
pub mod signature;
pub mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};

use oci_client::secrets::RegistryAuth;
use sha2::Digest as _;

use credentials::Login;
pub use error::Error;
use error::{chain, classify};
pub use media::{CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, LAYER_TITLE};
use media::{LEGACY_CONFIG_MEDIA_TYPE, LEGACY_LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE};
pub use reference::ModuleRef;

/// `[registry]` in the host config: how the host talks to registries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `namespace/name` of a `kubernetes.io/dockerconfigjson` Secret with the logins for the
    /// operator's own guests (`[[guest]] module = "oci://…"` and `--guest oci://…`) [none:
    /// anonymous]. Tenants name their own, in their namespace.
    pub pull_secret: Option<String>,
    /// PEM file of CA certificates trusted beside the system's, for registries with a private
    /// CA. Read at start: a file without a certificate stops the host.
    pub ca_file: Option<PathBuf>,
    /// Registries (`host:port`) spoken to over plain HTTP. Only for a registry on loopback or a
    /// trusted network: nothing protects the module on the way.
    pub insecure: Vec<String>,
    /// How often a module named by a tag (not a digest) is checked for a move, in
    /// milliseconds [60 000]. Each check is one manifest request.
    pub poll_interval_ms: u64,
    /// Longest one pull may take, in milliseconds [120 000].
    pub pull_timeout_ms: u64,
    /// PEM public key (ECDSA P-256, as `cosign generate-key-pair` writes) every pulled module
    /// must carry a cosign signature of [none: no check]. Applies to tenants' modules too, and
    /// then refuses their inline (`.wasm`, `.wasm.gz`) modules, which cannot be signed. The
    /// operator's own `[[guest]]` files are taken as they are.
    pub verify_key: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pull_secret: None,
            ca_file: None,
            insecure: Vec::new(),
            poll_interval_ms: 60_000,
            pull_timeout_ms: 120_000,
            verify_key: None,
        }
    }
}

impl Settings {
    /// [`Settings::poll_interval_ms`] as a duration.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms.max(100))
    }

    /// [`Settings::pull_timeout_ms`] as a duration.
    pub fn pull_timeout(&self) -> Duration {
        Duration::from_millis(self.pull_timeout_ms.max(100))
    }
}

/// A pulled module.
#[derive(Clone)]
pub struct Pulled {
    /// The manifest's digest (`sha256:…`): what a tag resolved to.
    pub manifest: String,
    /// The module's sha256, hex, as the supervisor names versions.
    pub digest: String,
    /// The component.
    pub bytes: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Pulled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pulled({}, {} bytes)", self.manifest, self.bytes.len())
    }
}

/// What a pull found.
#[derive(Debug)]
pub enum Fetched {
    /// The reference still resolves to the manifest the caller already has.
    Unchanged,
    /// A module.
    New(Pulled),
}

/// HTTP clients kept at most, one per login.
const MAX_CLIENTS: usize = 64;

/// The client `settings` ask for. Unlike `oci_client::Client::new`, which falls back to a
/// default client (no CA, no timeouts) on a bad setting, this says what is wrong.
fn build_client(settings: &Settings, roots: &[Certificate]) -> Result<oci_client::Client, Error> {
    oci_client::Client::try_from(ClientConfig {
        protocol: if settings.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(settings.insecure.clone())
        },
        extra_root_certificates: roots.to_vec(),
        platform_resolver: None,
        // One PUT per blob: every registry takes it, while chunked uploads trip over
        // registries that answer a PATCH without a Location (crane's).
        use_monolithic_push: true,
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(30)),
        user_agent: concat!("reconciled/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    })
    .map_err(|e| Error::Settings(format!("cannot build the registry client: {}", chain(&e))))
}

/// Modules kept by their layer digest, at most this many bytes in all.
const CACHE_BYTES: usize = 256 << 20;

/// The host's registry client: one HTTP client per set of credentials (a client remembers
/// the login it first used per registry, so tenants never share one), and the layer cache.
pub struct Registry {
    settings: Settings,
    roots: Vec<Certificate>,
    key: Option<p256::ecdsa::VerifyingKey>,
    clients: Mutex<HashMap<String, oci_client::Client>>,
    cache: Mutex<LayerCache>,
}

/// Modules by `registry/repository@digest`, with the order they were added in, oldest first.
#[derive(Default)]
struct LayerCache {
    by_digest: HashMap<String, Arc<Vec<u8>>>,
    order: std::collections::VecDeque<String>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for Registry {
    /// Default settings: system roots, anonymous, no signature check.
    fn default() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Registry {
            settings: Settings::default(),
            roots: Vec::new(),
            key: None,
            clients: Mutex::new(HashMap::new()),
            cache: Mutex::new(LayerCache::default()),
        }
    }
}

impl Registry {
    /// A client with `settings`; reads its CA file and verification key now, so that a bad
    /// one stops the host at start rather than failing every pull.
    pub fn new(settings: Settings) -> Result<Self, Error> {
        // reqwest's rustls takes the process-wide provider; kube links ring, so ring it is.
        // A second install (another Registry, or tests) is refused harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let roots = match &settings.ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::Settings(format!("cannot read ca_file {}: {e}", path.display()))
                })?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(Error::Settings(format!(
                        "ca_file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----); convert a DER file with `openssl x509 -inform der -in ca.der -out ca.pem`",
                        path.display()
                    )));
                }
                vec![Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem,
                }]
            }
            None => Vec::new(),
        };
        let key = match &settings.verify_key {
            Some(path) => Some(signature::read_public_key(path)?),
            None => None,
        };
        // A malformed certificate shows here, once, rather than in every pull.
        build_client(&settings, &roots)?;
        Ok(Registry {
            settings,
            roots,
            key,
            clients: Mutex::new(HashMap::new()),
            cache: Mutex::new(LayerCache::default()),
        })
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether every module must carry a signature ([`Settings::verify_key`]).
    pub fn requires_signatures(&self) -> bool {
        self.key.is_some()
    }

    /// The client for `login` (`None`: anonymous).
    pub(crate) fn client(
        &self,
        login: Option<&Login>,
    ) -> Result<(oci_client::Client, RegistryAuth), Error> {
        let (key, auth) = match login {
            Some(l) => {
                let mut h = sha2::Sha256::new();
                h.update(l.username.as_bytes());
                h.update([0]);
                h.update(l.password.as_bytes());
                (
                    crate::guest::digest_of(&h.finalize()),
                    RegistryAuth::Basic(l.username.clone(), l.password.clone()),
                )
            }
            None => (String::new(), RegistryAuth::Anonymous),
        };
        let mut clients = self.clients.lock().unwrap();
        if let Some(c) = clients.get(&key) {
            return Ok((c.clone(), auth));
        }
        // Tenants choose their logins: rotating one in a loop must not grow the host. Dropping
        // every client costs one token exchange per login afterwards.
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        let client = build_client(&self.settings, &self.roots)?;
        clients.insert(key, client.clone());
        Ok((client, auth))
    }

    /// The client for `login`, authenticated to `reference`'s repository for `operation` (a
    /// push needs the token up front; a pull gets one on its first request anyway).
    pub(crate) async fn client_for(
        &self,
        reference: &ModuleRef,
        login: Option<&Login>,
        operation: oci_client::RegistryOperation,
    ) -> Result<(oci_client::Client, RegistryAuth), Error> {
        let (client, auth) = self.client(login)?;
        client
            .auth(reference.inner(), &auth, operation)
            .await
            .map_err(|e| classify(e, reference, login))?;
        Ok((client, auth))
    }

    /// Pulls `reference` as `login`, unless it still resolves to manifest `known`; at most
    /// `max_bytes` of module. Bounded by [`Settings::pull_timeout`].
    pub async fn pull(
        &self,
        reference: &ModuleRef,
        login: Option<&Login>,
        known: Option<&str>,
        max_bytes: usize,
    ) -> Result<Fetched, Error> {
        let timeout = self.settings.pull_timeout();
        match tokio::time::timeout(timeout, self.pull_now(reference, login, known, max_bytes)).await
        {
            Ok(r) => r,
            Err(_) => Err(Error::Unreachable {
                reference: reference.clone(),
                registry: reference.registry().to_string(),
                reason: format!("the pull took longer than {timeout:?} (pull_timeout_ms)"),
            }),
        }
    }

    async fn pull_now(
        &self,
        reference: &ModuleRef,
        login: Option<&Login>,
        known: Option<&str>,
        max_bytes: usize,
    ) -> Result<Fetched, Error> {
        let (client, auth) = self.client(login)?;
        let (body, manifest) =
            manifest_of(&client, &auth, reference, login, &[MANIFEST_MEDIA_TYPE]).await?;
        if known == Some(manifest.as_str()) {
            return Ok(Fetched::Unchanged);
        }
        let layer = wasm_layer(reference, &body)?;
        if layer.size < 0 || layer.size as u64 > max_bytes as u64 {
            return Err(Error::TooLarge {
                reference: reference.clone(),
                size: layer.size.max(0) as u64,
                max: max_bytes as u64,
            });
        }
        if let Some(key) = &self.key {
            signature::verify(&client, &auth, reference, &manifest, key)
                .await
                .map_err(|reason| match reason {
                    signature::Failure::Registry(e) => classify(e, reference, login),
                    signature::Failure::Invalid(why) => Error::Signature {
                        reference: reference.clone(),
                        reason: format!(
                            "the module is not signed by the configured verify_key: {why}; sign it with `cosign sign --key cosign.key --tlog-upload=false {}` or `reconciled push --sign-key`",
                            reference
                                .at(&manifest)
                                .to_string()
                                .trim_start_matches("oci://")
                        ),
                    },
                })?;
        }
        let hex = layer
            .digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64)
            .ok_or_else(|| Error::MediaType {
                reference: reference.clone(),
                found: format!(
                    "its layer is named by {}, not a sha256 digest",
                    layer.digest
                ),
            })?
            .to_string();
        // The repository is part of the key: a registry may accept a manifest naming a layer
        // the repository does not hold, so a digest alone proves nothing about who may read it.
        let key = format!("{}/{}@{hex}", reference.registry(), reference.repository());
        let cached = self.cache.lock().unwrap().by_digest.get(&key).cloned();
        let bytes = match cached {
            Some(b) => b,
            None => {
                let b = self
                    .pull_layer(&client, reference, login, &layer, &hex, max_bytes)
                    .await?;
                let b = Arc::new(b);
                self.remember(&key, b.clone());
                b
            }
        };
        Ok(Fetched::New(Pulled {
            manifest,
            digest: hex,
            bytes,
        }))
    }

    async fn pull_layer(
        &self,
        client: &oci_client::Client,
        reference: &ModuleRef,
        login: Option<&Login>,
        layer: &oci_client::manifest::OciDescriptor,
        hex: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>, Error> {
        let mut stream = client
            .pull_blob_stream(reference.inner(), layer)
            .await
            .map_err(|e| classify(e, reference, login))?;
        let mut bytes = Vec::with_capacity(layer.size.clamp(0, max_bytes as i64) as usize);
        let mut hasher = sha2::Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| classify(e.into(), reference, login))?;
            if bytes.len() + chunk.len() > max_bytes {
                return Err(Error::TooLarge {
                    reference: reference.clone(),
                    size: (bytes.len() + chunk.len()) as u64,
                    max: max_bytes as u64,
                });
            }
            hasher.update(&chunk);
            bytes.extend_from_slice(&chunk);
        }
        let got: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if got != hex {
            return Err(Error::DigestMismatch {
                reference: reference.clone(),
                what: "the module layer",
                expected: format!("sha256:{hex}"),
                actual: format!("sha256:{got}"),
            });
        }
        Ok(bytes)
    }

    /// The module `registry/repository@sha256:<hex>` this process pulled before, if the layer
    /// cache still holds it. Nothing is asked of the registry.
    ///
    /// Where it may surprise: a pull checks the requester's right to the repository at every
    /// call, and this does not; call it only for a module the same requester was already shown
    /// to read (a revision the host recorded for the same Reconciler).
    pub fn cached(&self, registry: &str, repository: &str, hex: &str) -> Option<Arc<Vec<u8>>> {
        let key = format!("{registry}/{repository}@{hex}");
        self.cache.lock().unwrap().by_digest.get(&key).cloned()
    }

    fn remember(&self, hex: &str, bytes: Arc<Vec<u8>>) {
        let mut cache = self.cache.lock().unwrap();
        let LayerCache { by_digest, order } = &mut *cache;
        if by_digest.insert(hex.to_string(), bytes).is_none() {
            order.push_back(hex.to_string());
        }
        let mut total: usize = by_digest.values().map(|b| b.len()).sum();
        // The newest stays even alone over the budget: it is about to be loaded.
        while total > CACHE_BYTES && order.len() > 1 {
            if let Some(b) = order
                .pop_front()
                .and_then(|oldest| by_digest.remove(&oldest))
            {
                total -= b.len();
            }
        }
    }

    /// Publishes `module` at `reference` (a tag) as a Wasm OCI artifact, as `login`; with
    /// `sign`, also a cosign signature. Returns the manifest's digest.
    pub async fn push(
        &self,
        reference: &ModuleRef,
        login: Option<&Login>,
        module: Vec<u8>,
        sign: Option<&p256::ecdsa::SigningKey>,
    ) -> Result<String, Error> {
        let (client, auth) = self
            .client_for(reference, login, oci_client::RegistryOperation::Push)
            .await?;
        let fail = |e| classify(e, reference, login);
        let layer_digest = format!("sha256:{}", crate::guest::digest_of(&module));
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
        }))
        .expect("a JSON literal serializes");
        let config_digest = format!("sha256:{}", crate::guest::digest_of(&config));
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": CONFIG_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config.len()},
            // Named, as oras and wasm-pkg-tools name a layer: `oras pull` writes only named
            // layers. The name is fixed, so that a module has one manifest wherever it is pushed.
            "layers": [{
                "mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": module.len(),
                "annotations": {"org.opencontainers.image.title": LAYER_TITLE},
            }],
        }))
        .expect("a JSON literal serializes");
        client
            .push_blob(reference.inner(), module, &layer_digest)
            .await
            .map_err(fail)?;
        client
            .push_blob(reference.inner(), config, &config_digest)
            .await
            .map_err(fail)?;
        let digest = format!("sha256:{}", crate::guest::digest_of(&manifest));
        let content_type = http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE);
        // By digest, then the signature, and only then the tag: a host polling the tag never
        // sees a module whose signature is not there yet.
        client
            .push_manifest_raw(
                reference.at(&digest).inner(),
                manifest.clone(),
                content_type.clone(),
            )
            .await
            .map_err(fail)?;
        if let Some(key) = sign {
            signature::sign(&client, &auth, reference, &digest, key)
                .await
                .map_err(fail)?;
        }
        client
            .push_manifest_raw(reference.inner(), manifest, content_type)
            .await
            .map_err(fail)?;
        Ok(digest)
    }
}

/// `reference`'s manifest, of one of `media_types`, and its digest, checked against the digest
/// `reference` is pinned to, if any.
async fn manifest_of(
    client: &oci_client::Client,
    auth: &RegistryAuth,
    reference: &ModuleRef,
    login: Option<&Login>,
    media_types: &[&str],
) -> Result<(bytes::Bytes, String), Error> {
    let (body, _) = client
        .pull_manifest_raw(reference.inner(), auth, media_types)
        .await
        .map_err(|e| classify(e, reference, login))?;
    let digest = format!("sha256:{}", crate::guest::digest_of(&body));
    if let Some(pinned) = reference.pinned()
        && pinned != digest
    {
        return Err(Error::DigestMismatch {
            reference: reference.clone(),
            what: "the manifest",
            expected: pinned.to_string(),
            actual: digest,
        });
    }
    Ok((body, digest))
}

/// The manifest's one component layer, once its media types say it is a Wasm artifact.
fn wasm_layer(
    reference: &ModuleRef,
    body: &[u8],
) -> Result<oci_client::manifest::OciDescriptor, Error> {
    let bad = |found: String| Error::MediaType {
        reference: reference.clone(),
        found,
    };
    let m: oci_client::manifest::OciImageManifest = serde_json::from_slice(body)
        .map_err(|e| bad(format!("its manifest is not an OCI image manifest ({e})")))?;
    let config = m.config.media_type.as_str();
    if config != CONFIG_MEDIA_TYPE && config != LEGACY_CONFIG_MEDIA_TYPE {
        return Err(bad(format!("its config is {config}")));
    }
    match m.layers.as_slice() {
        [one]
            if one.media_type == LAYER_MEDIA_TYPE || one.media_type == LEGACY_LAYER_MEDIA_TYPE =>
        {
            Ok(one.clone())
        }
        [one] => Err(bad(format!("its layer is {}", one.media_type))),
        many => Err(bad(format!("it has {} layers, not one", many.len()))),
    }
}
