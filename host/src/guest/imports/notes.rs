//! What the imports note on a recorded call's tape: each read with its answer, each write and
//! Event with how it was answered. Nothing is noted, or parsed, for a guest not recorded.

use crate::guest::bindings::reconciled::runtime::cache::{ListOptions, ListPage};
use crate::guest::bindings::{GuestError, Gvk};
use crate::guest::imports::HostState;
use crate::guest::tape::{self, Event, Read, Write};

/// A write's arguments, as [`HostState::note_write`] records them.
pub(crate) struct WriteNote<'a> {
    pub(crate) verb: &'a str,
    pub(crate) kind: &'a Gvk,
    pub(crate) namespace: &'a str,
    /// Empty for a create: the body's name is used.
    pub(crate) name: &'a str,
    pub(crate) status: bool,
    pub(crate) field_manager: Option<&'a str>,
    pub(crate) force: Option<bool>,
    pub(crate) body: Option<&'a str>,
}

impl<'a> WriteNote<'a> {
    /// A write of `verb` with no apply options and no status subresource.
    pub(crate) fn new(
        verb: &'a str,
        kind: &'a Gvk,
        namespace: &'a str,
        name: &'a str,
        body: Option<&'a str>,
    ) -> Self {
        Self {
            verb,
            kind,
            namespace,
            name,
            status: false,
            field_manager: None,
            force: None,
            body,
        }
    }
}

impl HostState {
    /// Notes a read: `op`, what it asked (`name` for a get, `query` for a list) and its answer.
    pub(crate) fn note_read<'t>(
        &mut self,
        op: &str,
        kind: &Gvk,
        namespace: &str,
        name: &str,
        query: String,
        answer: Result<impl Iterator<Item = &'t String>, &GuestError>,
    ) {
        let Some(tape) = &mut self.tape else {
            return;
        };
        let (objects, error) = match answer {
            Ok(items) => (
                items
                    .filter(|t| tape.room_for(t.len()))
                    .map(|t| tape::recorded(t, kind))
                    .collect(),
                None,
            ),
            Err(e) => (Vec::new(), Some(tape::error_case(e).0.to_string())),
        };
        let step = tape.next_step();
        tape.reads.push(Read {
            op: op.into(),
            kind: tape::kind_name(kind),
            namespace: namespace.into(),
            name: name.into(),
            query,
            objects,
            error,
            step,
        });
    }

    /// Notes a list (`op`: `cache.list` or `api.list`) and its page.
    pub(crate) fn note_list(
        &mut self,
        op: &str,
        kind: &Gvk,
        options: &ListOptions,
        answer: Result<&ListPage, &GuestError>,
    ) {
        if self.recording() {
            let query = query_of(options);
            let items = answer.map(|p| p.items.iter());
            self.note_read(op, kind, &options.namespace, "", query, items);
        }
    }

    /// Notes a write and how it was answered.
    pub(crate) fn note_write<T>(&mut self, w: WriteNote<'_>, answer: &Result<T, GuestError>) {
        let Some(tape) = &mut self.tape else {
            return;
        };
        let body = (w.body)
            .filter(|b| tape.room_for(b.len()))
            .map(|b| tape::shown(&tape::recorded(b, w.kind)));
        let name = match (w.name, &body) {
            ("", Some(b)) => b["metadata"]["name"].as_str().unwrap_or("").to_string(),
            (n, _) => n.to_string(),
        };
        let step = tape.next_step();
        tape.writes.push(Write {
            verb: w.verb.into(),
            kind: tape::kind_name(w.kind),
            namespace: w.namespace.into(),
            name,
            subresource: w.status.then(|| "status".into()),
            field_manager: w.field_manager.map(Into::into),
            force: w.force,
            body,
            error: answer
                .as_ref()
                .err()
                .map(|e| tape::error_case(e).0.to_string()),
            step,
        });
    }

    /// Notes an Event the guest recorded successfully.
    pub(crate) fn note_event(&mut self, event: Event) {
        if let Some(tape) = &mut self.tape {
            tape.events.push(event);
        }
    }

    /// Whether this call is recorded.
    pub(crate) fn recording(&self) -> bool {
        self.tape.is_some()
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
