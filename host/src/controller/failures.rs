//! Which keys of a guest are failing, and the summary that says whether the guest can run.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::guest::Blame;

/// Why a guest is failing: for at least one key, the last reconcile trapped or its worker died.
///
/// Where it may surprise: a guest that returns an error from `reconcile` is not failing (it ran,
/// and said what went wrong); a key whose call trapped or whose worker panicked keeps the guest
/// failing until that key's reconcile next completes, even while other keys succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// The latest failure, naming its key.
    pub reason: String,
    /// Whose doing the latest failure was.
    pub blame: Blame,
    /// How many keys are failing.
    pub keys: usize,
    /// When the guest started failing (its oldest failing key).
    pub since: SystemTime,
}

/// Failing keys, each with its failure.
#[derive(Debug, Default)]
pub(super) struct Failures {
    keys: HashMap<String, (String, Blame, SystemTime)>,
    latest: Option<String>,
}

impl Failures {
    /// Marks `key` failing (an empty key: a worker, outside any reconcile), failing since it
    /// first failed, or since `now`.
    pub(super) fn fail(&mut self, key: &str, reason: String, blame: Blame, now: SystemTime) {
        let since = self.keys.get(key).map_or(now, |f| f.2);
        self.keys.insert(key.to_string(), (reason, blame, since));
        self.latest = Some(key.to_string());
    }

    /// `key` completed: it no longer fails, and neither does a worker (it ran this). Returns
    /// whether anything changed.
    pub(super) fn clear(&mut self, key: &str) -> bool {
        let before = self.keys.len();
        self.keys.remove(key);
        self.keys.remove("");
        if self.keys.len() == before {
            return false;
        }
        if self
            .latest
            .as_ref()
            .is_some_and(|k| !self.keys.contains_key(k))
        {
            self.latest = (self.keys.iter())
                .max_by_key(|(_, f)| f.2)
                .map(|(k, _)| k.clone());
        }
        true
    }

    /// What [`Controller::failing`](super::Controller::failing) shows.
    pub(super) fn summary(&self) -> Option<Failing> {
        let latest = self.latest.as_ref().and_then(|k| self.keys.get(k))?;
        Some(Failing {
            reason: latest.0.clone(),
            blame: latest.1,
            keys: self.keys.len(),
            since: self.keys.values().map(|f| f.2).min().unwrap_or(latest.2),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_guest_fails_while_any_key_fails_and_shows_the_latest_failure() {
        let mut f = Failures::default();
        assert_eq!(f.summary(), None);
        f.fail("ns/a", "ns/a trapped".into(), Blame::Guest, at(10));
        f.fail("ns/b", "ns/b trapped".into(), Blame::Guest, at(20));
        let s = f.summary().unwrap();
        assert_eq!((s.reason.as_str(), s.keys), ("ns/b trapped", 2));
        assert_eq!(s.since, at(10), "failing since the oldest failing key");
        f.fail("ns/a", "ns/a trapped again".into(), Blame::Guest, at(30));
        assert_eq!(
            f.summary().unwrap().since,
            at(10),
            "a key failing again keeps the time it first failed"
        );
    }

    #[test]
    fn a_completed_key_hands_the_summary_to_the_latest_failure_left() {
        let mut f = Failures::default();
        f.fail("", "a worker panicked".into(), Blame::Host, at(5));
        f.fail("ns/a", "ns/a trapped".into(), Blame::Guest, at(10));
        f.fail("ns/b", "ns/b trapped".into(), Blame::Guest, at(20));
        assert!(f.clear("ns/b"), "ns/b was failing");
        let s = f.summary().unwrap();
        assert_eq!(
            (s.reason.as_str(), s.keys),
            ("ns/a trapped", 1),
            "a completed reconcile also shows the workers running again"
        );
        assert!(
            !f.clear("ns/c"),
            "a key that was not failing changes nothing"
        );
        assert!(f.clear("ns/a"));
        assert_eq!(f.summary(), None);
    }
}
