package reconciled

// Changed is what client.CreateOrUpdate or client.ApplyIfChanged did.
type Changed uint8

// What a write that compares first did.
const (
	// Unchanged: the object already was as wanted; nothing was written.
	Unchanged Changed = iota
	// Created: there was no such object; it was created.
	Created
	// Updated: the object differed; it was written.
	Updated
)

// String is "unchanged", "created" or "updated".
func (c Changed) String() string {
	switch c {
	case Created:
		return "created"
	case Updated:
		return "updated"
	default:
		return "unchanged"
	}
}
