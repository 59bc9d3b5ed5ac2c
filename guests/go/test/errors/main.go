// Command errors is a test guest: its reconcile fails, so that tests see what reaches the host.
// A ConfigMap named `conflict` gets a Conflict error, one named `plain` a plain Go error (which
// the SDK reports as `other`, never a trap); anything else is done.
package main

import (
	"errors"

	"reconciled.dev/guest/reconciled"
)

var configMaps = reconciled.NewKind[reconciled.Object]("", "v1", "ConfigMap")

type failing struct{}

func (failing) Describe() reconciled.Description {
	return reconciled.Describe(configMaps)
}

func (failing) Reconcile(req reconciled.Request) (reconciled.Outcome, error) {
	switch req.Name {
	case "conflict":
		return reconciled.Done(), reconciled.Errorf(reconciled.Conflict, "thrown by the guest")
	case "plain":
		return reconciled.Done(), errors.New("a plain failure")
	default:
		return reconciled.Done(), nil
	}
}

func init() { reconciled.Export(failing{}) }

func main() {}
