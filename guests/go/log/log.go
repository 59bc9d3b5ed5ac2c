// Package log writes to the host's log, which adds the guest's name and the key being
// reconciled.
package log

import (
	"fmt"

	"reconciled.dev/guest/internal/host"
)

// Debug logs at debug level; its arguments are formatted as fmt.Sprint does.
func Debug(args ...any) { host.Current.Log(host.Debug, fmt.Sprint(args...)) }

// Debugf logs at debug level; its arguments are formatted as fmt.Sprintf does.
func Debugf(format string, args ...any) { host.Current.Log(host.Debug, fmt.Sprintf(format, args...)) }

// Info logs at info level, as fmt.Sprint.
func Info(args ...any) { host.Current.Log(host.Info, fmt.Sprint(args...)) }

// Infof logs at info level, as fmt.Sprintf.
func Infof(format string, args ...any) { host.Current.Log(host.Info, fmt.Sprintf(format, args...)) }

// Warn logs at warn level, as fmt.Sprint.
func Warn(args ...any) { host.Current.Log(host.Warn, fmt.Sprint(args...)) }

// Warnf logs at warn level, as fmt.Sprintf.
func Warnf(format string, args ...any) { host.Current.Log(host.Warn, fmt.Sprintf(format, args...)) }

// Error logs at error level, as fmt.Sprint.
func Error(args ...any) { host.Current.Log(host.Error, fmt.Sprint(args...)) }

// Errorf logs at error level, as fmt.Sprintf.
func Errorf(format string, args ...any) { host.Current.Log(host.Error, fmt.Sprintf(format, args...)) }
