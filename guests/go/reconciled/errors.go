package reconciled

import (
	"errors"
	"fmt"

	"reconciled.dev/guest/internal/host"
)

// ErrorCase is a case of the WIT `error` variant: what went wrong, to match on (the message is
// for people).
type ErrorCase uint8

// The cases of the WIT `error` variant, in its order.
const (
	// NotFound: the object does not exist (in the cache, or on the API server for writes).
	NotFound ErrorCase = iota
	// Conflict: the write lost a race; the object changed since it was read (HTTP 409).
	Conflict
	// Forbidden: RBAC (the host's own, or the guest's grant) denies this.
	Forbidden
	// Invalid: the API server rejected the object (HTTP 400 or 422), or the arguments are
	// malformed (a name, namespace, kind, selector, field path, body, field manager or event
	// reason that Kubernetes would refuse).
	Invalid
	// TooLarge: the answer would exceed this reconcile's byte budget, or the request is too big.
	TooLarge
	// NotDeclared: the kind was not declared in Describe.
	NotDeclared
	// UnindexedField: a field match names a field without a declared index.
	UnindexedField
	// Timeout: a bounded wait ran out, e.g. read-your-writes waiting for the cache.
	Timeout
	// Other: anything else, e.g. the cache not synced yet or an API server that fails.
	Other
)

var caseNames = [...]string{
	"not-found", "conflict", "forbidden", "invalid", "too-large", "not-declared",
	"unindexed-field", "timeout", "other",
}

// String is the case's WIT name: "not-found", "unindexed-field", ...
func (c ErrorCase) String() string {
	if int(c) < len(caseNames) {
		return caseNames[c]
	}
	return fmt.Sprintf("ErrorCase(%d)", uint8(c))
}

// Error is the WIT `error`: a case and a message. Every error the host answers with is an
// *Error; so is every error the SDK makes. A reconcile that returns one reports its case to
// the host; any other error is reported as [Other].
type Error struct {
	// Case is what went wrong.
	Case ErrorCase
	// Message says it for people.
	Message string
}

// Error is "<case>: <message>".
func (e *Error) Error() string {
	return e.Case.String() + ": " + e.Message
}

// Errorf makes an *Error of case c, its message formatted as fmt.Sprintf does.
func Errorf(c ErrorCase, format string, args ...any) *Error {
	return &Error{Case: c, Message: fmt.Sprintf(format, args...)}
}

// CaseOf is the case of err, or of the first *Error it wraps; ok is false when there is none.
func CaseOf(err error) (c ErrorCase, ok bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Case, true
	}
	return 0, false
}

func is(err error, c ErrorCase) bool {
	got, ok := CaseOf(err)
	return ok && got == c
}

// IsNotFound reports whether err is (or wraps) a [NotFound] error.
func IsNotFound(err error) bool { return is(err, NotFound) }

// IsConflict reports whether err is (or wraps) a [Conflict] error.
func IsConflict(err error) bool { return is(err, Conflict) }

// IsForbidden reports whether err is (or wraps) a [Forbidden] error.
func IsForbidden(err error) bool { return is(err, Forbidden) }

// IsInvalid reports whether err is (or wraps) an [Invalid] error.
func IsInvalid(err error) bool { return is(err, Invalid) }

// IsTooLarge reports whether err is (or wraps) a [TooLarge] error.
func IsTooLarge(err error) bool { return is(err, TooLarge) }

// IsNotDeclared reports whether err is (or wraps) a [NotDeclared] error.
func IsNotDeclared(err error) bool { return is(err, NotDeclared) }

// IsUnindexedField reports whether err is (or wraps) an [UnindexedField] error.
func IsUnindexedField(err error) bool { return is(err, UnindexedField) }

// IsTimeout reports whether err is (or wraps) a [Timeout] error.
func IsTimeout(err error) bool { return is(err, Timeout) }

// failure is err as the host takes it: its case (Other for a plain error) and a message.
// A wrapped *Error keeps its case, and the message is the whole chain's text.
func failure(err error) *host.Failure {
	var e *Error
	if !errors.As(err, &e) {
		return &host.Failure{Tag: uint8(Other), Message: err.Error()}
	}
	if e == err {
		return &host.Failure{Tag: uint8(e.Case), Message: e.Message}
	}
	return &host.Failure{Tag: uint8(e.Case), Message: err.Error()}
}

func init() {
	host.NewError = func(tag uint8, message string) error {
		return &Error{Case: ErrorCase(tag), Message: message}
	}
}
