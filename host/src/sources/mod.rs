//! Where guest modules come from: a folder watched during development (`reconciled dev`), a
//! guest crate rebuilt on change, and ConfigMaps that tenants drop into the cluster.

pub mod cargo_build;
pub mod configmap;
pub mod dir;
pub mod pack;
