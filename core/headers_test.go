package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{time.Microsecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Microsecond, 2},
		{59*time.Second + 1, 60},
		{time.Hour, 3600},
		{store.InfDuration - 1, int64((store.InfDuration-1)/time.Second) + 1},
		{store.InfDuration, 0},
	} {
		if got := retryAfterSeconds(tc.d); got != tc.want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestResetEpoch(t *testing.T) {
	base := time.Unix(1_700_000_000, 250_000_000)
	for _, tc := range []struct {
		now   time.Time
		after time.Duration
		want  int64
	}{
		{base, 0, 1_700_000_001},                        // now itself, rounded up
		{time.Unix(1_700_000_000, 0), 0, 1_700_000_000}, // already whole
		{time.Unix(1_700_000_000, 0), time.Nanosecond, 1_700_000_001},
		{base, 750 * time.Millisecond, 1_700_000_001}, // exactly whole
		{base, 750*time.Millisecond + time.Microsecond, 1_700_000_002},
		{base, 1500 * time.Millisecond, 1_700_000_002},
		{base, time.Hour, 1_700_003_601},
	} {
		if got := (store.Result{ResetAfter: tc.after}).ResetAt(tc.now).Unix(); got != tc.want {
			t.Errorf("ResetAt(%v) after %v = %d, want %d", tc.now.UnixNano(), tc.after, got, tc.want)
		}
	}
}

func TestQuota(t *testing.T) {
	for _, tc := range []struct {
		l    store.Limit
		q, w int64
	}{
		{store.PerSecond(10), 10, 1},
		{store.PerMinute(100), 100, 60},
		{store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}, 16, 32},      // 16 × 2s
		{store.Limit{Algorithm: store.TokenBucket, Rate: 3, Period: time.Second, Burst: 10}, 10, 4}, // 10/3 s → 4
		{store.Limit{Algorithm: store.LeakyBucket, Rate: 2, Period: time.Second, Burst: 4}, 5, 3},   // queue 4 + 1 in service
		{store.Limit{Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}, 100, 3600},
		{store.Limit{Algorithm: store.SlidingWindow, Rate: 5, Period: 1500 * time.Millisecond}, 5, 2},
		{store.Limit{Algorithm: store.SlidingLog, Rate: 10, Period: 100 * time.Millisecond}, 10, 1},
		{store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Second}, 3, 1}, // exact, not 3·ceil(P/3)
	} {
		s, err := tc.l.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if q, w := quota(s); q != tc.q || w != tc.w {
			t.Errorf("quota(%v) = q %d w %d, want q %d w %d", tc.l, q, w, tc.q, tc.w)
		}
	}
}

// headersFor runs one decision through a Limiter whose store answers res,
// at the given clock, and returns the headers it sets.
func headersFor(t *testing.T, limits []store.Limit, res store.Result, now time.Time, opts ...Option) (Decision, http.Header) {
	t.Helper()
	st := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) { return res, nil }}
	opts = append(opts, WithClock(func() time.Time { return now }))
	l := mustNew(t, st, limits, opts...)
	d := l.Decide(request("k"))
	h := http.Header{}
	d.setHeaders(h, nil)
	return d, h
}

func TestLegacyHeadersExact(t *testing.T) {
	now := time.Unix(1_700_000_000, 250_000_000)
	res := store.Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond}
	_, h := headersFor(t, perSecond10, res, now)
	want := http.Header{
		"X-Ratelimit-Limit":     {"10"},
		"X-Ratelimit-Remaining": {"7"},
		"X-Ratelimit-Reset":     {"1700000002"}, // 1_700_000_001.75 rounded up
	}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	// The names clients use, through Header.Get.
	if h.Get("X-RateLimit-Remaining") != "7" {
		t.Error("X-RateLimit-Remaining not found by Header.Get")
	}

	res = store.Result{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: 900 * time.Millisecond}
	d, h := headersFor(t, perSecond10, res, now)
	if d.Action != Refuse {
		t.Fatalf("action %v", d.Action)
	}
	want = http.Header{
		"X-Ratelimit-Limit":     {"10"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"1700000002"}, // 1_700_000_001.15 rounded up
		"Retry-After":           {"1"},          // 0.1 s rounded up
	}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("denial headers %v, want %v", h, want)
	}

	// A cost that can never pass: no Retry-After.
	res = store.Result{Allowed: false, Limit: 10, Remaining: 4, RetryAfter: store.InfDuration, ResetAfter: 600 * time.Millisecond}
	_, h = headersFor(t, perSecond10, res, now)
	if _, ok := h["Retry-After"]; ok || h.Get("X-Ratelimit-Remaining") != "4" {
		t.Fatalf("never-passing denial headers %v: want Remaining 4 and no Retry-After", h)
	}
}

// A Limiter without a clock of its own on the memory store takes the
// decision's time from the store's reading (no second one): X-RateLimit-
// Reset is the store's clock at the decision plus ResetAfter, whatever
// time.Now says.
func TestResetFromMemoryStoreClock(t *testing.T) {
	at := time.Unix(2_000_000_000, 400_000_000) // far from time.Now
	st := memorystore.New(memorystore.WithClock(func() time.Time { return at }))
	l, err := New(st, "t", func(*http.Request) (string, error) { return "k", nil }, perSecond10)
	if err != nil {
		t.Fatal(err)
	}
	d := l.DecideKey(context.Background(), "k", "", 1)
	h := http.Header{}
	d.setHeaders(h, nil)
	// ResetAfter 100 ms (one of 10/s used): 2_000_000_000.5 rounded up
	if got := h.Get("X-Ratelimit-Reset"); got != "2000000001" {
		t.Fatalf("X-RateLimit-Reset %s, want 2000000001 (the store's clock + ResetAfter); Result %+v", got, d.Result)
	}
}

func TestHeadersReplaceAndDoNotAlias(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	res := store.Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: time.Second}
	d, _ := headersFor(t, perSecond10, res, now, WithHeaders(HeadersLegacy|HeadersIETF))
	h := http.Header{"X-Ratelimit-Limit": {"999"}}
	d.setHeaders(h, nil)
	if v := h.Values("X-Ratelimit-Limit"); len(v) != 1 || v[0] != "10" {
		t.Fatalf("X-RateLimit-Limit %v, want replaced by [10]", v)
	}
	// Adding to one header must not change another's value, nor the next
	// response's policy.
	h.Add("X-Ratelimit-Remaining", "x")
	h.Add("Ratelimit-Policy", "extra")
	if h.Get("X-Ratelimit-Reset") != "1700000001" || len(h.Values("X-Ratelimit-Reset")) != 1 {
		t.Fatalf("Reset changed by an Add to Remaining: %v", h.Values("X-Ratelimit-Reset"))
	}
	h2 := http.Header{}
	d.setHeaders(h2, nil)
	if v := h2.Values("Ratelimit-Policy"); len(v) != 1 || v[0] != `"default";q=10;w=1` {
		t.Fatalf("policy of the next response %v", v)
	}
}

func TestHeaderStyles(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	denied := store.Result{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 2500 * time.Millisecond, ResetAfter: 3 * time.Second}
	for _, tc := range []struct {
		style HeaderStyle
		want  []string
	}{
		{HeadersLegacy, []string{"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}},
		{HeadersIETF, []string{"Ratelimit", "Ratelimit-Policy", "Retry-After"}},
		{HeadersLegacy | HeadersIETF, []string{"Ratelimit", "Ratelimit-Policy", "Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}},
		{0, []string{"Retry-After"}},
	} {
		_, h := headersFor(t, perSecond10, denied, now, WithHeaders(tc.style))
		var got []string
		for k := range h {
			got = append(got, k)
		}
		if fmt.Sprint(sorted(got)) != fmt.Sprint(tc.want) {
			t.Errorf("%v: headers %v, want %v", tc.style, sorted(got), tc.want)
		}
		if h.Get("Retry-After") != "3" {
			t.Errorf("%v: Retry-After %q, want 3", tc.style, h.Get("Retry-After"))
		}
	}
	// 0 on an allowed request: nothing at all.
	_, h := headersFor(t, perSecond10, store.Result{Allowed: true, Limit: 10, Remaining: 3}, now, WithHeaders(0))
	if len(h) != 0 {
		t.Errorf("0 allowed: %v", h)
	}
}

func sorted(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func TestIETFHeadersExact(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	// 10/s (T = 100 ms) with 7 left: full in 1.25 s (rounded up: 2), the
	// next unit in 1.25 s - 2·T = 1.05 s (t, rounded up: 2).
	res := store.Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1250 * time.Millisecond}
	_, h := headersFor(t, perSecond10, res, now, WithHeaders(HeadersIETF), withName("api"), WithPolicyNames(map[string]string{"": "api"}))
	if got := h.Get("RateLimit-Policy"); got != `"api";q=10;w=1` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := h.Get("RateLimit"); got != `"api";r=7;t=2` {
		t.Errorf("RateLimit %q", got)
	}

	// Several limits: one member per limit, in order, each with its own
	// figures from PerLimit. 1000/h (T = 3.6 s) with 412 left is full in
	// 2115 s and has its next unit in 2115 s - 587·T = 1.8 s (t=2); the
	// refusing 10/s limit's next unit is its RetryAfter.
	limits := []store.Limit{store.PerSecond(10), store.PerHour(1000)}
	per := []store.Result{
		{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Second},
		{Allowed: true, Limit: 1000, Remaining: 412, ResetAfter: 2115 * time.Second},
	}
	res = arith.Combine(per)
	d, h := headersFor(t, limits, res, now, WithHeaders(HeadersLegacy|HeadersIETF), withName(`we"ird\name`), WithPolicyNames(map[string]string{"": `we"ird\name`}))
	if d.Action != Refuse {
		t.Fatalf("action %v", d.Action)
	}
	wantPolicy := `"we\"ird\\name-0";q=10;w=1, "we\"ird\\name-1";q=1000;w=3600`
	wantRL := `"we\"ird\\name-0";r=0;t=1, "we\"ird\\name-1";r=412;t=2`
	if got := h.Get("RateLimit-Policy"); got != wantPolicy {
		t.Errorf("RateLimit-Policy %q, want %q", got, wantPolicy)
	}
	if got := h.Get("RateLimit"); got != wantRL {
		t.Errorf("RateLimit %q, want %q", got, wantRL)
	}
	// The legacy headers describe the binding limit.
	if h.Get("X-Ratelimit-Limit") != "10" || h.Get("Retry-After") != "1" || h.Get("X-Ratelimit-Reset") != "1700000001" {
		t.Errorf("legacy headers %v", h)
	}
}

// TestIETFHeadersParse checks the fields' syntax with an RFC 8941 List
// parser (strings, tokens and integer parameters), for awkward names and
// several limits.
func TestIETFHeadersParse(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	limits := []store.Limit{store.PerSecond(5), {Algorithm: store.LeakyBucket, Rate: 2, Period: time.Second, Burst: 4}, {Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}}
	per := []store.Result{
		{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 200 * time.Millisecond},
		{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 999 * time.Millisecond, Delay: 10 * time.Millisecond},
		{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 3599 * time.Second},
	}
	for _, name := range []string{"api", `a, "b";q=1`, `\`, " ", "GET /users/{id}"} {
		_, h := headersFor(t, limits, arith.Combine(per), now, WithHeaders(HeadersIETF), withName(name), WithPolicyNames(map[string]string{"": name}))
		policy, err := parseSFList(h.Get("RateLimit-Policy"))
		if err != nil {
			t.Fatalf("name %q: RateLimit-Policy %q: %v", name, h.Get("RateLimit-Policy"), err)
		}
		rl, err := parseSFList(h.Get("RateLimit"))
		if err != nil {
			t.Fatalf("name %q: RateLimit %q: %v", name, h.Get("RateLimit"), err)
		}
		if len(policy) != 3 || len(rl) != 3 {
			t.Fatalf("name %q: %d policies, %d RateLimit members; want 3 and 3", name, len(policy), len(rl))
		}
		wantQ := []int64{5, 5, 100}
		wantW := []int64{1, 3, 3600}
		for i := range policy {
			if want := name + "-" + strconv.Itoa(i); policy[i].value != want || rl[i].value != want {
				t.Errorf("member %d names %q and %q, want %q", i, policy[i].value, rl[i].value, want)
			}
			if policy[i].params["q"] != wantQ[i] || policy[i].params["w"] != wantW[i] || len(policy[i].params) != 2 {
				t.Errorf("policy %d params %v, want q=%d w=%d", i, policy[i].params, wantQ[i], wantW[i])
			}
			if rl[i].params["r"] != per[i].Remaining || rl[i].params["t"] != ceilSeconds(per[i].ResetAfter) || len(rl[i].params) != 2 {
				t.Errorf("RateLimit %d params %v", i, rl[i].params)
			}
		}
	}
}

type sfItem struct {
	value   string
	params  map[string]int64  // Integer parameters
	sparams map[string]string // String parameters
}

// parseSFList parses an RFC 8941 List whose members are Strings with
// Integer parameters, strictly.
func parseSFList(s string) ([]sfItem, error) {
	var out []sfItem
	i := 0
	for {
		if i >= len(s) || s[i] != '"' {
			return nil, fmt.Errorf("at %d: want a string", i)
		}
		i++
		var v strings.Builder
		for {
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated string")
			}
			c := s[i]
			i++
			if c == '\\' {
				if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
					return nil, fmt.Errorf("at %d: bad escape", i)
				}
				v.WriteByte(s[i])
				i++
				continue
			}
			if c == '"' {
				break
			}
			if c < 0x20 || c > 0x7e {
				return nil, fmt.Errorf("at %d: character %q not allowed in a string", i-1, c)
			}
			v.WriteByte(c)
		}
		it := sfItem{value: v.String(), params: map[string]int64{}, sparams: map[string]string{}}
		for i < len(s) && s[i] == ';' {
			i++
			j := i
			for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-' || s[i] == '.' || s[i] == '*') {
				i++
			}
			key := s[j:i]
			if key == "" || key[0] < 'a' || key[0] > 'z' {
				return nil, fmt.Errorf("at %d: bad parameter key %q", j, key)
			}
			if i >= len(s) || s[i] != '=' {
				return nil, fmt.Errorf("at %d: parameter %s has no integer value", i, key)
			}
			i++
			if i < len(s) && s[i] == '"' { // a String of plain characters
				j = i + 1
				k := strings.IndexByte(s[j:], '"')
				if k < 0 || strings.ContainsAny(s[j:j+k], "\\\x00") {
					return nil, fmt.Errorf("at %d: bad string parameter", j)
				}
				if _, dup := it.sparams[key]; dup {
					return nil, fmt.Errorf("duplicate parameter %s", key)
				}
				it.sparams[key] = s[j : j+k]
				i = j + k + 1
				continue
			}
			j = i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			if i == j || i-j > 15 {
				return nil, fmt.Errorf("at %d: bad integer", j)
			}
			n, _ := strconv.ParseInt(s[j:i], 10, 64)
			if _, dup := it.params[key]; dup {
				return nil, fmt.Errorf("duplicate parameter %s", key)
			}
			it.params[key] = n
		}
		out = append(out, it)
		if i == len(s) {
			return out, nil
		}
		if s[i] != ',' {
			return nil, fmt.Errorf("at %d: want ',' got %q", i, s[i])
		}
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
}

func TestSetHeadersAllocs(t *testing.T) {
	for _, style := range []HeaderStyle{HeadersLegacy, HeadersIETF, HeadersLegacy | HeadersIETF} {
		res := store.Result{Allowed: false, Limit: 1000, Remaining: 0, RetryAfter: 2 * time.Second, ResetAfter: 30 * time.Second}
		d, _ := headersFor(t, []store.Limit{store.PerMinute(1000)}, res, time.Unix(1_700_000_000, 0), WithHeaders(style))
		h := http.Header{}
		allocs := testing.AllocsPerRun(200, func() { d.setHeaders(h, nil) })
		if allocs > 1 { // the values, their bytes and slices in one block
			t.Errorf("%v: SetHeaders made %v allocations, want 1", style, allocs)
		}
	}
}

// The IETF fields never show the Limiter's or a plan's name, which are
// internal (issue 20: "billing-v2-internal.acme-corp-enterprise" was sent
// to clients): "default" without WithPolicyName, else the names
// WithPolicyName and WithPlanPolicyNames give.
func TestPolicyNamesHideInternalNames(t *testing.T) {
	plans := map[string][]store.Limit{"acme-corp-enterprise": {store.PerMinute(5)}, "free": {store.PerMinute(2), store.PerHour(10)}}
	for _, c := range []struct {
		opts       []Option
		plan, want string
	}{
		{nil, "acme-corp-enterprise", `"default";q=5;w=60`},
		{nil, "free", `"default-0";q=2;w=60, "default-1";q=10;w=3600`},
		{nil, "", `"default";q=1;w=60`},
		{[]Option{WithPolicyNames(map[string]string{"": "api"})}, "acme-corp-enterprise", `"api";q=5;w=60`},
		{[]Option{WithPolicyNames(map[string]string{"": "api"})}, "", `"api";q=1;w=60`},
		{[]Option{WithPolicyNames(map[string]string{"acme-corp-enterprise": "enterprise"})}, "acme-corp-enterprise", `"enterprise";q=5;w=60`},
		{[]Option{WithPolicyNames(map[string]string{"acme-corp-enterprise": "enterprise"})}, "free", `"default-0";q=2;w=60, "default-1";q=10;w=3600`},
	} {
		opts := append([]Option{withName("billing-v2-internal"), WithHeaders(HeadersIETF), WithPlans(planHeader, plans)}, c.opts...)
		l, err := New(memorystore.New(), "test", headerKey, []store.Limit{store.PerMinute(1)}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		d := l.Decide(clientRequest("a", c.plan))
		d.setHeaders(h, nil)
		got := h.Get("Ratelimit-Policy") + " " + h.Get("Ratelimit")
		if h.Get("Ratelimit-Policy") != c.want || strings.Contains(got, "billing") || strings.Contains(got, "acme") {
			t.Errorf("plan %q: RateLimit-Policy %q, RateLimit %q; want policy %s and no internal name", c.plan, h.Get("Ratelimit-Policy"), h.Get("Ratelimit"), c.want)
		}
	}
	for _, opt := range []Option{WithPolicyNames(map[string]string{"": ""}), WithPolicyNames(map[string]string{"": "caf\u00e9"}), WithPolicyNames(map[string]string{"free": ""}),
		WithPolicyNames(map[string]string{"free": strings.Repeat("x", 129)})} {
		if _, err := New(memorystore.New(), "test", headerKey, []store.Limit{store.PerMinute(1)}, opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("invalid policy name: %v, want ErrInvalidOption", err)
		}
	}
}
