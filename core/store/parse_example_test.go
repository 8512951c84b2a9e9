package store_test

import (
	"fmt"

	"github.com/sluicehq/sluice/core/store"
)

func ExampleParseLimit() {
	for _, s := range []string{"100/m", "10/s burst 20", "5000/h GCRA", "3/s leaky-bucket burst 5", "10/x"} {
		l, err := store.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %d per %v, burst %d, algorithm %q\n", l, l.Rate, l.Period, l.Burst, l.Algorithm)
	}
	// Output:
	// 100/m: 100 per 1m0s, burst 0, algorithm ""
	// 10/s burst 20: 10 per 1s, burst 20, algorithm ""
	// 5000/h gcra: 5000 per 1h0m0s, burst 0, algorithm "gcra"
	// 3/s leaky_bucket burst 5: 3 per 1s, burst 5, algorithm "leaky_bucket"
	// sluice: limit "10/x": unknown period unit "x" (want s, m, h, d, a long name like "minute", or a duration like "10s")
}
