//go:build tools

// Package tools pins the oras command this module builds (oras.land/oras), so `go mod tidy`
// keeps its dependencies; testenv builds it like the control plane and caches it.
package tools

import (
	_ "oras.land/oras/cmd/oras"
)
