//go:build wasip1

package host

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"reconciled.dev/guest/internal/wit/reconciled_runtime_api"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_cache"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_client"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_log"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_settings"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_trace"
	"reconciled.dev/guest/internal/wit/reconciled_runtime_types"
)

func init() {
	Current = imports{}
}

// imports is the Host of a component: the generated bindings of the WIT imports.
type imports struct{}

func gvk(g Gvk) reconciled_runtime_types.Gvk {
	return reconciled_runtime_types.Gvk{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

// failure turns a WIT error into the SDK's error.
func failure(e reconciled_runtime_types.Error) error {
	tag := e.Tag()
	var message string
	switch tag {
	case reconciled_runtime_types.ErrorNotFound:
		message = e.NotFound()
	case reconciled_runtime_types.ErrorConflict:
		message = e.Conflict()
	case reconciled_runtime_types.ErrorForbidden:
		message = e.Forbidden()
	case reconciled_runtime_types.ErrorInvalid:
		message = e.Invalid()
	case reconciled_runtime_types.ErrorTooLarge:
		message = e.TooLarge()
	case reconciled_runtime_types.ErrorNotDeclared:
		message = e.NotDeclared()
	case reconciled_runtime_types.ErrorUnindexedField:
		message = e.UnindexedField()
	case reconciled_runtime_types.ErrorTimeout:
		message = e.Timeout()
	default:
		message = e.Other()
	}
	return NewError(tag, message)
}

func text(r witTypes.Result[string, reconciled_runtime_types.Error]) (string, error) {
	if r.Tag() == witTypes.ResultErr {
		return "", failure(r.Err())
	}
	return r.Ok(), nil
}

func unit(r witTypes.Result[witTypes.Unit, reconciled_runtime_types.Error]) error {
	if r.Tag() == witTypes.ResultErr {
		return failure(r.Err())
	}
	return nil
}

func listOptions(o ListOptions) reconciled_runtime_cache.ListOptions {
	fields := make([]witTypes.Tuple2[string, string], len(o.Fields))
	for i, f := range o.Fields {
		fields[i] = witTypes.Tuple2[string, string]{F0: f[0], F1: f[1]}
	}
	return reconciled_runtime_cache.ListOptions{
		Namespace:     o.Namespace,
		LabelSelector: o.LabelSelector,
		Fields:        fields,
		Limit:         o.Limit,
		ContinueToken: o.ContinueToken,
	}
}

func page(r witTypes.Result[reconciled_runtime_cache.ListPage, reconciled_runtime_types.Error]) (Page, error) {
	if r.Tag() == witTypes.ResultErr {
		return Page{}, failure(r.Err())
	}
	p := r.Ok()
	return Page{Items: p.Items, ContinueToken: p.ContinueToken}, nil
}

func patchBody(p Patch) reconciled_runtime_client.PatchBody {
	switch p.Type {
	case Merge:
		return reconciled_runtime_client.MakePatchBodyMerge(p.Body)
	case JSON:
		return reconciled_runtime_client.MakePatchBodyJson(p.Body)
	default:
		return reconciled_runtime_client.MakePatchBodyApply(reconciled_runtime_client.ApplyPatch{
			Body:         p.Body,
			FieldManager: p.FieldManager,
			Force:        p.Force,
		})
	}
}

func (imports) CacheGet(kind Gvk, namespace, name string) (string, error) {
	return text(reconciled_runtime_cache.Get(gvk(kind), namespace, name))
}

func (imports) CacheList(kind Gvk, options ListOptions) (Page, error) {
	return page(reconciled_runtime_cache.List(gvk(kind), listOptions(options)))
}

func (imports) APIGet(kind Gvk, namespace, name string) (string, error) {
	return text(reconciled_runtime_api.Get(gvk(kind), namespace, name))
}

func (imports) APIList(kind Gvk, options ListOptions) (Page, error) {
	return page(reconciled_runtime_api.List(gvk(kind), listOptions(options)))
}

func (imports) Create(kind Gvk, namespace, object string) (string, error) {
	return text(reconciled_runtime_client.Create(gvk(kind), namespace, object))
}

func (imports) Update(kind Gvk, namespace, object string) (string, error) {
	return text(reconciled_runtime_client.Update(gvk(kind), namespace, object))
}

func (imports) Patch(kind Gvk, namespace, name string, patch Patch) (string, error) {
	return text(reconciled_runtime_client.Patch(gvk(kind), namespace, name, patchBody(patch)))
}

func (imports) Delete(kind Gvk, namespace, name string) error {
	return unit(reconciled_runtime_client.Delete(gvk(kind), namespace, name))
}

func (imports) UpdateStatus(kind Gvk, namespace, object string) (string, error) {
	return text(reconciled_runtime_client.UpdateStatus(gvk(kind), namespace, object))
}

func (imports) PatchStatus(kind Gvk, namespace, name string, patch Patch) (string, error) {
	return text(reconciled_runtime_client.PatchStatus(gvk(kind), namespace, name, patchBody(patch)))
}

func (imports) RecordEvent(regarding Gvk, namespace, name string, warning bool, reason, message string) error {
	eventType := reconciled_runtime_client.EventTypeNormal
	if warning {
		eventType = reconciled_runtime_client.EventTypeWarning
	}
	return unit(reconciled_runtime_client.RecordEvent(gvk(regarding), namespace, name, eventType, reason, message))
}

func (imports) Log(level Level, message string) {
	reconciled_runtime_log.Log(reconciled_runtime_log.Level(level), message)
}

func (imports) Settings() string {
	return reconciled_runtime_settings.Get()
}

func (imports) SpanOpen(name string) uint32 {
	return reconciled_runtime_trace.Open(name)
}

func (imports) SpanSetAttribute(span uint32, key, value string) {
	reconciled_runtime_trace.SetAttribute(span, key, value)
}

func (imports) SpanClose(span uint32, failure *string) {
	if failure == nil {
		reconciled_runtime_trace.Close(span, witTypes.None[string]())
		return
	}
	reconciled_runtime_trace.Close(span, witTypes.Some(*failure))
}
