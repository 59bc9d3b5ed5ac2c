//! Why a pull or push failed, in words that say which reference, what the registry did, and
//! what to do; and how the registry client's errors become them.

use oci_client::errors::{OciDistributionError, OciErrorCode};

use super::credentials::{self, Login};
use super::media::{CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE};
use super::reference::{self, ModuleRef};

/// Why a module could not be pulled or pushed. Each says which reference, what the registry
/// did, and what to do; the guest's serving version, if any, stays.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference itself is wrong.
    #[error(transparent)]
    Reference(#[from] reference::Error),
    /// Credentials could not be read.
    #[error(transparent)]
    Credentials(#[from] credentials::Error),
    /// The registry could not be reached, or did not answer in time.
    #[error(
        "registry {registry} is unreachable for {reference}: {reason}; check the address and the network path from the host (and, for a tenant's reference, NetworkPolicies)"
    )]
    Unreachable {
        /// The reference.
        reference: ModuleRef,
        /// Its registry.
        registry: String,
        /// What failed.
        reason: String,
    },
    /// The registry's TLS certificate is not one the host trusts.
    #[error(
        "registry {registry}'s TLS certificate is not accepted for {reference}: {reason}; if a private CA signed it, add that CA to [registry] ca_file (or `reconciled push --ca-file`)"
    )]
    Untrusted {
        /// The reference.
        reference: ModuleRef,
        /// Its registry.
        registry: String,
        /// What TLS said.
        reason: String,
    },
    /// The registry refused the credentials (or their absence).
    #[error(
        "registry {registry} refused {who} for {reference}: check the login for {registry} (the dockerconfigjson pull secret; one without an entry for {registry} means anonymous access)"
    )]
    Unauthorized {
        /// The reference.
        reference: ModuleRef,
        /// Its registry.
        registry: String,
        /// `user "x"` or `anonymous access`.
        who: String,
    },
    /// No such repository, tag or digest.
    #[error(
        "{reference} does not exist: the registry has no such {what}; check the repository, tag and digest (`oras manifest fetch` shows what is there)"
    )]
    NotFound {
        /// The reference.
        reference: ModuleRef,
        /// Manifest, blob or repository.
        what: &'static str,
    },
    /// Not a Wasm artifact.
    #[error(
        "{reference} is not a Wasm OCI artifact: {found}; publish it with `reconciled push` (config {CONFIG_MEDIA_TYPE}, one {LAYER_MEDIA_TYPE} layer)"
    )]
    MediaType {
        /// The reference.
        reference: ModuleRef,
        /// What it is instead.
        found: String,
    },
    /// Content whose digest is not the one it was named by.
    #[error(
        "{reference}: {what} has digest {actual}, not {expected}; the registry served other content than was named, so it was not used"
    )]
    DigestMismatch {
        /// The reference.
        reference: ModuleRef,
        /// The manifest or the layer.
        what: &'static str,
        /// What it should be.
        expected: String,
        /// What it is.
        actual: String,
    },
    /// The registry served content whose digest is not the one it was asked for.
    #[error(
        "{reference}: the registry served content that does not match its digest ({reason}); it was not used"
    )]
    Corrupt {
        /// The reference.
        reference: ModuleRef,
        /// What the check said.
        reason: String,
    },
    /// Larger than allowed.
    #[error(
        "{reference}: the module is {size} bytes, over the {max}-byte limit; shrink it or raise max_module_bytes"
    )]
    TooLarge {
        /// The reference.
        reference: ModuleRef,
        /// Its size (declared or read so far).
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Its signature is missing or does not verify.
    #[error("{reference}: {reason}")]
    Signature {
        /// The reference.
        reference: ModuleRef,
        /// Why.
        reason: String,
    },
    /// Anything else the registry said.
    #[error("registry {registry} failed for {reference}: {reason}")]
    Registry {
        /// The reference.
        reference: ModuleRef,
        /// Its registry.
        registry: String,
        /// What it said.
        reason: String,
    },
    /// The host's registry settings are unusable.
    #[error("[registry] {0}")]
    Settings(String),
    /// The host's `verify_key` is unusable.
    #[error("[registry] {0}")]
    VerifyKey(#[from] super::signature::KeyError),
}

/// The registry's answer, as this module's error.
pub(super) fn classify(
    e: OciDistributionError,
    reference: &ModuleRef,
    login: Option<&Login>,
) -> Error {
    let registry = reference.registry().to_string();
    let who = match login {
        Some(l) => format!("user {:?}", l.username),
        None => "anonymous access".to_string(),
    };
    let not_found = |what| Error::NotFound {
        reference: reference.clone(),
        what,
    };
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Error::Unauthorized {
            reference: reference.clone(),
            registry,
            who,
        },
        OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => Error::Unauthorized {
            reference: reference.clone(),
            registry,
            who,
        },
        OciDistributionError::ServerError { code: 404, .. }
        | OciDistributionError::ImageManifestNotFoundError(_) => not_found("manifest"),
        OciDistributionError::RegistryError { envelope, .. } => {
            match envelope.errors.first().map(|e| &e.code) {
                Some(OciErrorCode::ManifestUnknown) => not_found("manifest"),
                Some(OciErrorCode::BlobUnknown) => not_found("blob"),
                Some(OciErrorCode::NameUnknown) => not_found("repository"),
                Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => Error::Unauthorized {
                    reference: reference.clone(),
                    registry,
                    who,
                },
                _ => Error::Registry {
                    reference: reference.clone(),
                    registry,
                    reason: bounded(envelope.to_string()),
                },
            }
        }
        OciDistributionError::DigestError(d) => Error::Corrupt {
            reference: reference.clone(),
            reason: bounded(d.to_string()),
        },
        OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout() => {
            let reason = chain(&r);
            // rustls reports an untrusted certificate as a failed connect.
            if reason.contains("certificate") {
                Error::Untrusted {
                    reference: reference.clone(),
                    registry,
                    reason,
                }
            } else {
                Error::Unreachable {
                    reference: reference.clone(),
                    registry,
                    reason,
                }
            }
        }
        other => Error::Registry {
            reference: reference.clone(),
            registry,
            reason: chain(&other),
        },
    }
}

/// An error and its causes on one line: reqwest's own message ("error sending request") hides
/// the interesting part (connection refused, certificate unknown) in its sources.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    bounded(text)
}

/// At most 300 characters of what a registry said: an error body is the registry's to fill,
/// and it travels into logs, `/status` and Events.
pub(super) fn bounded(text: String) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
