// Package api reads from the API server itself, uncached: only when the operator granted it,
// and counted against the reconcile's budget. The same calls as package cache.
package api

import (
	"reconciled.dev/guest/cache"
	"reconciled.dev/guest/internal/reader"
	"reconciled.dev/guest/reconciled"
)

// Get reads namespace/name from the API server; a missing object is a NotFound error.
func Get[T any](kind reconciled.Kind[T], namespace, name string) (*T, error) {
	return reader.Get(reader.API, kind, namespace, name)
}

// GetOpt reads namespace/name from the API server, or nil when it does not exist.
func GetOpt[T any](kind reconciled.Kind[T], namespace, name string) (*T, error) {
	return reader.GetOpt(reader.API, kind, namespace, name)
}

// List reads every object that matches options from the API server, page after page.
func List[T any](kind reconciled.Kind[T], options cache.ListOptions) ([]T, error) {
	return reader.List(reader.API, kind, options)
}

// ListPage reads one page from the API server.
func ListPage[T any](kind reconciled.Kind[T], options cache.ListOptions) (cache.Page[T], error) {
	return reader.ListPage(reader.API, kind, options)
}
