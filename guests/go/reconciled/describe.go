package reconciled

import "reconciled.dev/guest/internal/host"

// Description is what a guest reconciles, reads and needs: [Reconciler.Describe]'s answer.
// Start one with [Describe]; each method returns a copy with one more thing declared.
//
// Defaults: read-your-writes consistency, every namespace the guest is granted, no label
// selector.
type Description struct {
	d host.Description
}

// Describe starts the description of a guest that reconciles kind (the primary kind: each of
// its objects is a reconcile's [Request]).
func Describe(kind Kinded) Description {
	return Description{d: host.Description{For: kind.GVK().host()}}
}

// Owns declares a kind the primary creates and controls: a change to one reconciles the
// primary named by its controller owner reference.
func (d Description) Owns(kind Kinded) Description {
	d.d.Owns = append(d.d.Owns[:len(d.d.Owns):len(d.d.Owns)], kind.GVK().host())
	return d
}

func (d Description) watch(w host.Watch) Description {
	d.d.Watches = append(d.d.Watches[:len(d.d.Watches):len(d.d.Watches)], w)
	return d
}

// WatchesOwner declares a kind mapped to the primary through its controller owner reference,
// without the primary owning it.
func (d Description) WatchesOwner(kind Kinded) Description {
	return d.watch(host.Watch{Kind: kind.GVK().host(), Mapping: 0})
}

// WatchesLabel declares a kind whose label key names the primary, in the same namespace.
func (d Description) WatchesLabel(kind Kinded, key string) Description {
	return d.watch(host.Watch{Kind: kind.GVK().host(), Mapping: 1, Label: key})
}

// WatchesGuestMap declares a kind that the guest's own Map (see [Mapper]) maps to primaries.
func (d Description) WatchesGuestMap(kind Kinded) Description {
	return d.watch(host.Watch{Kind: kind.GVK().host(), Mapping: 2})
}

// Namespaces limits the guest to these namespaces (by default, every namespace it is granted).
func (d Description) Namespaces(namespaces ...string) Description {
	d.d.Namespaces = append(d.d.Namespaces[:len(d.d.Namespaces):len(d.d.Namespaces)], namespaces...)
	return d
}

// LabelSelector limits the primaries to those that match selector (Kubernetes syntax).
func (d Description) LabelSelector(selector string) Description {
	d.d.LabelSelector = selector
	return d
}

// FieldIndex declares an index on the dotted JSON path of kind (e.g. "spec.nodeName"), so that
// cache lists can match it with ListOptions.Field.
func (d Description) FieldIndex(kind Kinded, path string) Description {
	d.d.FieldIndexes = append(d.d.FieldIndexes[:len(d.d.FieldIndexes):len(d.d.FieldIndexes)],
		host.FieldIndex{Kind: kind.GVK().host(), Path: path})
	return d
}

// Eventual makes cache reads plain and possibly stale, instead of waiting for this guest's own
// writes (read-your-writes, the default).
func (d Description) Eventual() Description {
	d.d.Eventual = true
	return d
}

func (d Description) host() host.Description { return d.d }
