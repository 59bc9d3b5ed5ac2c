//go:build tools

// Package tools pins the jaeger command this module builds, so `go mod tidy` keeps its
// dependencies; testenv builds it like the control plane and caches it.
package tools

import (
	_ "github.com/jaegertracing/jaeger/cmd/jaeger"
)
