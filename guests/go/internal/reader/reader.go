// Package reader is what the cache and api packages share: typed reads over a host source.
package reader

import (
	"reconciled.dev/guest/internal/host"
	"reconciled.dev/guest/internal/object"
	"reconciled.dev/guest/reconciled"
)

// ListOptions says which objects a list returns. The zero value is every object of the kind
// in every namespace the guest may read; each method returns a copy with one more condition.
type ListOptions struct {
	o host.ListOptions
}

// InNamespace limits the list to namespace (empty: every namespace the guest may read).
func (o ListOptions) InNamespace(namespace string) ListOptions {
	o.o.Namespace = namespace
	return o
}

// Labels limits the list to objects that match selector (Kubernetes label selector syntax).
func (o ListOptions) Labels(selector string) ListOptions {
	o.o.LabelSelector = selector
	return o
}

// Field limits the list to objects whose field at the dotted JSON path equals value. The path
// must be declared with Description.FieldIndex (metadata.name and metadata.namespace need
// none), else the list is an UnindexedField error.
func (o ListOptions) Field(path, value string) ListOptions {
	o.o.Fields = append(o.o.Fields[:len(o.o.Fields):len(o.o.Fields)], [2]string{path, value})
	return o
}

// Limit sets the page size (0: the host's default; the host caps it).
func (o ListOptions) Limit(n uint32) ListOptions {
	o.o.Limit = n
	return o
}

// ContinueFrom starts the list at the page a previous page's continue token names.
func (o ListOptions) ContinueFrom(token string) ListOptions {
	o.o.ContinueToken = token
	return o
}

// Page is one page of a list.
type Page[T any] struct {
	// Items are the page's objects, sorted by namespace and name.
	Items []T
	// Continue is the token for the next page; empty when this was the last.
	Continue string
}

// Source is where reads go: the cache or the API server.
type Source struct {
	Get  func(h host.Host, kind host.Gvk, namespace, name string) (string, error)
	List func(h host.Host, kind host.Gvk, options host.ListOptions) (host.Page, error)
}

// Cache reads from the host's cache.
var Cache = Source{
	Get:  host.Host.CacheGet,
	List: host.Host.CacheList,
}

// API reads from the API server.
var API = Source{
	Get:  host.Host.APIGet,
	List: host.Host.APIList,
}

func gvk(k reconciled.Gvk) host.Gvk { return host.Gvk(k) }

func decode[T any](kind reconciled.Gvk, data string) (*T, error) {
	v := new(T)
	if err := object.Decode([]byte(data), v); err != nil {
		return nil, reconciled.Errorf(reconciled.Invalid, "cannot decode a %s into %T: %v", kind.Kind, v, err)
	}
	return v, nil
}

// Get reads one object.
func Get[T any](s Source, kind reconciled.Kind[T], namespace, name string) (*T, error) {
	data, err := s.Get(host.Current, gvk(kind.GVK()), namespace, name)
	if err != nil {
		return nil, err
	}
	return decode[T](kind.GVK(), data)
}

// GetOpt reads one object, nil when it does not exist.
func GetOpt[T any](s Source, kind reconciled.Kind[T], namespace, name string) (*T, error) {
	v, err := Get(s, kind, namespace, name)
	if reconciled.IsNotFound(err) {
		return nil, nil
	}
	return v, err
}

// ListPage reads one page.
func ListPage[T any](s Source, kind reconciled.Kind[T], options ListOptions) (Page[T], error) {
	p, err := s.List(host.Current, gvk(kind.GVK()), options.o)
	if err != nil {
		return Page[T]{}, err
	}
	items := make([]T, 0, len(p.Items))
	for _, item := range p.Items {
		v, err := decode[T](kind.GVK(), item)
		if err != nil {
			return Page[T]{}, err
		}
		items = append(items, *v)
	}
	return Page[T]{Items: items, Continue: p.ContinueToken}, nil
}

// List reads every page.
func List[T any](s Source, kind reconciled.Kind[T], options ListOptions) ([]T, error) {
	var all []T
	for {
		p, err := ListPage(s, kind, options)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Items...)
		if p.Continue == "" {
			return all, nil
		}
		options = options.ContinueFrom(p.Continue)
	}
}
