// Command minimal is the smallest Go guest: it reconciles ConfigMaps and writes nothing. The
// host's tests load it to check that a Go component links and runs.
package main

import "reconciled.dev/guest/reconciled"

var configMaps = reconciled.NewKind[reconciled.Object]("", "v1", "ConfigMap")

type minimal struct{}

func (minimal) Describe() reconciled.Description {
	return reconciled.Describe(configMaps)
}

func (minimal) Reconcile(reconciled.Request) (reconciled.Outcome, error) {
	return reconciled.Done(), nil
}

func init() { reconciled.Export(minimal{}) }

func main() {}
