package reconciled

// SetCondition sets c in *conditions, as apimachinery's meta.SetStatusCondition: a condition of
// a new type is appended; one of an existing type takes c's Status, Reason, Message and
// ObservedGeneration, and its LastTransitionTime moves (to c's, or now when c has none) only
// when the status changed. It reports whether anything changed, so that a status write can be
// skipped when nothing did.
func SetCondition(conditions *[]Condition, c Condition) bool {
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = Now()
	}
	for i := range *conditions {
		old := &(*conditions)[i]
		if old.Type != c.Type {
			continue
		}
		transition := old.Status != c.Status
		changed := transition || old.Reason != c.Reason || old.Message != c.Message ||
			old.ObservedGeneration != c.ObservedGeneration
		if !transition {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return changed
	}
	*conditions = append(*conditions, c)
	return true
}

// FindCondition is the condition of type t in conditions, or nil.
func FindCondition(conditions []Condition, t string) *Condition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

// IsConditionTrue reports whether the condition of type t is there with status True.
func IsConditionTrue(conditions []Condition, t string) bool {
	c := FindCondition(conditions, t)
	return c != nil && c.Status == ConditionTrue
}

// RemoveCondition removes the condition of type t from *conditions; it reports whether there
// was one.
func RemoveCondition(conditions *[]Condition, t string) bool {
	kept := (*conditions)[:0]
	for _, c := range *conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	removed := len(kept) != len(*conditions)
	*conditions = kept
	return removed
}
