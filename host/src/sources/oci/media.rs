//! The media types of a Wasm OCI artifact, as the CNCF TAG Runtime's Wasm artifact layout names
//! them.

/// The config media type of a Wasm OCI artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of its one layer: the component itself.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// The name a pushed module's layer carries (`org.opencontainers.image.title`): the file
/// `oras pull` writes it to.
pub const LAYER_TITLE: &str = "module.wasm";
/// What older tools (wasm-to-oci, Kubewarden's policies) call the same two things; pulled too.
pub(super) const LEGACY_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v1+json";
pub(super) const LEGACY_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The manifest of every artifact pushed, and the one manifest kind pulled.
pub(super) const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
