// Command configmap-generator-go is the example reconciler in Go: a ConfigMapGenerator owns
// spec.copies ConfigMaps named <name>-<i>, each holding spec.data. The same reconciler as
// examples/configmap-generator (Rust), passing the same fixtures and end-to-end test.
//
// Reconcile, for one generator:
//  1. server-side apply ConfigMaps <name>-0 .. <name>-(copies-1), labelled generatorLabel=<name>
//     and controlled by the generator (so that deleting the generator deletes them, and a change
//     to one of them reconciles the generator);
//  2. delete the ones it controls with an index of copies or more;
//  3. if the status is out of date, apply it and record a Generated event.
package main

import (
	"fmt"
	"strconv"
	"strings"

	"reconciled.dev/guest/cache"
	"reconciled.dev/guest/client"
	"reconciled.dev/guest/events"
	"reconciled.dev/guest/log"
	"reconciled.dev/guest/reconciled"
)

// generatorLabel is on each generated ConfigMap; its value is the generator's name.
const generatorLabel = "example.reconciled.dev/generator"

// fieldManager is the server-side apply field manager.
const fieldManager = "configmap-generator"

// Generator is the custom resource (crd.yaml of examples/configmap-generator).
type Generator struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	Spec     GeneratorSpec         `json:"spec"`
	Status   *GeneratorStatus      `json:"status,omitempty"`
}

// GeneratorSpec is what to generate.
type GeneratorSpec struct {
	// Data is what every generated ConfigMap holds.
	Data map[string]string `json:"data"`
	// Copies is how many to generate; the CRD defaults it to 1 and forbids negatives.
	Copies *int32 `json:"copies,omitempty"`
}

// GeneratorStatus is what the last reconcile generated.
type GeneratorStatus struct {
	// Generated is how many ConfigMaps exist for the current spec.
	Generated int32 `json:"generated"`
	// ObservedGeneration is the metadata.generation the last reconcile acted on.
	ObservedGeneration int64 `json:"observedGeneration"`
}

// ConfigMap is the part of a v1 ConfigMap this reconciler writes and reads.
type ConfigMap struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	// Data is always sent, {} when empty, as the Rust example sends it.
	Data map[string]string `json:"data"`
}

var (
	generators = reconciled.NewKind[Generator]("example.reconciled.dev", "v1alpha1", "ConfigMapGenerator")
	configMaps = reconciled.NewKind[ConfigMap]("", "v1", "ConfigMap")
)

type generator struct{}

func (generator) Describe() reconciled.Description {
	return reconciled.Describe(generators).Owns(configMaps)
}

func (generator) Reconcile(req reconciled.Request) (reconciled.Outcome, error) {
	g, err := cache.GetOpt(generators, req.Namespace, req.Name)
	// Gone (the garbage collector deletes what it controlled), or going.
	if err != nil || g == nil || g.Metadata.DeletionTimestamp != nil {
		return reconciled.Done(), err
	}
	owner, err := reconciled.ControllerReference(g)
	if err != nil {
		return reconciled.Done(), err
	}
	copies := int32(1)
	if g.Spec.Copies != nil {
		copies = max(*g.Spec.Copies, 0)
	}
	data := g.Spec.Data
	if data == nil {
		data = map[string]string{}
	}

	// A span of its own in the host's traces, beside the host's spans for each write.
	err = reconciled.InSpan("apply copies", func(span *reconciled.Span) error {
		span.Attribute("copies", copies)
		for i := range copies {
			cm := &ConfigMap{
				Metadata: reconciled.ObjectMeta{
					Name:            fmt.Sprintf("%s-%d", req.Name, i),
					Namespace:       req.Namespace,
					Labels:          map[string]string{generatorLabel: req.Name},
					OwnerReferences: []reconciled.OwnerReference{owner},
				},
				Data: data,
			}
			if _, err := client.Apply(cm, fieldManager, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return reconciled.Done(), err
	}

	generated := cache.ListOptions{}.InNamespace(req.Namespace).Labels(generatorLabel + "=" + req.Name)
	cms, err := cache.List(configMaps, generated)
	if err != nil {
		return reconciled.Done(), err
	}
	for _, cm := range cms {
		i, ok := copyIndex(req.Name, cm.Metadata.Name)
		if !ok || i < copies || !reconciled.IsControlledBy(&cm, g) {
			continue
		}
		switch err := client.Delete(configMaps, req.Namespace, cm.Metadata.Name); {
		case err == nil:
			log.Infof("deleted %s/%s", req.Namespace, cm.Metadata.Name)
		case !reconciled.IsNotFound(err):
			return reconciled.Done(), err
		}
	}

	status := GeneratorStatus{Generated: copies, ObservedGeneration: g.Metadata.Generation}
	if g.Status != nil && *g.Status == status {
		return reconciled.Done(), nil
	}
	g.Status = &status
	if _, err := client.ApplyStatus(g, fieldManager, true); err != nil {
		return reconciled.Done(), err
	}
	// The status is written; a lost event is not worth a retry that would not resend it.
	if err := events.Normal(g, "Generated", fmt.Sprintf("generated %d ConfigMaps", copies)); err != nil {
		log.Warnf("cannot record event on %s/%s: %v", req.Namespace, req.Name, err)
	}
	return reconciled.Done(), nil
}

// copyIndex is i for a ConfigMap named <generator>-<i>.
func copyIndex(generator, configMap string) (int32, bool) {
	rest, ok := strings.CutPrefix(configMap, generator+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(rest, 10, 32)
	return int32(i), err == nil
}

func init() { reconciled.Export(generator{}) }

func main() {}
