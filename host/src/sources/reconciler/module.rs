//! A Reconciler's module held in a ConfigMap key of its own namespace (`spec.module.configMapRef`),
//! read as the Reconciler's ServiceAccount: a tenant can run only a module its reconciler may
//! `get`.
//!
//! Where it may surprise: the host watches such a ConfigMap (metadata only, by name) to hear of
//! edits, but reads its bytes with the ServiceAccount's own request, each time it changes.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::guest::identity::ServiceAccount;
use crate::sources::configmap::format::unpack;
use crate::supervisor::{Read, Unreadable};

/// Why the module could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The host could not act as the ServiceAccount.
    #[error("cannot act as {account} to read ConfigMap {namespace}/{name}: {reason}")]
    Identity {
        account: ServiceAccount,
        namespace: String,
        name: String,
        reason: String,
    },
    /// The ConfigMap does not exist.
    #[error(
        "ConfigMap {namespace}/{name} (spec.module.configMapRef) does not exist; create it with kubectl create configmap {name} --from-file=<key>=<module.wasm>"
    )]
    Missing { namespace: String, name: String },
    /// The ServiceAccount may not read it.
    #[error(
        "ServiceAccount {account} may not get ConfigMap {namespace}/{name} (spec.module.configMapRef): grant it get on configmaps in its Role, or name a ServiceAccount that has it"
    )]
    Forbidden {
        account: ServiceAccount,
        namespace: String,
        name: String,
    },
    /// The read failed otherwise.
    #[error("cannot read ConfigMap {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The key is not there.
    #[error(
        "ConfigMap {namespace}/{name} has no binaryData key {key:?} (it has {have:?}); a module must be in binaryData, as kubectl create configmap --from-file stores it"
    )]
    NoKey {
        namespace: String,
        name: String,
        key: String,
        have: Vec<String>,
    },
}

/// Reads key `key` of ConfigMap `namespace/name` as `account`, with the packed bytes (a
/// `.wasm.gz` unpacked in the guest's own load task, up to `max` bytes).
pub(crate) async fn fetch(
    client: kube::Client,
    account: &ServiceAccount,
    name: &str,
    key: &str,
    max: usize,
) -> Result<Read, Error> {
    let namespace = account.namespace.clone();
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let cm = match api.get_opt(name).await {
        Ok(Some(cm)) => cm,
        Ok(None) => {
            return Err(Error::Missing {
                namespace,
                name: name.to_string(),
            });
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return Err(Error::Forbidden {
                account: account.clone(),
                namespace,
                name: name.to_string(),
            });
        }
        Err(source) => {
            return Err(Error::Read {
                namespace,
                name: name.to_string(),
                source,
            });
        }
    };
    let binary = cm.binary_data.unwrap_or_default();
    let Some(packed) = binary.get(key) else {
        return Err(Error::NoKey {
            namespace,
            name: name.to_string(),
            key: key.to_string(),
            have: binary.keys().cloned().collect(),
        });
    };
    // k8s-openapi has decoded the base64 already.
    let bytes = packed.0.clone();
    let key = key.to_string();
    Ok(Box::new(move || {
        unpack(&key, bytes, max)
            .map(|bytes| (bytes, None))
            .map_err(|e| Unreadable {
                message: e.to_string(),
                digest: e.digest,
            })
    }))
}
