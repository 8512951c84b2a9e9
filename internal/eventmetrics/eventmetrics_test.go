package eventmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
)

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind string // "" for no kind
	}{
		{context.DeadlineExceeded, KindTimeout},
		{fmt.Errorf("take: %w", context.DeadlineExceeded), KindTimeout},
		// go-redis' read deadline passing: an i/o timeout, not a context's.
		{fmt.Errorf("take: %w", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}), KindTimeout},
		{context.Canceled, KindCanceled},
		{fmt.Errorf("redis: %w", store.ErrBreakerOpen), KindBreakerOpen},
		{fmt.Errorf("redis: %w", store.ErrOutOfMemory), KindOOM},
		// The breaker's or OOM error wins over a deadline in the same chain.
		{errors.Join(context.DeadlineExceeded, store.ErrBreakerOpen), KindBreakerOpen},
		{errors.Join(context.Canceled, store.ErrOutOfMemory), KindOOM},
		{errors.New("connection refused"), KindError},
		{fmt.Errorf("cost: %w", store.ErrNegativeCost), ""},
	} {
		k, ok := ErrorKind(tc.err)
		got := ""
		if ok {
			got = Kinds[k]
		}
		if got != tc.kind {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.kind)
		}
	}
	if !reflect.DeepEqual(Kinds[:], []string{"timeout", "canceled", "breaker_open", "error", "oom"}) {
		t.Errorf("Kinds = %v", Kinds)
	}
}

func TestOutcome(t *testing.T) {
	seen := map[int]string{}
	for o := core.Outcome(0); o <= core.OutcomeCanceled; o++ {
		for _, allowed := range []bool{true, false} {
			i, label := Outcome(core.Event{Outcome: o, Result: store.Result{Allowed: allowed}})
			want := o.String()
			if o == core.OutcomeFallback {
				want = map[bool]string{true: OutcomeFallbackAllowed, false: OutcomeFallbackDenied}[allowed]
			}
			if label != want || i < 0 || i >= NumOutcomes {
				t.Errorf("Outcome(%v, allowed %v) = %d, %q; want %q with an index below %d", o, allowed, i, label, want, NumOutcomes)
			}
			if s, ok := seen[i]; ok && s != label {
				t.Errorf("index %d names both %q and %q", i, s, label)
			}
			seen[i] = label
		}
	}
	if len(seen) != NumOutcomes {
		t.Errorf("%d labels, want NumOutcomes (%d): %v", len(seen), NumOutcomes, seen)
	}
	later := core.OutcomeCanceled + 1
	if i, label := Outcome(core.Event{Outcome: later}); i != -1 || label != later.String() {
		t.Errorf("Outcome of an outcome core does not define = %d, %q; want -1, %q", i, label, later.String())
	}
}

func TestLimitLabel(t *testing.T) {
	for _, tc := range []struct {
		limit store.Limit
		want  string
	}{
		{store.Limit{}, LimitNone},
		{store.PerSecond(10), "10/s gcra burst 10"},
		{store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 10}, "10/s gcra burst 10"},
		{store.Limit{Algorithm: store.FixedWindow, Rate: 1000, Period: 3 * time.Second, Penalty: time.Minute}, "1000/3s fixed_window penalty 1m"},
		{store.Limit{Rate: -1, Period: time.Second}, store.Limit{Rate: -1, Period: time.Second}.String()},
		{store.PerCalendar(10000, "month", time.UTC), "10000/month@UTC"},
	} {
		if got := LimitLabel(tc.limit); got != tc.want {
			t.Errorf("LimitLabel(%+v) = %q, want %q", tc.limit, got, tc.want)
		}
	}
	var c LimitLabels // the zero value is ready
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := int64(1); j <= 50; j++ {
				if got, want := c.Label(store.PerMinute(j)), LimitLabel(store.PerMinute(j)); got != want {
					t.Errorf("cached %q, want %q", got, want)
				}
			}
		}()
	}
	wg.Wait()
	if n := len(*c.m.Load()); n != 50 {
		t.Errorf("%d cached labels, want 50", n)
	}
}

func TestValueAndReserved(t *testing.T) {
	if got := Value("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("Value = %q", got)
	}
	for _, name := range []string{"limiter", "plan", "limit", "outcome", "kind"} {
		if !Reserved(name) {
			t.Errorf("Reserved(%q) = false", name)
		}
	}
	if Reserved("service") {
		t.Error(`Reserved("service") = true`)
	}
}

func TestCheckBuckets(t *testing.T) {
	if err := CheckBuckets(DefaultLatencyBuckets(), true); err != nil {
		t.Errorf("default buckets: %v", err)
	}
	if err := CheckBuckets([]float64{0.1, math.Inf(1)}, false); err != nil {
		t.Errorf("+Inf, not finite: %v", err)
	}
	for name, b := range map[string][]float64{
		"none":       nil,
		"NaN":        {0.1, math.NaN()},
		"+Inf":       {0.1, math.Inf(1)},
		"decreasing": {0.1, 0.01},
		"equal":      {0.1, 0.1},
	} {
		if err := CheckBuckets(b, true); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	b := DefaultLatencyBuckets()
	b[0] = 42
	if DefaultLatencyBuckets()[0] == 42 {
		t.Error("DefaultLatencyBuckets returns a shared slice")
	}
}
