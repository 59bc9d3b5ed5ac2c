//! `trace` interface (since 0.1.3): the guest's own spans, each a child of the innermost one of
//! the call still open, else of the host's span for the call (the reconcile's).
//!
//! Where it may surprise:
//! - A handle is the span's number in its call, from 1; 0 names no span (`open` past the limit,
//!   or with traces off) and every function ignores it, as it ignores a closed or unknown one:
//!   a guest's tracing never fails its reconcile.
//! - Spans still open when the call returns end with it (the state holding them is dropped, or
//!   reset for a kept instance's next call).
//! - The host's spans for the imports a guest calls (`cache`, `api`, `wait`) stay children of
//!   the reconcile's span, beside the guest's spans rather than inside them: a trace viewer
//!   still lays them out in time within the guest span that was open.

use opentelemetry::trace::Status;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::guest::bindings::reconciled::runtime::trace::Host;
use crate::guest::imports::HostState;

/// Longest span name kept, in bytes.
const MAX_NAME: usize = 128;
/// Longest attribute key kept, in bytes.
const MAX_KEY: usize = 64;
/// Longest attribute value or error message kept, in bytes.
const MAX_VALUE: usize = 1024;
/// Most spans one call may open.
pub(crate) const MAX_SPANS: u32 = 64;
/// Most attributes set on one span.
const MAX_ATTRIBUTES: u32 = 32;

/// The spans a call has open, innermost last.
#[derive(Debug, Default)]
pub struct Spans {
    open: Vec<Open>,
    /// Spans opened in this call, closed ones included: the last handle given.
    opened: u32,
}

#[derive(Debug)]
struct Open {
    handle: u32,
    span: tracing::Span,
    attributes: u32,
}

impl Spans {
    /// The parent of the next span opened: the innermost one still open, else the current
    /// span (the reconcile's).
    fn parent(&self) -> tracing::Span {
        self.open
            .last()
            .map_or_else(tracing::Span::current, |o| o.span.clone())
    }

    /// Closes every span, for a kept instance's next call.
    pub fn clear(&mut self) {
        self.open.clear();
        self.opened = 0;
    }

    /// Opens a span named `name` under [`Spans::parent`]: its handle, or 0 past the limit or
    /// when nothing records spans.
    fn open(&mut self, guest: &str, name: &str) -> u32 {
        if self.opened >= MAX_SPANS {
            return 0;
        }
        let parent = self.parent();
        let name = cut(name, MAX_NAME);
        let span =
            tracing::info_span!(parent: &parent, "guest_span", otel.name = %name, guest = %guest);
        if span.is_disabled() {
            return 0;
        }
        self.opened += 1;
        self.open.push(Open {
            handle: self.opened,
            span,
            attributes: 0,
        });
        self.opened
    }

    fn set_attribute(&mut self, handle: u32, key: &str, value: &str) {
        let Some(o) = self.open.iter_mut().find(|o| o.handle == handle) else {
            return;
        };
        if o.attributes >= MAX_ATTRIBUTES {
            return;
        }
        o.attributes += 1;
        o.span
            .set_attribute(cut(key, MAX_KEY), cut(value, MAX_VALUE));
    }

    /// Closes `handle` and every span opened inside it; `error` marks it failed.
    fn close(&mut self, handle: u32, error: Option<&str>) {
        let Some(at) = self.open.iter().position(|o| o.handle == handle) else {
            return;
        };
        // Dropping a span ends it; the inner ones first, as they would have ended.
        while self.open.len() > at + 1 {
            self.open.pop();
        }
        let closed = self.open.pop().expect("the span found above");
        if let Some(message) = error {
            closed
                .span
                .set_status(Status::error(cut(message, MAX_VALUE)));
        }
    }

    #[cfg(test)]
    fn handles(&self) -> Vec<u32> {
        self.open.iter().map(|o| o.handle).collect()
    }
}

/// `text` cut to at most `max` bytes at a character boundary, on one line: a guest must not
/// forge lines in whatever shows the span.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    crate::text::one_line(&text[..end])
}

impl Host for HostState {
    async fn open(&mut self, name: String) -> wasmtime::Result<u32> {
        let ctx = self.enter()?;
        Ok(self.spans.open(&ctx.name, &name))
    }

    async fn set_attribute(
        &mut self,
        span: u32,
        key: String,
        value: String,
    ) -> wasmtime::Result<()> {
        self.enter()?;
        self.spans.set_attribute(span, &key, &value);
        Ok(())
    }

    async fn close(&mut self, span: u32, error: Option<String>) -> wasmtime::Result<()> {
        self.enter()?;
        self.spans.close(span, error.as_deref());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans are recorded only under a subscriber that wants them.
    fn recorded<T>(f: impl FnOnce() -> T) -> T {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, f)
    }

    #[test]
    fn spans_nest_close_with_their_inner_ones_and_ignore_unknown_handles() {
        recorded(|| {
            let mut s = Spans::default();
            let outer = s.open("g", "outer");
            let inner = s.open("g", "inner");
            let innermost = s.open("g", "innermost");
            assert_eq!((outer, inner, innermost), (1, 2, 3));
            s.close(inner, Some("failed"));
            assert_eq!(s.handles(), [outer], "closing inner closed innermost too");
            s.close(inner, None);
            s.close(0, None);
            s.close(99, None);
            s.set_attribute(99, "k", "v");
            assert_eq!(s.handles(), [outer]);
            s.close(outer, None);
            assert!(s.handles().is_empty());
        });
    }

    #[test]
    fn a_call_opens_at_most_its_limit_of_spans() {
        recorded(|| {
            let mut s = Spans::default();
            for i in 1..=MAX_SPANS {
                let h = s.open("g", "x");
                assert_eq!(h, i);
                s.close(h, None);
            }
            assert_eq!(s.open("g", "one too many"), 0);
            s.clear();
            assert_eq!(s.open("g", "next call"), 1, "a kept instance's next call");
        });
    }

    #[test]
    fn where_nothing_records_spans_nothing_is_opened() {
        let none = tracing::subscriber::NoSubscriber::default();
        tracing::subscriber::with_default(none, || {
            let mut s = Spans::default();
            assert_eq!(s.open("g", "x"), 0);
        });
    }

    #[test]
    fn names_keys_and_values_are_cut_on_a_character_boundary_to_one_line() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("a\nb", 10), crate::text::one_line("a\nb"));
        assert_eq!(cut(&"x".repeat(500), MAX_NAME).len(), MAX_NAME);
    }
}
