//go:build wasip1

// Package export_wit_world is where the generated exports (package wit_exports) look for the
// world's exported functions; the generator leaves this package to the author. It hands each
// call to the reconciler the guest registered with the SDK's Export.
//
// Written by hand, not generated: build.sh's check that the bindings match wit/ skips it.
package export_wit_world

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"reconciled.dev/guest/internal/host"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_declaration"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_types"
	"reconciled.dev/guest/internal/wit/wit_world"
)

func guest() *host.Guest {
	if host.Exported == nil {
		panic("reconciled: no reconciler: call reconciled.Export(yourReconciler) in an init function of package main")
	}
	return host.Exported
}

func gvk(g host.Gvk) reconciled_runtime_types.Gvk {
	return reconciled_runtime_types.Gvk{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

// Describe is the export `describe`.
func Describe() reconciled_runtime_declaration.Description {
	d := guest().Describe()
	owns := make([]reconciled_runtime_types.Gvk, len(d.Owns))
	for i, k := range d.Owns {
		owns[i] = gvk(k)
	}
	watches := make([]reconciled_runtime_declaration.Watch, len(d.Watches))
	for i, w := range d.Watches {
		var mapping reconciled_runtime_declaration.Mapping
		switch w.Mapping {
		case 0:
			mapping = reconciled_runtime_declaration.MakeMappingOwner()
		case 1:
			mapping = reconciled_runtime_declaration.MakeMappingLabel(w.Label)
		default:
			mapping = reconciled_runtime_declaration.MakeMappingGuestMap()
		}
		watches[i] = reconciled_runtime_declaration.Watch{Kind: gvk(w.Kind), Mapping: mapping}
	}
	indexes := make([]reconciled_runtime_declaration.FieldIndex, len(d.FieldIndexes))
	for i, f := range d.FieldIndexes {
		indexes[i] = reconciled_runtime_declaration.FieldIndex{Kind: gvk(f.Kind), Path: f.Path}
	}
	consistency := reconciled_runtime_declaration.ConsistencyReadYourWrites
	if d.Eventual {
		consistency = reconciled_runtime_declaration.ConsistencyEventual
	}
	namespaces := d.Namespaces
	if namespaces == nil {
		namespaces = []string{}
	}
	return reconciled_runtime_declaration.Description{
		For:           gvk(d.For),
		Owns:          owns,
		Watches:       watches,
		Namespaces:    namespaces,
		LabelSelector: d.LabelSelector,
		FieldIndexes:  indexes,
		Consistency:   consistency,
	}
}

// Reconcile is the export `reconcile`.
func Reconcile(request reconciled_runtime_types.Request) witTypes.Result[wit_world.Outcome, reconciled_runtime_types.Error] {
	outcome, failure := guest().Reconcile(request.Namespace, request.Name)
	if failure != nil {
		return witTypes.Err[wit_world.Outcome](witError(failure))
	}
	if outcome.Requeue {
		return witTypes.Ok[wit_world.Outcome, reconciled_runtime_types.Error](wit_world.MakeOutcomeRequeueAfter(outcome.RequeueAfterMs))
	}
	return witTypes.Ok[wit_world.Outcome, reconciled_runtime_types.Error](wit_world.MakeOutcomeDone())
}

// Map is the export `map`.
func Map(kind reconciled_runtime_types.Gvk, object string) []reconciled_runtime_types.Request {
	g := guest()
	if g.Map == nil {
		return []reconciled_runtime_types.Request{}
	}
	keys := g.Map(host.Gvk{Group: kind.Group, Version: kind.Version, Kind: kind.Kind}, object)
	requests := make([]reconciled_runtime_types.Request, len(keys))
	for i, k := range keys {
		requests[i] = reconciled_runtime_types.Request{Namespace: k[0], Name: k[1]}
	}
	return requests
}

func witError(f *host.Failure) reconciled_runtime_types.Error {
	switch f.Tag {
	case reconciled_runtime_types.ErrorNotFound:
		return reconciled_runtime_types.MakeErrorNotFound(f.Message)
	case reconciled_runtime_types.ErrorConflict:
		return reconciled_runtime_types.MakeErrorConflict(f.Message)
	case reconciled_runtime_types.ErrorForbidden:
		return reconciled_runtime_types.MakeErrorForbidden(f.Message)
	case reconciled_runtime_types.ErrorInvalid:
		return reconciled_runtime_types.MakeErrorInvalid(f.Message)
	case reconciled_runtime_types.ErrorTooLarge:
		return reconciled_runtime_types.MakeErrorTooLarge(f.Message)
	case reconciled_runtime_types.ErrorNotDeclared:
		return reconciled_runtime_types.MakeErrorNotDeclared(f.Message)
	case reconciled_runtime_types.ErrorUnindexedField:
		return reconciled_runtime_types.MakeErrorUnindexedField(f.Message)
	case reconciled_runtime_types.ErrorTimeout:
		return reconciled_runtime_types.MakeErrorTimeout(f.Message)
	default:
		return reconciled_runtime_types.MakeErrorOther(f.Message)
	}
}
