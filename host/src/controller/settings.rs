//! How the operator runs one guest.

use crate::guest::grant::Grant;
use crate::guest::identity::ServiceAccount;
use crate::guest::imports::Limits;
use crate::guest::settings::GuestSettings;

use super::shadow;

/// How the operator runs one guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The guest's name: in logs, metrics, events and errors.
    pub name: String,
    /// What it may do.
    pub grant: Grant,
    /// Per-call limits.
    pub limits: Limits,
    /// Concurrent reconciles (never two of one key) \[1\].
    pub workers: usize,
    /// `Some(false)` turns read-your-writes off whatever the guest declares.
    pub read_your_writes: Option<bool>,
    /// The ServiceAccount its writes and uncached reads act as; `None`: the host's identity.
    /// The client handed to [`Controller::start`](super::Controller::start) must be the one acting as it.
    ///
    /// Where it may surprise: with one, the guest starts held, and is held again at each swap
    /// to a new version, until [`Controller::hold`](super::Controller::hold) releases it: whoever runs it must first
    /// have checked that the ServiceAccount may read what the version reads from the cache.
    pub identity: Option<ServiceAccount>,
    /// Where its reconciles are recorded (`reconciled run --record`), if they are.
    pub recorder: Option<crate::guest::tape::RecorderRef>,
    /// A version to run beside this one with dry-run writes, compared (see [`shadow`]).
    pub shadow: Option<shadow::ShadowModule>,
    /// Environment variables its calls see (the host's, such as `RECONCILED_REPLICA`); none
    /// by default.
    pub environment: Vec<(String, String)>,
    /// The settings the guest reads through the `settings` import; none (`{}`) by default.
    ///
    /// Where it may surprise: unlike every other field here, a change of these alone does not
    /// restart the guest: the supervisor reloads it with the new settings (see
    /// [`Controller::reload`](super::Controller::reload)), keeping its queue and informers, and
    /// [`Controller::settings`](super::Controller::settings) keeps showing the ones it started
    /// with; [`Controller::guest_settings`](super::Controller::guest_settings) shows those
    /// serving.
    pub guest_settings: GuestSettings,
}

impl Settings {
    /// Defaults for a guest named `name`: full grant, default limits, one worker.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            grant: Grant::default(),
            limits: Limits::default(),
            workers: 1,
            read_your_writes: None,
            identity: None,
            recorder: None,
            shadow: None,
            environment: Vec::new(),
            guest_settings: GuestSettings::default(),
        }
    }

    /// Whether `other` runs the guest the same way, its [`guest_settings`](Self::guest_settings)
    /// aside: those alone change by a reload, everything else by a restart.
    pub fn same_but_guest_settings(&self, other: &Settings) -> bool {
        let plain = |s: &Settings| Settings {
            guest_settings: GuestSettings::default(),
            ..s.clone()
        };
        plain(self) == plain(other)
    }
}
