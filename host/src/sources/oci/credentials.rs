//! Registry credentials from a Secret of type `kubernetes.io/dockerconfigjson`, the kind
//! `kubectl create secret docker-registry` makes and kubelets read for image pulls.

use std::collections::BTreeMap;

use base64::Engine as _;

/// Why a Secret gave no credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The Secret could not be read.
    #[error(
        "cannot read pull secret {namespace}/{name}: {reason}; if it is missing, create it with `kubectl create secret docker-registry {name} -n {namespace} --docker-server=… --docker-username=… --docker-password=…`; if forbidden, the identity reading it (a tenant's ServiceAccount, or the host for [registry] pull_secret) needs get on it"
    )]
    Read {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What the API server said.
        reason: String,
    },
    /// It is not a dockerconfigjson Secret, or its JSON is not one.
    #[error(
        "pull secret {namespace}/{name} is not a kubernetes.io/dockerconfigjson Secret with a .dockerconfigjson key: {reason}"
    )]
    Format {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// Why a `.dockerconfigjson` document gives no logins. Never holds a value from the document,
/// which may be a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// Not JSON of the dockerconfigjson shape; where serde stopped, without its message, which
    /// quotes the offending value.
    #[error(
        "it is not a dockerconfigjson document ({category} error at line {line}, column {column})"
    )]
    Shape {
        /// serde's category of the error (`Data`, `Syntax`, …).
        category: String,
        /// The line.
        line: usize,
        /// The column.
        column: usize,
    },
    /// An `auth` that is not base64.
    #[error("auth of {0:?} is not base64")]
    AuthNotBase64(String),
    /// An `auth` that is not UTF-8 once decoded.
    #[error("auth of {0:?} is not UTF-8")]
    AuthNotUtf8(String),
    /// An `auth` without the `:` between user and password.
    #[error("auth of {0:?} is not user:password")]
    AuthNotPair(String),
    /// An entry with neither a username and password nor an auth.
    #[error("{0:?} has neither username and password nor auth")]
    Empty(String),
}

/// A user and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// The user.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({:?}, <redacted>)", self.username)
    }
}

/// The logins of one dockerconfigjson, by registry host.
///
/// Where it may surprise: keys are matched by host and port only, so `https://r.example/v1/`
/// and `r.example` are the same registry; a registry the Secret does not name is pulled
/// anonymously.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Logins {
    by_host: BTreeMap<String, Login>,
}

impl Logins {
    /// Reads the `.dockerconfigjson` document (`{"auths": {host: {username, password} or
    /// {auth: base64(user:password)}}}`).
    pub fn parse(json: &[u8]) -> Result<Self, DocumentError> {
        #[derive(serde::Deserialize)]
        struct Doc {
            #[serde(default)]
            auths: BTreeMap<String, Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            #[serde(default)]
            username: Option<String>,
            #[serde(default)]
            password: Option<String>,
            #[serde(default)]
            auth: Option<String>,
        }
        // serde's own message quotes the offending value, which may be a password.
        let doc: Doc = serde_json::from_slice(json).map_err(|e| DocumentError::Shape {
            category: format!("{:?}", e.classify()),
            line: e.line(),
            column: e.column(),
        })?;
        let mut by_host = BTreeMap::new();
        for (key, e) in doc.auths {
            let login = match (e.username, e.password, e.auth) {
                (Some(username), Some(password), _) => Login { username, password },
                (_, _, Some(auth)) => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|_| DocumentError::AuthNotBase64(key.clone()))?;
                    let text = String::from_utf8(decoded)
                        .map_err(|_| DocumentError::AuthNotUtf8(key.clone()))?;
                    let (u, p) = (text.split_once(':'))
                        .ok_or_else(|| DocumentError::AuthNotPair(key.clone()))?;
                    Login {
                        username: u.to_string(),
                        password: p.to_string(),
                    }
                }
                _ => return Err(DocumentError::Empty(key)),
            };
            by_host.insert(host_of(&key), login);
        }
        Ok(Logins { by_host })
    }

    /// The login for `registry` (host and port), if the document names it.
    pub fn for_registry(&self, registry: &str) -> Option<&Login> {
        self.by_host.get(&host_of(registry))
    }

    /// Reads Secret `namespace/name` with `client`, whose identity decides whether it may.
    pub async fn from_secret(
        client: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Self, Error> {
        use k8s_openapi::api::core::v1::Secret;
        let secret = kube::Api::<Secret>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| Error::Read {
                namespace: namespace.into(),
                name: name.into(),
                reason: e.to_string(),
            })?;
        let format = |reason: String| Error::Format {
            namespace: namespace.into(),
            name: name.into(),
            reason,
        };
        let json = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .ok_or_else(|| format("it has no .dockerconfigjson key".into()))?;
        Logins::parse(&json.0).map_err(|e| format(e.to_string()))
    }
}

/// `https://r.example:5000/v1/` → `r.example:5000`; Docker Hub's legacy key
/// `https://index.docker.io/v1/` → `docker.io`, as references name it.
fn host_of(key: &str) -> String {
    let k = key.trim();
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let host = k.split('/').next().unwrap_or(k).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_ways_of_writing_a_login_and_matches_by_host() {
        let auth = base64::engine::general_purpose::STANDARD.encode("bob:s3:cret");
        let doc = serde_json::json!({"auths": {
            "https://R.example:5000/v1/": {"auth": auth},
            "other.example": {"username": "amy", "password": "pw"},
        }});
        let l = Logins::parse(doc.to_string().as_bytes()).unwrap();
        let bob = l.for_registry("r.example:5000").unwrap();
        assert_eq!(
            (bob.username.as_str(), bob.password.as_str()),
            ("bob", "s3:cret")
        );
        assert_eq!(l.for_registry("other.example").unwrap().username, "amy");
        assert!(
            l.for_registry("r.example").is_none(),
            "the port is part of the host"
        );
        assert!(
            !format!("{bob:?}").contains("s3"),
            "passwords never reach logs"
        );
    }

    #[test]
    fn says_what_is_wrong_with_a_bad_document() {
        for (doc, want) in [
            (r#"{"auths":{"r":{"auth":"!!"}}}"#, "not base64"),
            (r#"{"auths":{"r":{"auth":"Ym9i"}}}"#, "not user:password"),
            (r#"{"auths":{"r":{}}}"#, "neither"),
            (r#"{"auths":[]}"#, "Data error at line 1"),
            (r#"{"auths":{"r":"c2VjcmV0"}}"#, "not a dockerconfigjson"),
        ] {
            let e = Logins::parse(doc.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(want), "{doc}: {e}");
            assert!(
                !e.contains("c2VjcmV0"),
                "a value never reaches the message: {e}"
            );
        }
    }
}
