//! The guest's own spans in the host's traces (WIT 0.1.3): each a child of the innermost span
//! still open, else of the reconcile's, so that a slow reconcile shows which part of the
//! guest's code was slow.
//!
//! Where it may surprise:
//! - A span ends when its [`Span`] drops (or with [`Span::fail`]); closing one also closes the
//!   spans opened inside it that are still open, and whatever is open when `reconcile` returns
//!   ends then.
//! - Tracing never fails a reconcile: past the host's limits (64 spans a call, 32 attributes a
//!   span) or with the host's traces off, a span is opened as a no-op.
//! - A module that uses this needs a host serving `reconciled:runtime@0.1.3` or later; an older
//!   host refuses it at load, naming both versions.

use std::fmt::Display;

use crate::bindings::reconciled::runtime::trace as raw;

/// An open span of the guest's; ends when dropped.
#[derive(Debug)]
#[must_use = "a span ends when dropped: bind it to a variable that lives as long as the work"]
pub struct Span {
    /// The host's handle; 0 names no span (every call then does nothing).
    handle: u32,
}

impl Span {
    /// Opens a span named `name`, a child of the innermost span still open.
    pub fn open(name: &str) -> Span {
        Span {
            handle: raw::open(name),
        }
    }

    /// Sets attribute `key` to `value`, shown with the span.
    pub fn attribute(&self, key: &str, value: impl Display) -> &Self {
        if self.handle != 0 {
            raw::set_attribute(self.handle, key, &value.to_string());
        }
        self
    }

    /// Ends the span marked failed, with `message`.
    pub fn fail(mut self, message: impl Display) {
        self.close(Some(message.to_string()));
    }

    fn close(&mut self, error: Option<String>) {
        if self.handle != 0 {
            raw::close(self.handle, error.as_deref());
            self.handle = 0;
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.close(None);
    }
}

/// Runs `f` in a span named `name`; the span is marked failed when `f` returns an error.
///
/// ```ignore
/// let rendered = reconciled_guest::in_span("render", |span| {
///     span.attribute("template", &name);
///     render(&template)
/// })?;
/// ```
pub fn in_span<T, E: Display>(
    name: &str,
    f: impl FnOnce(&Span) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let span = Span::open(name);
    let result = f(&span);
    match &result {
        Ok(_) => drop(span),
        Err(e) => span.fail(e),
    }
    result
}
