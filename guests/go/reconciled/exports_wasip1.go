//go:build wasip1

package reconciled

// The component's exports (describe, reconcile, map) are //go:wasmexport functions in the
// generated package; importing it here links them into every guest.
import _ "reconciled.dev/guest/internal/wit/wit_exports"
