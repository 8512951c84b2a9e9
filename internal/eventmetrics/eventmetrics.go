// Package eventmetrics holds what promlimit and otellimit share in turning
// a core.Event into metrics, so that the two export the same series: the
// label values (limit, plan, outcome, error kind), the label names users
// may not take, the metric descriptions and the default latency buckets.
// The public packages export none of them; their docs state the values.
package eventmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
)

// Label values that name no limit, plan or ordinary outcome (promlimit's
// and otellimit's docs state them).
const (
	LimitNone              = "none"
	PlanNone               = ""
	OutcomeFallbackAllowed = "fallback_allowed"
	OutcomeFallbackDenied  = "fallback_denied"
)

// Values of the kind label of the store errors metric.
const (
	KindTimeout     = "timeout"      // the store's deadline or a network timeout passed
	KindCanceled    = "canceled"     // the request's context ended first
	KindBreakerOpen = "breaker_open" // the store was not called: its error wraps store.ErrBreakerOpen
	KindError       = "error"        // any other error from the store
	KindOOM         = "oom"          // the store had no memory left to write: its error wraps store.ErrOutOfMemory
)

// Kinds are the kind label values, by the index ErrorKind returns.
var Kinds = [...]string{kindTimeout: KindTimeout, kindCanceled: KindCanceled,
	kindBreakerOpen: KindBreakerOpen, kindError: KindError, kindOOM: KindOOM}

// Indexes in Kinds.
const (
	kindTimeout = iota
	kindCanceled
	kindBreakerOpen
	kindError
	kindOOM
)

// ErrorKind classifies Event.Err by its index in Kinds; ok is false for an
// error that is not the store's (a negative cost from the cost function).
func ErrorKind(err error) (kind int, ok bool) {
	switch {
	case errors.Is(err, store.ErrBreakerOpen):
		return kindBreakerOpen, true
	case errors.Is(err, store.ErrOutOfMemory):
		return kindOOM, true
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return kindTimeout, true
	case errors.Is(err, context.Canceled):
		return kindCanceled, true
	case errors.Is(err, store.ErrNegativeCost):
		return 0, false
	}
	return kindError, true
}

// isTimeout reports whether err is a network timeout (an i/o timeout of
// the client's read or write deadline).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// numOutcomes is the number of outcomes core defines.
const numOutcomes = int(core.OutcomeCanceled) + 1

// NumOutcomes is the number of outcome label values: one per outcome core
// defines, core.OutcomeFallback's being fallback_allowed, and
// fallback_denied.
const NumOutcomes = numOutcomes + 1

// outcomeLabels are the outcome label values by Outcome's index.
var outcomeLabels = func() [NumOutcomes]string {
	var ls [NumOutcomes]string
	for o := 0; o < numOutcomes; o++ {
		ls[o] = core.Outcome(o).String()
	}
	ls[core.OutcomeFallback] = OutcomeFallbackAllowed
	ls[numOutcomes] = OutcomeFallbackDenied
	return ls
}()

// Outcome returns the outcome label of ev: core.Outcome.String(), except
// that core.OutcomeFallback is split by what the store's fallback decided. Its
// index, below NumOutcomes, numbers the label for a cache; it is -1 for an
// outcome core does not define yet, whose label a cache should not keep.
// It allocates only for such an outcome.
func Outcome(ev core.Event) (index int, label string) {
	switch {
	case ev.Outcome == core.OutcomeFallback && !ev.Result.Allowed:
		return numOutcomes, OutcomeFallbackDenied
	case int(ev.Outcome) >= numOutcomes:
		return -1, ev.Outcome.String()
	}
	return int(ev.Outcome), outcomeLabels[ev.Outcome]
}

// Value returns s as a label value, invalid UTF-8 replaced: client_golang
// panics on it and OTLP's protobuf encoding refuses it, and an Event not
// made by a Limiter may hold it.
func Value(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// LimitLabel returns the limit label of l: l in store.ParseLimit's syntax
// with the algorithm and burst defaults applied, so that equal limits get
// equal labels however they were written ("10/s gcra burst 10"); LimitNone
// for the zero Limit, and l.String() for an invalid one (from an Event no
// Limiter made).
func LimitLabel(l store.Limit) string {
	if l == (store.Limit{}) {
		return LimitNone
	}
	s, err := l.Spec()
	if err != nil {
		return Value(l.String())
	}
	l.Algorithm, l.Burst = s.Algorithm(), s.Burst() // a calendar window's unit and zone stay
	return Value(l.String())
}

// LimitLabels caches LimitLabel per Limit. Its zero value is an empty
// cache; it is safe for concurrent use, and a hit takes no lock.
type LimitLabels struct {
	m  atomic.Pointer[map[store.Limit]string]
	mu sync.Mutex
}

// Label returns LimitLabel(l), cached.
func (c *LimitLabels) Label(l store.Limit) string {
	if m := c.m.Load(); m != nil {
		if s, ok := (*m)[l]; ok {
			return s
		}
	}
	s := LimitLabel(l)
	c.mu.Lock()
	defer c.mu.Unlock()
	StoreWith(&c.m, l, s)
	return s
}

// StoreWith replaces p's map (nil for none) with a copy that also maps k
// to v: readers load the map without a lock, and a map once stored never
// changes. The caller holds the mutex that serialises p's writers.
func StoreWith[K comparable, V any](p *atomic.Pointer[map[K]V], k K, v V) {
	var old map[K]V
	if m := p.Load(); m != nil {
		old = *m
	}
	m := make(map[K]V, len(old)+1)
	for key, val := range old {
		m[key] = val
	}
	m[k] = v
	p.Store(&m)
}

// Reserved reports whether name is a label name of the metrics' own
// (limiter, plan, limit, outcome, kind, server), which a constant label may not
// take.
func Reserved(name string) bool {
	switch name {
	case "limiter", "plan", "limit", "outcome", "kind", "server":
		return true
	}
	return false
}

// Descriptions of the metrics.
const (
	HelpDecisions    = "Rate-limit decisions, by limiter, plan, binding limit and outcome."
	HelpStoreLatency = "Time spent in the rate-limit store per decision that called one (including the local fallback store)."
	HelpStoreErrors  = "Decisions whose store failed or was not called because the circuit breaker was open, by kind (timeout, canceled, breaker_open, error, oom)."
	HelpNearLimit    = "Admitted decisions that left a limit less than a fifth of its capacity (more than 80% used), by limiter, plan and that limit."
)

// A Stat is one metric read from store.Stats at collection time (see
// promlimit.WithStoreStats).
type Stat struct {
	Prom, OTel string // names without the namespace
	Unit, Help string
	Label      string // the label of the series ("" for one series)
	Counter    bool   // a monotonic count (else a gauge)
	// Read returns the series' values by label value ("" without Label).
	Read func(store.Stats) map[string]float64
}

// Stats are the metrics of store.Stats.
var Stats = []Stat{
	{Prom: "store_instances", OTel: "store.instances", Unit: "{instance}",
		Help: "Processes the store counts as sharing its backend, whose fallbacks split each allowance; 0 when it cannot count them (each fallback then takes a whole allowance).",
		Read: func(s store.Stats) map[string]float64 { return map[string]float64{"": float64(s.Instances)} }},
	{Prom: "store_breaker_open", OTel: "store.breaker_open", Unit: "1", Label: "server",
		Help: "1 while the circuit breaker of the server is open (decisions of its keys go to the fallback), else 0.",
		Read: func(s store.Stats) map[string]float64 {
			m := make(map[string]float64, len(s.Breakers))
			for addr, open := range s.Breakers {
				m[Value(addr)] = 0
				if open {
					m[Value(addr)] = 1
				}
			}
			return m
		}},
	{Prom: "store_debts", OTel: "store.debts", Unit: "{key}",
		Help: "Keys whose admissions by the fallback are not yet charged to the backend.",
		Read: func(s store.Stats) map[string]float64 { return map[string]float64{"": float64(s.Debts)} }},
	{Prom: "store_oldest_debt_seconds", OTel: "store.oldest_debt", Unit: "s",
		Help: "How long the oldest debt has waited to be charged to the backend; growing while the backend answers means the charges fail.",
		Read: func(s store.Stats) map[string]float64 { return map[string]float64{"": s.OldestDebt.Seconds()} }},
	{Prom: "store_warnings_total", OTel: "store.warnings", Unit: "{warning}", Label: "kind", Counter: true,
		Help: "Warnings the store logged, by kind (eviction, evicted, restart, unchecked, fleet, permission).",
		Read: func(s store.Stats) map[string]float64 {
			m := make(map[string]float64, len(s.Warnings))
			for k, n := range s.Warnings {
				m[Value(k)] = float64(n)
			}
			return m
		}},
}

// defaultLatencyBuckets backs DefaultLatencyBuckets.
var defaultLatencyBuckets = [...]float64{
	0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
}

// DefaultLatencyBuckets returns the latency histogram's default bucket
// bounds, in seconds: 50µs, 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms, 10ms,
// 25ms, 50ms, 100ms, 250ms and 1s. Each call returns a new slice.
func DefaultLatencyBuckets() []float64 { return append([]float64(nil), defaultLatencyBuckets[:]...) }

// CheckBuckets returns an error unless buckets is a non-empty, strictly
// increasing list without NaN, and, when finite, without infinities.
func CheckBuckets(buckets []float64, finite bool) error {
	if len(buckets) == 0 {
		return errors.New("no latency buckets")
	}
	for i, b := range buckets {
		if math.IsNaN(b) || finite && math.IsInf(b, 0) {
			return fmt.Errorf("latency bucket %d is %g", i, b)
		}
		if i > 0 && b <= buckets[i-1] {
			return fmt.Errorf("latency buckets must be strictly increasing: %g follows %g", b, buckets[i-1])
		}
	}
	return nil
}
