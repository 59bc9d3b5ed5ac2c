//go:build tools

// Package tools pins the helm command this module builds (helm.sh/helm/v4), so `go mod tidy`
// keeps its dependencies; testenv builds it like the control plane and caches it.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
