//! Where a guest's module comes from, whose tenant it is, and the Events a tenant's source (a
//! ConfigMap or a Reconciler) gets.

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
    /// A tenant's `Reconciler` (reconciled.dev/v1alpha1).
    Reconciler {
        /// Its namespace: the guest's tenant namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its uid, for Events and owner references.
        uid: String,
        /// Where this version of the module came from: `oci://registry/repository@sha256:…`
        /// (the manifest a tag resolved to), or `configmap/<name>/<key>`. A revision records it,
        /// and pinning that revision reads the module from there again.
        module: String,
    },
}

impl Source {
    /// The tenant whose share of the host the guest runs in: a ConfigMap's namespace, or
    /// [`crate::controller::fair_share::OPERATOR`] for the operator's own guests.
    pub fn tenant(&self) -> &str {
        self.tenant_namespace()
            .unwrap_or(crate::controller::fair_share::OPERATOR)
    }

    /// The tenant namespace that delivered the guest, for a tenant's guest (a ConfigMap's or a
    /// Reconciler's); `None` for the operator's.
    ///
    /// Where it may surprise: a tenant's guest must sync before it serves, is held to its
    /// namespace's quotas, and never counts for the host's `/readyz`.
    pub fn tenant_namespace(&self) -> Option<&str> {
        match self {
            Source::ConfigMap { namespace, .. } | Source::Reconciler { namespace, .. } => {
                Some(namespace)
            }
            Source::File(_) | Source::DevFolder(_) | Source::Registry(_) => None,
        }
    }

    /// The Kubernetes object Events about this source are posted on, if it has one.
    pub(super) fn regarding(&self) -> Option<crate::events::Regarding> {
        let (api_version, kind, namespace, name, uid) = match self {
            Source::ConfigMap {
                namespace,
                name,
                uid,
                ..
            } => ("v1", "ConfigMap", namespace, name, uid),
            Source::Reconciler {
                namespace,
                name,
                uid,
                ..
            } => (RECONCILER_API_VERSION, "Reconciler", namespace, name, uid),
            Source::File(_) | Source::DevFolder(_) | Source::Registry(_) => return None,
        };
        Some(crate::events::Regarding {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.clone(),
            name: name.clone(),
            uid: Some(uid.clone()),
        })
    }
}

/// The `apiVersion` of the `Reconciler` kind.
pub const RECONCILER_API_VERSION: &str = "reconciled.dev/v1alpha1";

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
            Source::Reconciler {
                namespace,
                name,
                module,
                ..
            } => write!(f, "reconciler {namespace}/{name} module {module}"),
        }
    }
}
