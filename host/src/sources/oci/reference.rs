//! What names a guest in a registry: `oci://registry/repository:tag`, pinned or not by
//! `@sha256:<hex>`.

use std::fmt;
use std::str::FromStr;

/// Why a text names no module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not a reference at all.
    #[error(
        "{text:?} is not an OCI reference ({reason}); write registry.example/team/rec:1.0, optionally pinned with @sha256:<64 hex digits>"
    )]
    Malformed {
        /// What was given.
        text: String,
        /// What the parser said.
        reason: String,
    },
    /// Pinned by a digest algorithm other than sha256, which the host cannot check.
    #[error(
        "{text:?} is pinned by {algorithm}, but modules are checked by sha256: pin it @sha256:<digest>"
    )]
    Algorithm {
        /// What was given.
        text: String,
        /// The algorithm named.
        algorithm: String,
    },
    /// No registry host, which would silently mean Docker Hub.
    #[error(
        "{text:?} names no registry; write the registry's host first (registry.example/{text}), so that a module never comes from Docker Hub by accident"
    )]
    NoRegistry {
        /// What was given.
        text: String,
    },
}

/// A module's place in a registry. The `oci://` prefix is optional when parsing and always
/// printed.
///
/// Where it may surprise: a reference with both a tag and a digest is pulled by the digest
/// alone, as containerd and crane do; the tag is then only a label for people, and a moved tag
/// changes nothing. A reference without a registry host is refused rather than read as Docker
/// Hub.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ModuleRef {
    // Shared: a reference travels inside every error about it.
    inner: std::sync::Arc<oci_client::Reference>,
}

impl ModuleRef {
    /// The digest it is pinned to (`sha256:<hex>`), if any: then it can never move.
    pub fn pinned(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// The registry's host (and port), as credentials and the allowed-registry list name it.
    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    /// The repository within the registry.
    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    /// The same repository at `digest`: what a tag resolved to, pulled exactly.
    pub fn at(&self, digest: &str) -> ModuleRef {
        ModuleRef {
            inner: oci_client::Reference::with_digest(
                self.inner.registry().to_string(),
                self.inner.repository().to_string(),
                digest.to_string(),
            )
            .into(),
        }
    }

    /// The same repository at `tag`.
    pub fn tagged(&self, tag: &str) -> ModuleRef {
        ModuleRef {
            inner: oci_client::Reference::with_tag(
                self.inner.registry().to_string(),
                self.inner.repository().to_string(),
                tag.to_string(),
            )
            .into(),
        }
    }

    pub(crate) fn inner(&self) -> &oci_client::Reference {
        &self.inner
    }
}

impl FromStr for ModuleRef {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let bare = text.trim();
        let bare = bare.strip_prefix("oci://").unwrap_or(bare);
        let malformed = |reason: String| Error::Malformed {
            text: text.to_string(),
            reason,
        };
        if bare.is_empty() || bare.contains("://") || bare.chars().any(char::is_whitespace) {
            return Err(malformed(
                "it holds a scheme other than oci:// or blanks".into(),
            ));
        }
        // The parser fills in docker.io for a first part without '.', ':' or "localhost".
        let first = bare.split('/').next().unwrap_or("");
        if !bare.contains('/')
            || !(first.contains('.') || first.contains(':') || first == "localhost")
        {
            return Err(Error::NoRegistry {
                text: bare.to_string(),
            });
        }
        let inner = oci_client::Reference::from_str(bare).map_err(|e| malformed(e.to_string()))?;
        if let Some(d) = inner.digest() {
            let (algorithm, hex) = d.split_once(':').unwrap_or((d, ""));
            if algorithm != "sha256" {
                return Err(Error::Algorithm {
                    text: text.to_string(),
                    algorithm: algorithm.to_string(),
                });
            }
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(malformed(format!("{d:?} is not a sha256 digest")));
            }
        }
        Ok(ModuleRef {
            inner: inner.into(),
        })
    }
}

impl fmt::Display for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}", self.inner.whole())
    }
}

impl fmt::Debug for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_tags_digests_and_the_optional_scheme() {
        let r: ModuleRef = "oci://127.0.0.1:5000/team-a/rec:1.0".parse().unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.pinned()),
            ("127.0.0.1:5000", "team-a/rec", None)
        );
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team-a/rec:1.0");
        let p: ModuleRef = format!("registry.example/rec:1.0@{D}").parse().unwrap();
        assert_eq!(p.pinned(), Some(D));
        assert_eq!(r.at(D).pinned(), Some(D));
        assert_eq!(r.at(D).repository(), "team-a/rec");
    }

    #[test]
    fn refuses_what_would_surprise() {
        for (text, want) in [
            ("rec:1.0", "names no registry"),
            ("team/rec:1.0", "names no registry"),
            ("https://registry.example/rec:1", "scheme"),
            ("registry.example/rec@sha512:00", "sha512"),
            ("registry.example/rec@sha256:00", "not an OCI reference"),
            ("registry.example/Rec:1", "not an OCI reference"),
            ("", "not an OCI reference"),
        ] {
            let e = text.parse::<ModuleRef>().unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
