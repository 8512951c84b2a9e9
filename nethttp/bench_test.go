package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/nethttp"
)

// resetWriter is a reusable ResponseWriter, so that neither side of the
// comparison pays for a new recorder.
type resetWriter struct {
	h    http.Header
	code int
}

func (w *resetWriter) Header() http.Header         { return w.h }
func (w *resetWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *resetWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkMiddleware serves requests from 1000 clients (key from a
// header) bare and through the middleware on a memory store (GCRA, never
// denied); the difference is the middleware's cost per request.
//
//	go test -run '^$' -bench . -benchmem ./nethttp/
func BenchmarkMiddleware(b *testing.B) {
	l, err := core.New(memorystore.New(), "test", byHeader,
		[]store.Limit{{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 1_000_000}})
	if err != nil {
		b.Fatal(err)
	}
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
		reqs[i].Header.Set("X-Client", "client-"+strconv.Itoa(i))
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", final}, {"limited", nethttp.Middleware(l)(final)}} {
		b.Run(c.name, func(b *testing.B) {
			w := &resetWriter{h: make(http.Header, 8)}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				w.code = 0
				c.h.ServeHTTP(w, reqs[i%len(reqs)])
				if w.code != http.StatusOK {
					b.Fatalf("status %d on the allow path", w.code)
				}
			}
		})
	}
}
