//! Where a guest's module comes from, whose tenant it is, and the Events a ConfigMap source
//! gets.

use crate::events::Type;

/// Where a guest's module comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `[[guest]]` of the host config file, or `--guest`.
    File(std::path::PathBuf),
    /// A file in the folder `reconciled dev` watches.
    DevFolder(std::path::PathBuf),
    /// An OCI reference of the host config or `--guest` (`oci://…`): the operator's.
    Registry(String),
    /// A key of a labelled ConfigMap.
    ConfigMap {
        /// Its namespace: the guest's tenant namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The `binaryData` key.
        key: String,
        /// Its uid, for Events.
        uid: String,
    },
}

impl Source {
    /// The tenant whose share of the host the guest runs in: a ConfigMap's namespace, or
    /// [`crate::controller::fair_share::OPERATOR`] for the operator's own guests.
    pub fn tenant(&self) -> &str {
        match self {
            Source::ConfigMap { namespace, .. } => namespace,
            Source::File(_) | Source::DevFolder(_) | Source::Registry(_) => {
                crate::controller::fair_share::OPERATOR
            }
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::DevFolder(p) => write!(f, "dev folder file {}", p.display()),
            Source::Registry(r) => f.write_str(r),
            Source::ConfigMap {
                namespace,
                name,
                key,
                ..
            } => write!(f, "configmap {namespace}/{name} key {key}"),
        }
    }
}

/// Posts an Event about a ConfigMap source, in the background; other sources are ignored.
pub(super) fn post_event(
    client: &kube::Client,
    source: &Source,
    type_: Type,
    reason: &str,
    message: String,
) {
    let Source::ConfigMap {
        namespace,
        name,
        uid,
        ..
    } = source
    else {
        return;
    };
    let event = crate::events::Event {
        regarding: crate::events::Regarding {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: namespace.clone(),
            name: name.clone(),
            uid: Some(uid.clone()),
        },
        type_,
        reason: reason.to_string(),
        message,
        component: "reconciled".into(),
    };
    let client = client.clone();
    tokio::spawn(async move {
        let req = http::Request::post(event.path())
            .header("content-type", "application/json")
            .body(event.body().to_string().into_bytes());
        let result = match req {
            Ok(req) => client
                .request::<serde_json::Value>(req)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            tracing::warn!("could not record an Event (the host needs create on events): {e}");
        }
    });
}
