// Package cache reads from the host's shared cache: cheap, and by default they see this
// guest's own writes.
//
// The cache may be stale. With read-your-writes (the default), a read of an object this guest
// wrote waits, up to the host's timeout (5 s by default), for the cache to reach that write; if
// it does not, that read is a Timeout error and later reads no longer wait for it. Reading a
// kind not declared in Describe is a NotDeclared error, never NotFound.
package cache

import (
	"reconciled.dev/guest/internal/reader"
	"reconciled.dev/guest/reconciled"
)

// ListOptions says which objects a list returns: cache.ListOptions{}.InNamespace(ns).Labels(sel).
type ListOptions = reader.ListOptions

// Page is one page of a list: its objects, and the token of the next page.
type Page[T any] = reader.Page[T]

// Get reads namespace/name (namespace empty for a cluster-scoped kind); a missing object is a
// NotFound error.
func Get[T any](kind reconciled.Kind[T], namespace, name string) (*T, error) {
	return reader.Get(reader.Cache, kind, namespace, name)
}

// GetOpt reads namespace/name, or nil when it does not exist.
func GetOpt[T any](kind reconciled.Kind[T], namespace, name string) (*T, error) {
	return reader.GetOpt(reader.Cache, kind, namespace, name)
}

// List reads every object that matches options, page after page, sorted by namespace and name.
func List[T any](kind reconciled.Kind[T], options ListOptions) ([]T, error) {
	return reader.List(reader.Cache, kind, options)
}

// ListPage reads one page; pass its Continue to ListOptions.ContinueFrom for the next.
func ListPage[T any](kind reconciled.Kind[T], options ListOptions) (Page[T], error) {
	return reader.ListPage(reader.Cache, kind, options)
}
