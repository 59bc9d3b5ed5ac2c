//! The host's integration tests, as one test binary: each module is one area, against the real
//! loopback control plane that `common` starts (`testenv::ControlPlane::shared`), or against a
//! control plane of its own where its tests restart the API server, change its flags or count
//! everything it serves.
//!
//! One binary, not one per area: each links wasmtime, kube and the host, and on two cores the
//! links were most of a clean build of the tests. Tests run concurrently (`--test-threads`, the
//! number of cores by default) and isolate themselves by namespace.
//!
//! Run one area with a filter: `cargo test --test integration hot_reload::`.

mod build_scripts;
mod chaos;
mod common;
mod container;
mod deploy;
mod dev_loop;
mod example;
mod fairness;
mod fixtures;
mod guests;
mod helm;
mod hostile;
mod hot_reload;
mod informer;
mod informer_faults;
mod informer_without_watch_list;
mod isolation;
mod key_sharding;
mod lifecycle;
mod module_sharing;
// A host worker panics on purpose here, which only the `fault-injection` feature allows.
#[cfg(feature = "fault-injection")]
mod metrics;
mod oci;
mod protobuf;
mod quota;
mod reconciler_kind;
mod reconcilers;
mod reconnect;
mod replay;
mod replicas;
mod reservation;
mod rollout;
mod scaffold;
mod settings;
mod shadow;
mod sharding;
mod signed_images;
mod snippets;
mod tenant_kinds;
mod tenants;
mod traces;
mod versions;
// A host worker panics on purpose here, which only the `fault-injection` feature allows.
#[cfg(feature = "fault-injection")]
mod worker_faults;
