//! Why a guest could not be started or reloaded.

use crate::guest::CallError;
use crate::guest::grant;

/// Why a guest could not be started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `describe()` failed.
    #[error("guest {guest:?}: describe() failed: {source}")]
    Describe {
        /// The guest.
        guest: String,
        /// The call failure.
        #[source]
        source: CallError,
    },
    /// The declaration exceeds the grant.
    #[error(transparent)]
    Grant(#[from] grant::Error),
    /// An informer the version reads (and the serving version does not) did not sync:
    /// forbidden, kind not found, a cluster-scoped kind in a confined scope, or slow.
    #[error("guest {guest:?}: its informer for {kind} did not sync: {reason}")]
    Informer {
        /// The guest.
        guest: String,
        /// The kind.
        kind: String,
        /// Why.
        reason: String,
    },
    /// The caller's admission check refused the new version (see [`Controller::reload`](super::Controller::reload)).
    #[error("guest {guest:?}: {source}")]
    Refused {
        /// The guest.
        guest: String,
        /// Why, as the check said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The declaration is malformed.
    #[error("guest {guest:?}: {reason}")]
    Invalid {
        /// The guest.
        guest: String,
        /// What is wrong.
        reason: String,
    },
}
