//! Recording an import call: every import enters through [`HostState::enter_noted`], saying
//! what it asks, and leaves through [`Call::answered`], which notes the answer on the call's
//! tape. The imports themselves never touch the tape. Nothing is copied, noted or parsed for a
//! guest not recorded: what a call asked is built only when it is.

use std::sync::Arc;

use crate::guest::bindings::reconciled::runtime::cache::{ListOptions, ListPage};
use crate::guest::bindings::reconciled::runtime::client::{EventType, PatchBody as Patch};
use crate::guest::bindings::{GuestError, Gvk};
use crate::guest::imports::{GuestContext, HostState};
use crate::guest::tape::{self, Event, Read, Write};

/// What one import call asked, kept for its recording.
pub(crate) enum Asked {
    /// A get (`op`: `cache.get` or `api.get`).
    Get {
        op: &'static str,
        kind: Gvk,
        namespace: String,
        name: String,
    },
    /// A list (`op`: `cache.list` or `api.list`).
    List {
        op: &'static str,
        kind: Gvk,
        options: ListOptions,
    },
    /// A write.
    Write(Box<Written>),
    /// An Event; noted only once recorded successfully.
    Event(Event),
}

/// A write's arguments.
pub(crate) struct Written {
    verb: &'static str,
    kind: Gvk,
    namespace: String,
    /// Empty for a create or an update: the body's name is used.
    name: String,
    status: bool,
    field_manager: Option<String>,
    force: Option<bool>,
    body: Option<String>,
}

impl Asked {
    /// A get of `kind` `namespace/name`.
    pub(crate) fn get(op: &'static str, kind: &Gvk, namespace: &str, name: &str) -> Self {
        Self::Get {
            op,
            kind: kind.clone(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A list of `kind` with `options`.
    pub(crate) fn list(op: &'static str, kind: &Gvk, options: &ListOptions) -> Self {
        Self::List {
            op,
            kind: kind.clone(),
            options: options.clone(),
        }
    }

    /// A create, an update or their status subresource's (`status`) of `object`.
    pub(crate) fn write(
        verb: &'static str,
        kind: &Gvk,
        namespace: &str,
        object: &str,
        status: bool,
    ) -> Self {
        Self::Write(Box::new(Written {
            verb,
            kind: kind.clone(),
            namespace: namespace.into(),
            name: String::new(),
            status,
            field_manager: None,
            force: None,
            body: Some(object.into()),
        }))
    }

    /// A patch of `kind` `namespace/name`, or of its status subresource (`status`), as the verb
    /// of its patch type.
    pub(crate) fn patch(
        kind: &Gvk,
        namespace: &str,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Self {
        let (verb, body, field_manager, force) = match patch {
            Patch::Merge(b) => ("merge-patch", b, None, None),
            Patch::Json(b) => ("json-patch", b, None, None),
            Patch::Apply(a) => (
                "apply",
                &a.body,
                Some(a.field_manager.clone()),
                Some(a.force),
            ),
        };
        Self::Write(Box::new(Written {
            verb,
            kind: kind.clone(),
            namespace: namespace.into(),
            name: name.into(),
            status,
            field_manager,
            force,
            body: Some(body.clone()),
        }))
    }

    /// A delete of `kind` `namespace/name`.
    pub(crate) fn delete(kind: &Gvk, namespace: &str, name: &str) -> Self {
        Self::Write(Box::new(Written {
            verb: "delete",
            kind: kind.clone(),
            namespace: namespace.into(),
            name: name.into(),
            status: false,
            field_manager: None,
            force: None,
            body: None,
        }))
    }

    /// An Event about `regarding` `namespace/name`, its message cut as the host cuts it.
    pub(crate) fn event(
        regarding: &Gvk,
        namespace: &str,
        name: &str,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Self {
        Self::Event(Event {
            type_: match event_type {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            },
            reason: reason.into(),
            regarding: if namespace.is_empty() {
                format!("{} {name}", regarding.kind)
            } else {
                format!("{} {namespace}/{name}", regarding.kind)
            },
            message: crate::events::truncate_message(message).into_owned(),
        })
    }
}

/// What an import answers, as a recording keeps it: the objects it read.
pub(crate) trait Answer {
    /// The objects the answer carries, as JSON.
    fn objects(&self) -> impl Iterator<Item = &String>;
}

impl Answer for String {
    fn objects(&self) -> impl Iterator<Item = &String> {
        std::iter::once(self)
    }
}

impl Answer for ListPage {
    fn objects(&self) -> impl Iterator<Item = &String> {
        self.items.iter()
    }
}

impl Answer for () {
    fn objects(&self) -> impl Iterator<Item = &String> {
        std::iter::empty()
    }
}

/// One import call under way, holding what it asked when it is recorded.
#[must_use = "an import call ends with `answered`, which notes its answer"]
pub(crate) struct Call {
    asked: Option<Asked>,
}

impl HostState {
    /// Every import's first step: counts the call against the limit and returns the guest
    /// context (both trap when they fail), and keeps what the call asked if it is recorded.
    pub(crate) fn enter_noted(
        &mut self,
        asked: impl FnOnce() -> Asked,
    ) -> wasmtime::Result<(Arc<GuestContext>, Call)> {
        let ctx = self.enter()?;
        let asked = self.tape.is_some().then(asked);
        Ok((ctx, Call { asked }))
    }

    fn note<T: Answer>(&mut self, asked: Asked, answer: Result<&T, &GuestError>) {
        let Some(tape) = &mut self.tape else {
            return;
        };
        let error = answer.err().map(|e| tape::error_case(e).0.to_string());
        let read = |tape: &mut tape::Tape, kind: &Gvk| -> Vec<serde_json::Value> {
            answer.map_or_else(
                |_| Vec::new(),
                |a| {
                    a.objects()
                        .filter(|t| tape.room_for(t.len()))
                        .map(|t| tape::recorded(t, kind))
                        .collect()
                },
            )
        };
        match asked {
            Asked::Get {
                op,
                kind,
                namespace,
                name,
            } => {
                let objects = read(tape, &kind);
                let step = tape.next_step();
                tape.reads.push(Read {
                    op: op.into(),
                    kind: tape::kind_name(&kind),
                    namespace,
                    name,
                    query: String::new(),
                    objects,
                    error,
                    step,
                });
            }
            Asked::List { op, kind, options } => {
                let objects = read(tape, &kind);
                let step = tape.next_step();
                tape.reads.push(Read {
                    op: op.into(),
                    kind: tape::kind_name(&kind),
                    query: query_of(&options),
                    namespace: options.namespace,
                    name: String::new(),
                    objects,
                    error,
                    step,
                });
            }
            Asked::Write(w) => {
                let body = (w.body)
                    .filter(|b| tape.room_for(b.len()))
                    .map(|b| tape::shown(&tape::recorded(&b, &w.kind)));
                let name = match (w.name.as_str(), &body) {
                    ("", Some(b)) => b["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    _ => w.name,
                };
                let step = tape.next_step();
                tape.writes.push(Write {
                    verb: w.verb.into(),
                    kind: tape::kind_name(&w.kind),
                    namespace: w.namespace,
                    name,
                    subresource: w.status.then(|| "status".into()),
                    field_manager: w.field_manager,
                    force: w.force,
                    body,
                    error,
                    step,
                });
            }
            Asked::Event(event) => {
                if answer.is_ok() {
                    tape.events.push(event);
                }
            }
        }
    }
}

impl Call {
    /// Every import's last step: notes `answer` on the call's tape if it is recorded, and hands
    /// it back for the guest.
    pub(crate) fn answered<T: Answer>(
        self,
        state: &mut HostState,
        answer: Result<T, GuestError>,
    ) -> Result<T, GuestError> {
        if let Some(asked) = self.asked {
            state.note(asked, answer.as_ref());
        }
        answer
    }
}

/// A list's options as one line of a recording: selector, field matches, page.
fn query_of(options: &ListOptions) -> String {
    let mut parts = Vec::new();
    if !options.label_selector.is_empty() {
        parts.push(format!("labels={}", options.label_selector));
    }
    for (f, v) in &options.fields {
        parts.push(format!("{f}={v}"));
    }
    if options.limit > 0 {
        parts.push(format!("limit={}", options.limit));
    }
    if !options.continue_token.is_empty() {
        parts.push(format!("continue={}", options.continue_token));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::bindings::reconciled::runtime::client::ApplyPatch;
    use crate::guest::imports::Limits;

    /// The state of one call of a guest that is taped (`taped`) or not.
    fn state(taped: bool) -> HostState {
        let ctx = GuestContext::unconnected(taped);
        HostState::new(Some(Arc::new(ctx)), Limits::default())
    }

    fn cm() -> Gvk {
        Gvk::new("", "v1", "ConfigMap")
    }

    fn object(name: &str) -> String {
        format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}}}}"#)
    }

    #[tokio::test]
    async fn a_taped_call_notes_what_it_asked_and_was_answered_in_order() {
        let mut s = state(true);
        let (_, call) = s
            .enter_noted(|| Asked::get("cache.get", &cm(), "ns", "a"))
            .unwrap();
        let _ = call.answered(&mut s, Ok(object("a")));
        let options = ListOptions {
            namespace: "ns".into(),
            label_selector: "app=web".into(),
            fields: Vec::new(),
            limit: 10,
            continue_token: String::new(),
        };
        let (_, call) = s
            .enter_noted(|| Asked::list("api.list", &cm(), &options))
            .unwrap();
        let page = ListPage {
            items: vec![object("a"), object("b")],
            continue_token: String::new(),
        };
        let _ = call.answered(&mut s, Ok(page));
        let (_, call) = s
            .enter_noted(|| Asked::write("create", &cm(), "ns", &object("c"), false))
            .unwrap();
        let _ = call.answered(&mut s, Ok(object("c")));
        let apply = Patch::Apply(ApplyPatch {
            body: object("d"),
            field_manager: "me".into(),
            force: true,
        });
        let (_, call) = s
            .enter_noted(|| Asked::patch(&cm(), "ns", "d", &apply, false))
            .unwrap();
        let refused: Result<String, _> = Err(GuestError::Conflict("held".into()));
        let _ = call.answered(&mut s, refused);

        let tape = s.tape.as_ref().unwrap();
        let reads: Vec<(&str, &str, usize, u32)> = (tape.reads.iter())
            .map(|r| (r.op.as_str(), r.query.as_str(), r.objects.len(), r.step))
            .collect();
        assert_eq!(
            reads,
            [
                ("cache.get", "", 1, 1),
                ("api.list", "labels=app=web limit=10", 2, 2)
            ]
        );
        let writes: Vec<String> = (tape.writes.iter())
            .map(|w| {
                let manager = w.field_manager.as_deref().unwrap_or("-");
                let error = w.error.as_deref().unwrap_or("-");
                format!("{} {} {manager} {error} {}", w.verb, w.name, w.step)
            })
            .collect();
        assert_eq!(
            writes,
            ["create c - - 3", "apply d me conflict 4"],
            "a create is named by its body; a refused write is noted with how it was refused"
        );
    }

    #[tokio::test]
    async fn an_event_is_noted_only_once_recorded_and_takes_no_step() {
        let mut s = state(true);
        for answer in [Err(GuestError::Forbidden("no".into())), Ok(())] {
            let asked = || Asked::event(&cm(), "ns", "a", EventType::Warning, "Broken", "it broke");
            let (_, call) = s.enter_noted(asked).unwrap();
            let _ = call.answered(&mut s, answer);
        }
        let tape = s.tape.as_ref().unwrap();
        let events: Vec<(&str, &str)> = (tape.events.iter())
            .map(|e| (e.type_.as_str(), e.regarding.as_str()))
            .collect();
        assert_eq!(events, [("Warning", "ConfigMap ns/a")]);
        assert_eq!(tape.next_step(), 1, "Events are not steps of the call");
    }

    #[tokio::test]
    async fn a_call_not_taped_copies_nothing() {
        let mut s = state(false);
        let (_, call) = s
            .enter_noted(|| panic!("built what a call asked for a guest not taped"))
            .unwrap();
        assert_eq!(call.answered(&mut s, Ok(())), Ok(()));
        assert!(s.tape.is_none());
    }
}
