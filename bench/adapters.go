package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// adapterCase is one HTTP adapter: the same final handler (or router with
// one route) served bare and behind sluice's middleware on a memory store
// (GCRA, allow quota). Every adapter shares one Limiter.
type adapterCase struct {
	name    string
	bare    http.Handler
	limited http.Handler
}

// adapterResult is the adapter's cost over the bare handler, per request.
type adapterResult struct {
	name                     string
	bareNs, limitedNs        float64
	bareAllocs, limitedAlloc int64
}

// newBenchLimiter is the adapters' Limiter: GCRA on the memory store,
// keyed by the X-Key header with the library's key function.
func newBenchLimiter() (*core.Limiter, error) {
	key, err := keyfuncs.Header("X-Key")
	if err != nil {
		return nil, err
	}
	return core.New(memorystore.New(), "test", key, []store.Limit{sluiceLimit(store.GCRA, allowQuota)})
}

func adapterCases() ([]adapterCase, error) {
	final := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	l, err := newBenchLimiter()
	if err != nil {
		return nil, fmt.Errorf("core.New: %w", err)
	}

	gin.SetMode(gin.ReleaseMode)
	ginBare, ginLimited := gin.New(), gin.New()
	ginLimited.Use(ginlimit.New(l))
	for _, e := range []*gin.Engine{ginBare, ginLimited} {
		e.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })
	}

	echoBare, echoLimited := echo.New(), echo.New()
	echoLimited.Use(echolimit.New(l))
	for _, e := range []*echo.Echo{echoBare, echoLimited} {
		e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	}

	return []adapterCase{
		{name: "nethttp", bare: final, limited: nethttp.Middleware(l)(final)},
		{name: "ginlimit", bare: ginBare, limited: ginLimited},
		{name: "echolimit", bare: echoBare, limited: echoLimited},
	}, nil
}

// resetWriter is a reusable ResponseWriter that keeps headers and the
// status only, so no request pays for a new recorder: benchHandler clears
// both before each request, httprateWorker the status.
type resetWriter struct {
	h    http.Header
	code int
}

func (w *resetWriter) Header() http.Header         { return w.h }
func (w *resetWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *resetWriter) WriteHeader(code int)        { w.code = code }

// benchHandler serves b.N requests, one per key in turn, and fails if any is
// not answered 200.
func benchHandler(b *testing.B, h http.Handler, reqs []*http.Request) {
	w := &resetWriter{h: make(http.Header, 8)}
	b.ReportAllocs()
	b.ResetTimer()
	idx := 0
	for range b.N {
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, reqs[idx])
		if w.code != http.StatusOK {
			b.Fatalf("status %d on the allow path", w.code)
		}
		if idx++; idx == len(reqs) {
			idx = 0
		}
	}
}

func keyRequests(keys []string) []*http.Request {
	reqs := make([]*http.Request, len(keys))
	for i, k := range keys {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
		reqs[i].Header.Set("X-Key", k)
	}
	return reqs
}

// runAdapterBench measures every adapter against its bare handler.
func runAdapterBench() []adapterResult {
	fmt.Println("\n== HTTP adapters on the memory store (GCRA, allow path, serial), testing.Benchmark ==")
	cases, err := adapterCases()
	if err != nil {
		fmt.Println("ERROR", err)
		return nil
	}
	reqs := keyRequests(makeKeys(1000))
	fmt.Printf("%-12s %10s %8s %12s %8s %12s %12s\n", "adapter", "bare ns", "allocs", "limited ns", "allocs", "over bare", "allocs over")
	var out []adapterResult
	for _, c := range cases {
		bare := testing.Benchmark(func(b *testing.B) { benchHandler(b, c.bare, reqs) })
		lim := testing.Benchmark(func(b *testing.B) { benchHandler(b, c.limited, reqs) })
		if bare.N == 0 || lim.N == 0 {
			fmt.Printf("%-12s ERROR benchmark failed\n", c.name)
			continue
		}
		r := adapterResult{name: c.name,
			bareNs: float64(bare.T.Nanoseconds()) / float64(bare.N), bareAllocs: bare.AllocsPerOp(),
			limitedNs: float64(lim.T.Nanoseconds()) / float64(lim.N), limitedAlloc: lim.AllocsPerOp()}
		fmt.Printf("%-12s %10.1f %8d %12.1f %8d %10.1fns %12d\n", r.name, r.bareNs, r.bareAllocs, r.limitedNs, r.limitedAlloc,
			r.limitedNs-r.bareNs, r.limitedAlloc-r.bareAllocs)
		out = append(out, r)
	}
	return out
}
