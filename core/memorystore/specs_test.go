package memorystore_test

import "github.com/sluicehq/sluice/core/store"

// specs converts limits to the Specs a store receives; an invalid Limit
// becomes the zero Spec, which every store rejects with ErrInvalidLimit.
func specs(limits ...store.Limit) []store.Spec {
	out := make([]store.Spec, len(limits))
	for i, l := range limits {
		out[i], _ = l.Spec() // the zero Spec on error
	}
	return out
}
