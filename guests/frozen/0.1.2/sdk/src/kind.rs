//! Kinds: which API group, version and kind a Rust type stands for.

use std::fmt;

use crate::Gvk;

/// A Rust type that stands for one Kubernetes kind.
///
/// Implemented for every [`k8s_openapi::Resource`]. For a CRD type, implement it by hand:
///
/// ```ignore
/// impl reconciled_guest::Kind for MyCrd {
///     fn gvk() -> Gvk {
///         Gvk::new("example.com", "v1", "MyCrd")
///     }
/// }
/// ```
pub trait Kind {
    /// The type's group (empty for the core group), version and kind.
    fn gvk() -> Gvk;
}

impl<K: k8s_openapi::Resource> Kind for K {
    fn gvk() -> Gvk {
        Gvk::new(K::GROUP, K::VERSION, K::KIND)
    }
}

impl Gvk {
    /// A kind; `group` is empty for the core group (`v1` ConfigMap, Pod, ...).
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// The `apiVersion` field's value: `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// `group/version/Kind`, or `version/Kind` for the core group.
impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.group.is_empty() {
            write!(f, "{}/", self.group)?;
        }
        write!(f, "{}/{}", self.version, self.kind)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn k8s_openapi_resources_have_their_gvk() {
        let cm = ConfigMap::gvk();
        assert_eq!(cm, Gvk::new("", "v1", "ConfigMap"));
        assert_eq!(
            (cm.api_version(), cm.to_string()),
            ("v1".into(), "v1/ConfigMap".into())
        );
        let deploy = Deployment::gvk();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.to_string(), "apps/v1/Deployment");
    }
}
