package core

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// BenchmarkSetHeaders measures SetHeaders on a refused request, in each
// style: formatting the figures and filling the header map.
//
//	go test -run '^$' -bench SetHeaders -benchmem ./core
func BenchmarkSetHeaders(b *testing.B) {
	res := store.Result{Limit: 1000, RetryAfter: 2 * time.Second, ResetAfter: 30 * time.Second}
	st := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) { return res, nil }}
	now := time.Unix(1_700_000_000, 0)
	for name, style := range map[string]HeaderStyle{"legacy": HeadersLegacy, "ietf": HeadersIETF, "both": HeadersLegacy | HeadersIETF} {
		b.Run(name, func(b *testing.B) {
			l, err := New(st, "test", func(*http.Request) (string, error) { return "k", nil }, []store.Limit{store.PerMinute(1000)},
				WithHeaders(style), WithClock(func() time.Time { return now }))
			if err != nil {
				b.Fatal(err)
			}
			d := l.Decide(request("k"))
			h := make(http.Header, 8)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				d.setHeaders(h, nil)
			}
		})
	}
}
