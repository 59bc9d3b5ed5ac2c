//! Status conditions, as apimachinery's `meta.SetStatusCondition` and friends: a list of
//! [`Condition`]s keyed by type.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition of `type_` with `status` `True` or `False`, its `lastTransitionTime` now (the
/// guest's clock) and no `observedGeneration`; set that field on the result if you track it.
///
/// Give [`set_condition`] the result: it keeps the old transition time when the status did not
/// change.
pub fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: None,
        last_transition_time: Time(now()),
    }
}

/// The guest's clock to the second, as Kubernetes serialises a `Time`. A clock before 1970
/// (a misconfigured guest) reads as the epoch rather than failing the reconcile.
fn now() -> k8s_openapi::jiff::Timestamp {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    i64::try_from(seconds)
        .ok()
        .and_then(|s| k8s_openapi::jiff::Timestamp::from_second(s).ok())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

/// Sets `new` in `conditions`, as `meta.SetStatusCondition`: a new type is appended; an
/// existing one takes `new`'s status, reason, message and observedGeneration, and its
/// lastTransitionTime becomes `new`'s only when the status changed. Returns whether anything
/// changed, so that a status write can be skipped when nothing did.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let transition = old.status != new.status;
    let changed = transition
        || old.reason != new.reason
        || old.message != new.message
        || old.observed_generation != new.observed_generation;
    let last_transition_time = if transition {
        new.last_transition_time
    } else {
        old.last_transition_time.clone()
    };
    *old = Condition {
        last_transition_time,
        ..new
    };
    changed
}

/// The condition of `type_`, if there is one.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is there with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Removes the condition of `type_`; returns whether there was one.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(c: Condition, seconds: i64) -> Condition {
        Condition {
            last_transition_time: Time(Timestamp::from_second(seconds).unwrap()),
            ..c
        }
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut conds = Vec::new();
        assert!(set_condition(
            &mut conds,
            at(condition("Ready", false, "Waiting", "m"), 10)
        ));
        assert!(set_condition(
            &mut conds,
            at(condition("Ready", false, "Still", "m2"), 20)
        ));
        let ready = find_condition(&conds, "Ready").unwrap();
        assert_eq!(
            (ready.reason.as_str(), ready.message.as_str()),
            ("Still", "m2")
        );
        assert_eq!(
            ready.last_transition_time.0.as_second(),
            10,
            "same status: time kept"
        );
        assert!(set_condition(
            &mut conds,
            at(condition("Ready", true, "Done", "m3"), 30)
        ));
        assert_eq!(conds[0].last_transition_time.0.as_second(), 30);
        assert!(is_condition_true(&conds, "Ready"));
    }

    #[test]
    fn setting_the_same_condition_again_changes_nothing_whatever_its_time() {
        let mut conds = vec![at(condition("Ready", true, "Done", "m"), 10)];
        assert!(!set_condition(
            &mut conds,
            at(condition("Ready", true, "Done", "m"), 99)
        ));
        assert_eq!(conds[0].last_transition_time.0.as_second(), 10);
        let mut tracked = condition("Ready", true, "Done", "m");
        tracked.observed_generation = Some(2);
        assert!(
            set_condition(&mut conds, tracked),
            "a new observedGeneration is a change"
        );
    }

    #[test]
    fn types_are_independent_and_removable() {
        let mut conds = Vec::new();
        set_condition(&mut conds, condition("Ready", true, "Done", ""));
        set_condition(&mut conds, condition("Degraded", false, "Fine", ""));
        assert_eq!(conds.len(), 2);
        assert!(!is_condition_true(&conds, "Degraded"));
        assert!(!is_condition_true(&conds, "Missing"));
        assert!(remove_condition(&mut conds, "Ready"));
        assert!(!remove_condition(&mut conds, "Ready"));
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn a_new_condition_is_stamped_with_the_clock_to_the_second_when_written() {
        let c = condition("Ready", true, "Done", "");
        let json = serde_json::to_value(&c).unwrap();
        let time = json["lastTransitionTime"].as_str().unwrap();
        assert!(time.ends_with('Z') && time.len() == 20, "{time}");
        assert_eq!(json["status"], "True");
    }
}
