package reconciled

import (
	"fmt"

	"reconciled.dev/guest/internal/host"
)

// Span is a span of the guest's own in the host's traces (WIT 0.1.3): a child of the innermost
// span still open, else of the reconcile's. End it with End or Fail (usually deferred); ending
// one also ends the spans opened inside it, and whatever is open when Reconcile returns ends
// then. Tracing never fails a reconcile: past the host's limits (64 spans a call, 32 attributes
// a span) or with the host's traces off, the span does nothing.
type Span struct {
	// handle is the host's; 0 names no span.
	handle uint32
}

// OpenSpan opens a span named name.
func OpenSpan(name string) *Span {
	return &Span{handle: host.Current.SpanOpen(name)}
}

// Attribute sets attribute key to value (formatted with %v), shown with the span.
func (s *Span) Attribute(key string, value any) *Span {
	if s.handle != 0 {
		host.Current.SpanSetAttribute(s.handle, key, fmt.Sprint(value))
	}
	return s
}

// End ends the span; a second End (or an End after Fail) does nothing.
func (s *Span) End() {
	s.close(nil)
}

// Fail ends the span marked failed, with message.
func (s *Span) Fail(message string) {
	s.close(&message)
}

func (s *Span) close(failure *string) {
	if s.handle != 0 {
		host.Current.SpanClose(s.handle, failure)
		s.handle = 0
	}
}

// InSpan runs f in a span named name, ended when f returns and marked failed (with the
// error's message) when f returns an error, which InSpan returns.
func InSpan(name string, f func(span *Span) error) error {
	span := OpenSpan(name)
	if err := f(span); err != nil {
		span.Fail(err.Error())
		return err
	}
	span.End()
	return nil
}
