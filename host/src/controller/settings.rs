//! How the operator runs one guest.

use crate::guest::grant::Grant;
use crate::guest::identity::ServiceAccount;
use crate::guest::imports::Limits;
use crate::guest::settings::GuestSettings;

use super::shadow;
use crate::rollout::spec::Rollout;

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
    /// Among replicas, whether its keys are split over every replica by their objects' uid
    /// instead of the whole guest running on one (see [`crate::replicas`]). Without replicas
    /// it changes nothing.
    pub shard_keys: bool,
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
    /// How a new revision replaces the serving one: at once (the default) or step by step
    /// (see [`crate::rollout`]).
    ///
    /// Where it may surprise: like [`guest_settings`](Self::guest_settings), a change of it
    /// alone restarts nothing; it applies to the next revision offered.
    pub rollout: Rollout,
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
            shard_keys: false,
            identity: None,
            recorder: None,
            shadow: None,
            environment: Vec::new(),
            guest_settings: GuestSettings::default(),
            rollout: Rollout::default(),
        }
    }

    /// Whether `other` runs the guest the same way, its [`guest_settings`](Self::guest_settings)
    /// and [`rollout`](Self::rollout) aside: those change by a reload (or a rollout), everything
    /// else by a restart.
    pub fn same_deployment(&self, other: &Settings) -> bool {
        let plain = |s: &Settings| Settings {
            guest_settings: GuestSettings::default(),
            rollout: Rollout::default(),
            ..s.clone()
        };
        plain(self) == plain(other)
    }
}
