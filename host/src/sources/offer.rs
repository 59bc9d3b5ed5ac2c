//! What the sources hand the supervisor for a module they could not read, and for a pull's
//! outcome.

use std::sync::Arc;
use std::time::Duration;

use crate::controller::Settings;
use crate::sources::oci::{Error, Pulled};
use crate::supervisor::{Offer, Source, Unreadable};

/// The offer a pull's outcome makes for a guest: load the module, or keep what serves and say
/// why not.
pub fn offer_of(
    outcome: Result<Pulled, Error>,
    source: Source,
    settings: Settings,
    min_interval: Duration,
) -> Offer {
    match outcome {
        Ok(p) => Offer::Load {
            source: pinned(source, &p.manifest),
            settings,
            read: Box::new(move || {
                let bytes = Arc::try_unwrap(p.bytes).unwrap_or_else(|shared| (*shared).clone());
                Ok((bytes, Some(p.digest)))
            }),
            min_interval,
        },
        Err(e) => refused(source, settings, e.to_string()),
    }
}

/// `source` as pinned to manifest `manifest`: a Reconciler's names `oci://registry/repository`
/// as it follows a reference, and each version it offers names the manifest it was pulled by,
/// which is what a revision records. Other sources are as they were.
fn pinned(source: Source, manifest: &str) -> Source {
    match source {
        Source::Reconciler {
            namespace,
            name,
            uid,
            module,
        } => Source::Reconciler {
            namespace,
            name,
            uid,
            module: format!("{module}@{manifest}"),
        },
        other => other,
    }
}

/// An offer for a module that cannot be loaded, with `message` saying why.
pub fn refused(source: Source, settings: Settings, message: String) -> Offer {
    Offer::Unreadable {
        source,
        settings,
        unreadable: Unreadable {
            digest: crate::guest::digest_of(message.as_bytes()),
            message,
        },
    }
}
