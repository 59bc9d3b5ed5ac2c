//! Where guest modules come from: a folder watched during development (`reconciled dev`), a
//! guest crate rebuilt on change, ConfigMaps and `Reconciler` objects that tenants put in the
//! cluster, and OCI registries that any of them may name.

pub mod configmap;
pub mod dev_build;
pub mod dir;
pub mod oci;
pub mod offer;
pub mod reconciler;
