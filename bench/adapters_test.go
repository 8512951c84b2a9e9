package main

import "testing"

// BenchmarkAdapter serves requests through each HTTP adapter on a memory
// store and through the same handler bare; the difference is the adapter's
// cost.
//
//	go test -run '^$' -bench Adapter -benchmem
func BenchmarkAdapter(b *testing.B) {
	cases, err := adapterCases()
	if err != nil {
		b.Fatal(err)
	}
	reqs := keyRequests(makeKeys(1000))
	for _, c := range cases {
		b.Run(c.name+"/bare", func(b *testing.B) { benchHandler(b, c.bare, reqs) })
		b.Run(c.name+"/limited", func(b *testing.B) { benchHandler(b, c.limited, reqs) })
	}
}
