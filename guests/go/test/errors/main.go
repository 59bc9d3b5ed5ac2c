// Command errors is a test guest in Go, for what must hold whatever the language.
//
// Errors: its reconcile fails, so that tests see what reaches the host. A ConfigMap named
// `conflict` gets a Conflict error, one named `plain` a plain Go error (which the SDK reports as
// `other`, never a trap).
//
// Isolation: a ConfigMap named `leak-*` gets annotation `probe.reconciled.dev/result` set to
// `v:<data.v> runs:<n> held:<m>`: how many reconciles this instance has run (a package-level
// counter) and how many blocks an earlier reconcile left in a package-level slice; it then
// leaves both marks behind (the counter bumped, a 4 MiB block held) for a next reconcile to
// find. A fresh instance per reconcile reports `runs:1 held:0` every time.
//
// Anything else is done.
package main

import (
	"errors"
	"fmt"
	"strings"

	"reconciled.dev/guest/cache"
	"reconciled.dev/guest/client"
	"reconciled.dev/guest/reconciled"
)

const result = "probe.reconciled.dev/result"

var configMaps = reconciled.NewKind[reconciled.Object]("", "v1", "ConfigMap")

var (
	runs int
	held [][]byte
)

func leaveMarks() string {
	runs++
	marks := fmt.Sprintf("runs:%d held:%d", runs, len(held))
	block := make([]byte, 4<<20)
	for i := range block {
		block[i] = 0xcd
	}
	held = append(held, block)
	return marks
}

type failing struct{}

func (failing) Describe() reconciled.Description {
	return reconciled.Describe(configMaps)
}

func (failing) Reconcile(req reconciled.Request) (reconciled.Outcome, error) {
	switch {
	case req.Name == "conflict":
		return reconciled.Done(), reconciled.Errorf(reconciled.Conflict, "thrown by the guest")
	case req.Name == "plain":
		return reconciled.Done(), errors.New("a plain failure")
	case strings.HasPrefix(req.Name, "leak-"):
		return leak(req)
	default:
		return reconciled.Done(), nil
	}
}

func leak(req reconciled.Request) (reconciled.Outcome, error) {
	marks := leaveMarks()
	cm, err := cache.GetOpt(configMaps, req.Namespace, req.Name)
	if err != nil || cm == nil {
		return reconciled.Done(), err
	}
	v := ""
	if data, ok := (*cm)["data"].(map[string]any); ok {
		v, _ = data["v"].(string)
	}
	record := fmt.Sprintf("v:%s %s", v, marks)
	if meta, ok := (*cm)["metadata"].(map[string]any); ok {
		if annotations, ok := meta["annotations"].(map[string]any); ok && annotations[result] == record {
			return reconciled.Done(), nil
		}
	}
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{result: record}}}
	_, err = client.MergePatch(configMaps, req.Namespace, req.Name, patch)
	return reconciled.Done(), err
}

func init() { reconciled.Export(failing{}) }

func main() {}
