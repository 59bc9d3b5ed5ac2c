//! Running guests with no cluster: `reconciled test` runs a guest against fixtures.
//!
//! The guest runs on the host's own code: the informer store, indexes and selectors it reads
//! live (filled from the fixture rather than a watch), the same imports with the same typed
//! errors, grant checks and limits. Only the API server is replaced, by an in-memory one
//! ([`server`]) behind a real `kube::Client`, which applies writes as far as they can be
//! modelled ([`semantics`]) and says where they cannot. The guest's clocks and randomness are
//! fixed ([`crate::guest::world`]), so that a run is repeatable.

pub mod chaos;
mod feed;
pub mod fixture;
pub mod kinds;
pub mod records;
pub mod replay;
pub mod runner;
pub mod semantics;
pub mod server;
pub mod suite;
