//! Kubernetes Events the host posts: one builder for the supervisor's Events about tenants'
//! ConfigMaps and for the Events guests record about their own objects.
//!
//! Where it may surprise: Events are core/v1 `Event`s (what `kubectl get events` and
//! `kubectl describe` show), each created afresh with `generateName`; the host does not
//! aggregate repeats into one Event with a count, as client-go's recorder does.

use std::borrow::Cow;

use serde_json::{Value, json};

/// Longest Event message: `NoteLengthLimit` (pkg/apis/core/validation/events.go).
pub const MAX_MESSAGE: usize = 1024;

/// `Normal` or `Warning`, the two types Kubernetes knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Something went as it should.
    Normal,
    /// Something needs a person's attention.
    Warning,
}

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regarding {
    /// `v1`, `apps/v1`, …
    pub api_version: String,
    /// The object's kind.
    pub kind: String,
    /// Its namespace; empty for a cluster-scoped object.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid, when known: `kubectl describe` matches Events to the object by it.
    pub uid: Option<String>,
}

/// One Event, ready to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What it is about.
    pub regarding: Regarding,
    /// Normal or Warning.
    pub type_: Type,
    /// UpperCamelCase, for machines (`ModuleRejected`); checked by whoever takes it from a
    /// guest, not here.
    pub reason: String,
    /// For people; cut to [`MAX_MESSAGE`] bytes by [`Event::body`].
    pub message: String,
    /// Who reports it: `reconciled`, or `reconciled/<guest>` for a guest's own Event.
    pub component: String,
}

impl Event {
    /// The namespace the Event is created in: the object's, or `default` for a cluster-scoped
    /// object, as client-go's recorder does.
    pub fn namespace(&self) -> &str {
        if self.regarding.namespace.is_empty() {
            "default"
        } else {
            &self.regarding.namespace
        }
    }

    /// The path to POST the Event to. The namespace is a DNS label (checked where it came
    /// from), so it needs no escaping.
    pub fn path(&self) -> String {
        format!("/api/v1/namespaces/{}/events", self.namespace())
    }

    /// The core/v1 Event, with the message cut to fit.
    pub fn body(&self) -> Value {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let r = &self.regarding;
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            // The API server shortens the prefix if it must and appends a random suffix.
            "metadata": { "generateName": format!("{}.", r.name), "namespace": self.namespace() },
            "involvedObject": {
                "apiVersion": r.api_version,
                "kind": r.kind,
                "namespace": r.namespace,
                "name": r.name,
                "uid": r.uid,
            },
            "type": match self.type_ { Type::Normal => "Normal", Type::Warning => "Warning" },
            "reason": self.reason,
            "message": truncate_message(&self.message),
            "source": { "component": self.component },
            "reportingComponent": "reconciled",
            "reportingInstance": hostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        })
    }
}

/// `message` cut to fit an Event, the way Kubernetes' own components cut theirs.
///
/// client-go's recorders send messages as given (neither `tools/record` nor `tools/events`
/// truncates); the rule Kubernetes uses where it must fit one, kube-scheduler's
/// `truncateMessage`, keeps a message of up to 1024 bytes as it is and otherwise keeps
/// `1024 - len(" ...")` bytes and appends `" ..."`. That is followed here, except that the cut
/// moves back to a character boundary: Go cuts bytes, and the broken character would become
/// U+FFFD and push the message past the limit.
pub fn truncate_message(message: &str) -> Cow<'_, str> {
    const SUFFIX: &str = " ...";
    if message.len() <= MAX_MESSAGE {
        return message.into();
    }
    let mut end = MAX_MESSAGE - SUFFIX.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &message[..end]).into()
}

/// This host's name, for `reportingInstance`: which replica said it.
fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "reconciled".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(namespace: &str, message: &str) -> Event {
        Event {
            regarding: Regarding {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: namespace.into(),
                name: "rec".into(),
                uid: Some("u-1".into()),
            },
            type_: Type::Warning,
            reason: "ModuleRejected".into(),
            message: message.into(),
            component: "reconciled".into(),
        }
    }

    #[test]
    fn an_event_about_a_cluster_scoped_object_goes_to_the_default_namespace() {
        assert_eq!(event("", "m").path(), "/api/v1/namespaces/default/events");
        let body = event("team-a", "m").body();
        assert_eq!(body["metadata"]["namespace"], "team-a");
        assert_eq!(body["involvedObject"]["uid"], "u-1");
        assert_eq!(body["type"], "Warning");
    }

    #[test]
    fn long_messages_are_cut_like_kubernetes_cuts_them_at_a_char_boundary() {
        assert_eq!(truncate_message("short"), "short");
        let exact = "x".repeat(MAX_MESSAGE);
        assert_eq!(truncate_message(&exact), exact);
        let long = "é".repeat(MAX_MESSAGE);
        let cut = truncate_message(&long);
        assert!(
            cut.len() <= MAX_MESSAGE && cut.ends_with(" ..."),
            "{}",
            cut.len()
        );
        assert_eq!(event("a", &long).body()["message"], cut.as_ref());
    }
}
