package sluice_test

// One table of HTTP scenarios, run identically through the three adapters
// (nethttp, ginlimit, echolimit) on three stores: the memory store and a
// miniredis, both on a fake clock the test moves, and a real redis-server
// (internal/redistest), on real time. Every expected header is derived from
// the limits' definitions (ALGORITHMS.md): times are written as offsets from
// the scenario's start on the store's clock, and turned into the exact
// header value on a fake clock, or into the narrow range the real clock
// allows.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

func init() {
	gin.SetMode(gin.TestMode)
	// The dead-Redis rows make go-redis log every failed dial; the
	// observer below reports what matters.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// t0 is where every fake clock starts: a whole second, so that the
// rounding of X-RateLimit-Reset shows.
var t0 = time.Unix(1_700_000_000, 0).UTC()

// ---------------------------------------------------------------------------
// Stores and clocks.

// fakeClock is a clock that only moves when told; it may drive a miniredis.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	mini *miniredis.Miniredis
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if c.mini != nil {
		c.mini.SetTime(c.now) // TIME, which the script decides by
		c.mini.FastForward(d) // TTLs
	}
}

// env is what one subtest runs on.
type env struct {
	clock *fakeClock // nil: real time
	live  store.Store
	dead  store.Store // a Redis store whose server is down
}

func (e *env) fake() bool { return e.clock != nil }

// storeKind makes the env of each subtest. prepare runs once per kind (in
// the kind's subtest, before the parallel scenario subtests) and returns the
// function that makes a fresh env for one scenario subtest.
type storeKind struct {
	name    string
	fake    bool // its envs run on a fake clock
	prepare func(t *testing.T) func(t *testing.T) *env
}

// redisClient returns a client with the options redisstore recommends: no
// retries (a retried Take may charge twice), and the Limiter's deadline
// bounding every wait. Its read and write timeouts are liveTimeout, the live stores' deadline:
// go-redis cuts a read at the earlier of the context's deadline and its
// ReadTimeout (3 s by default), which a miniredis reply crossed on a
// machine at load 19.
func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: liveTimeout, WriteTimeout: liveTimeout})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// deadClient is redisClient for a dead server, without go-redis' dial
// retries: by default it dials five times, 100ms apart, so every request
// would cost the Limiter's whole per-decision timeout until the breaker
// opens. Either way the Take fails; this way the rows run quickly.
func deadClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newRedisStore(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option) store.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// deadStore is a Redis store of one subtest on the dead server at addr,
// its fallback a fresh memory store on clock (nil: real time).
func deadStore(t *testing.T, addr string, clock *fakeClock) store.Store {
	local := memorystore.New()
	if clock != nil {
		local = memorystore.New(memorystore.WithClock(clock.Now))
	}
	return newRedisStore(t, deadClient(t, addr), redisstore.WithFallback(local))
}

// droppingListener holds a port and closes every connection at once: a
// Redis that is "there" but dead. Holding the port (instead of closing it)
// means no other process can start a server on it during the test.
func droppingListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

var prefixSeq atomic.Int64

var storeKinds = []storeKind{
	{
		// Dead Redis: a port that drops every connection.
		name: "memory",
		fake: true,
		prepare: func(t *testing.T) func(*testing.T) *env {
			addr := droppingListener(t)
			return func(t *testing.T) *env {
				c := &fakeClock{now: t0}
				return &env{clock: c, live: memorystore.New(memorystore.WithClock(c.Now)), dead: deadStore(t, addr, c)}
			}
		},
	},
	{
		// Dead Redis: a closed miniredis.
		name: "miniredis",
		fake: true,
		prepare: func(t *testing.T) func(*testing.T) *env {
			m := miniredis.RunT(t)
			addr := m.Addr()
			m.Close()
			return func(t *testing.T) *env {
				m := miniredis.RunT(t)
				m.SetTime(t0)
				c := &fakeClock{now: t0, mini: m}
				// The default configuration: what the README's testing
				// pattern uses (the deny cache, off by default, would
				// count down on the local clock, which this Redis clock
				// does not follow).
				live := newRedisStore(t, redisClient(t, m.Addr()), redisstore.WithTimeout(liveTimeout))
				return &env{clock: c, live: live, dead: deadStore(t, addr, c)}
			}
		},
	},
	{
		// Real redis-server (skipped without one, failing under CI=true);
		// dead Redis: a redis-server started and killed.
		name: "redis",
		prepare: func(t *testing.T) func(*testing.T) *env {
			shared := redistest.Shared(t)
			killed := redistest.StartServer(t)
			killed.Kill(t)
			live := redisClient(t, shared.Addr)
			return func(t *testing.T) *env {
				// A prefix of its own per subtest: no state is shared.
				prefix := fmt.Sprintf("mwtest:%d:%d:", os.Getpid(), prefixSeq.Add(1))
				// The deny cache on, so that its answers go through the
				// table too.
				store := newRedisStore(t, live, redisstore.WithPrefix(prefix), redisstore.WithDenyCache(4096),
					redisstore.WithTimeout(liveTimeout))
				return &env{live: store, dead: deadStore(t, killed.Addr, nil)}
			}
		},
	},
}

// ---------------------------------------------------------------------------
// Adapters.

// route is one GET route of a scenario. path uses ServeMux wildcards
// ("/users/{id}"); the gin and echo adapters turn them into ":id".
type route struct {
	path    string
	methods []string      // the methods it is registered for; default GET
	l       *core.Limiter // nil: not limited
	outer   *core.Limiter // another limiter in front of l (nested middleware; a group's in gin and echo)
	// global limits every route, in front of the others: it wraps the
	// ServeMux, or is given to gin's and echo's Use. Set on one route.
	global *core.Limiter
	// fromContext: the handler answers "ok limit=L remaining=R", the
	// figures core.FromContext gives it.
	fromContext bool
}

// globalOf returns the routes' global limiter, if any.
func globalOf(routes []route) *core.Limiter {
	for _, rt := range routes {
		if rt.global != nil {
			return rt.global
		}
	}
	return nil
}

// answer is what the handler behind rt writes for a request with ctx.
func answer(ctx context.Context, rt route) string {
	if !rt.fromContext {
		return "ok"
	}
	d, ok := core.FromContext(ctx)
	if !ok {
		return "ok without a Decision"
	}
	return fmt.Sprintf("ok limit=%d remaining=%d", d.Result.Limit, d.Result.Remaining)
}

// methodsOf returns the methods rt is registered for.
func methodsOf(rt route) []string {
	if len(rt.methods) == 0 {
		return []string{http.MethodGet}
	}
	return rt.methods
}

// probe is the handler behind every route: it counts its calls and notes
// when the last one came, then answers 200 "ok".
type probe struct {
	mu   sync.Mutex
	n    int
	last time.Time
}

func (p *probe) hit() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.last = time.Now()
}

func (p *probe) state() (int, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.last
}

type adapter struct {
	name  string
	build func(routes []route, p *probe) http.Handler
}

var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func colonPath(path string) string { return wildcard.ReplaceAllString(path, ":$1") }

var adapters = []adapter{
	{"nethttp", func(routes []route, p *probe) http.Handler {
		mux := http.NewServeMux()
		for _, rt := range routes {
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p.hit()
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				_, _ = io.WriteString(w, answer(r.Context(), rt))
			})
			if rt.l != nil {
				h = nethttp.Middleware(rt.l)(h)
			}
			if rt.outer != nil {
				h = nethttp.Middleware(rt.outer)(h)
			}
			for _, m := range methodsOf(rt) {
				mux.Handle(m+" "+rt.path, h) // Go 1.22 pattern: r.Pattern is "GET /users/{id}"
			}
		}
		if g := globalOf(routes); g != nil {
			return nethttp.Middleware(g)(mux)
		}
		return mux
	}},
	{"gin", func(routes []route, p *probe) http.Handler {
		r := gin.New()
		if g := globalOf(routes); g != nil {
			r.Use(ginlimit.New(g))
		}
		for _, rt := range routes {
			var hs []gin.HandlerFunc
			if rt.l != nil {
				hs = append(hs, ginlimit.New(rt.l))
			}
			hs = append(hs, func(c *gin.Context) { p.hit(); c.String(http.StatusOK, answer(c.Request.Context(), rt)) })
			g := &r.RouterGroup
			path := colonPath(rt.path)
			if rt.outer != nil { // a group of its own, limited by outer
				g, path = r.Group(path, ginlimit.New(rt.outer)), ""
			}
			for _, m := range methodsOf(rt) {
				g.Handle(m, path, hs...)
			}
		}
		return r
	}},
	{"echo", func(routes []route, p *probe) http.Handler {
		e := echo.New()
		if g := globalOf(routes); g != nil {
			e.Use(echolimit.New(g))
		}
		for _, rt := range routes {
			var mw []echo.MiddlewareFunc
			if rt.l != nil {
				mw = append(mw, echolimit.New(rt.l))
			}
			add, path := e.Add, colonPath(rt.path)
			if rt.outer != nil { // a group of its own, limited by outer
				add, path = e.Group(path, echolimit.New(rt.outer)).Add, ""
			}
			for _, m := range methodsOf(rt) {
				add(m, path, func(c echo.Context) error {
					p.hit()
					return c.String(http.StatusOK, answer(c.Request().Context(), rt))
				}, mw...)
			}
		}
		return e
	}},
}

// ---------------------------------------------------------------------------
// The table.

// scenario is one row: the routes and their limiters, and the requests in
// order with what each must get.
type scenario struct {
	name string
	// fakeClock: the row moves the clock (step.advance) or needs time to
	// stand still, so it runs on the memory store and miniredis only.
	fakeClock bool
	// dead: the limiters use a Redis store whose server is down.
	dead   bool
	routes func(s *setup) []route
	steps  []step
}

type step struct {
	advance time.Duration // move the fake clock first
	// leaveWhenHeld: the request's context is cancelled as soon as the
	// Limiter decides to hold it (from an observer, which runs before
	// Decide returns): the client leaves during the hold.
	leaveWhenHeld bool
	path          string            // default "/api"
	method        string            // default GET
	remote        string            // RemoteAddr; default "192.0.2.1:1234"
	header        map[string]string // request headers
	status        int
	// body is the exact expected body; "" selects the default for status:
	// "ok" from the handler for 200, the Limiter's documented JSON bodies
	// for 429, 503 and 403.
	body  string
	ctype string // Content-Type of a refusal; "" means application/json
	rl    *rl    // the rate-limit headers; nil: none of them may be present
	// heldUntil: the handler must not run before this offset from the
	// scenario's start on the store's clock (LeakyBucket delays).
	heldUntil time.Duration
}

// rl is what the rate-limit headers must say. Times are offsets from the
// scenario's start on the store's clock.
type rl struct {
	limit, remaining int64         // X-RateLimit-Limit, -Remaining; limit 0: no legacy headers
	reset            time.Duration // X-RateLimit-Reset is the epoch of start+reset, rounded up
	retry            time.Duration // Retry-After: seconds until start+retry, rounded up, at least 1; 0: absent
	policy           string        // RateLimit-Policy exactly; "": no IETF headers
	ietf             []member      // RateLimit, one member per limit
}

type member struct {
	name string
	r    int64
	// t is the seconds until start+next, rounded up: the draft -11's
	// effective window, for GCRA until the next unit is back.
	next time.Duration
}

// interval is T = ceil(Period/Rate) in whole µs, the emission interval of
// GCRA and LeakyBucket (ALGORITHMS.md).
func interval(l store.Limit) time.Duration {
	p := l.Period.Microseconds()
	return time.Duration((p+l.Rate-1)/l.Rate) * time.Microsecond
}

// policy is one RateLimit-Policy member for l: q its capacity (the burst;
// one more for LeakyBucket's job in service; the rate for windows), w the
// seconds in which its rate admits q, rounded up, at least 1.
func policy(name string, l store.Limit) string {
	q := l.Burst
	if q == 0 {
		q = l.Rate
	}
	switch l.Algorithm {
	case store.LeakyBucket:
		q++
	case store.FixedWindow, store.SlidingWindow, store.SlidingLog:
		q = l.Rate
	}
	num := q * l.Period.Microseconds()
	den := l.Rate * 1_000_000
	w := max((num+den-1)/den, 1)
	return fmt.Sprintf("%q;q=%d;w=%d", name, q, w)
}

// setup builds a scenario's limiters on its env.
type setup struct {
	t     *testing.T
	e     *env
	store store.Store
	dead  bool
}

// leaveKey keys the cancel function of a step with leaveWhenHeld in its
// request's context.
type leaveKey struct{}

// liveTimeout replaces the Redis store's per-call deadline on live stores:
// on a loaded machine (-race, parallel tests) a Redis answer slower than
// the default 100 ms would hand the request to the fallback and
// make the figures those of a fresh local store.
const liveTimeout = 10 * time.Second

// limiter returns a Limiter named name on the scenario's store. On a fake
// clock the Limiter and the FailLocal fallback store read that clock too.
// An observer fails the test when a live store errs (so a row never passes
// on the failure policy's figures), and when a dead one does not.
func (s *setup) limiter(name string, key core.KeyFunc, limits []store.Limit, opts ...core.Option) *core.Limiter {
	s.t.Helper()
	t, dead := s.t, s.dead
	all := []core.Option{core.WithObserver(func(ev core.Event) {
		storeErr := ev.Err
		if errors.Is(storeErr, store.ErrNegativeCost) {
			storeErr = nil
		}
		if leave, ok := ev.Request.Context().Value(leaveKey{}).(context.CancelFunc); ok && ev.Outcome == core.OutcomeDelayed {
			leave()
		}
		switch {
		case ev.Outcome == core.OutcomeSkipped || ev.Outcome == core.OutcomeKeyError:
		case !dead && storeErr != nil:
			t.Errorf("limiter %q: the live store failed: %v (outcome %v)", name, storeErr, ev.Outcome)
		case dead && storeErr == nil:
			t.Errorf("limiter %q: the dead store answered (outcome %v)", name, ev.Outcome)
		}
	})}
	if s.e.fake() {
		all = append(all, core.WithClock(s.e.clock.Now))
	}
	l, err := core.New(s.store, name, key, limits, append(all, opts...)...)
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

// api is the usual single route "/api", limited per client IP.
func (s *setup) api(limits []store.Limit, opts ...core.Option) []route {
	return []route{{path: "/api", l: s.limiter("api", mustIP(s.t), limits, opts...)}}
}

func mustIP(t *testing.T, opts ...keyfuncs.IPOption) core.KeyFunc {
	t.Helper()
	k, err := keyfuncs.IP(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// JWT secrets: the server's, and another one to forge tokens with. Both
// are long enough for keyfuncs.HMACSecret.
var (
	jwtSecret = []byte("sluice middleware test secret, 32+ bytes")
	jwtOther  = []byte("not the server's secret, also 32+ bytes")
)

// jwtTokens are the tokens of the JWT rows: valid ones for alice and bob
// (HS256 under jwtSecret), and, all claiming to be alice, one forged under
// another secret, an expired one and one with "alg": "none".
type jwtTokens struct {
	alice, bob, forged, expired, algNone string
}

// mintTokens signs the tokens. The JWT key function checks "exp" by real
// time, so they are made when the test starts, valid (or expired) for an
// hour.
func mintTokens(t *testing.T) jwtTokens {
	t.Helper()
	now := time.Now()
	sign := func(m jwt.SigningMethod, key any, sub string, exp time.Time) string {
		s, err := jwt.NewWithClaims(m, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return jwtTokens{
		alice:   sign(jwt.SigningMethodHS256, jwtSecret, "alice", now.Add(time.Hour)),
		bob:     sign(jwt.SigningMethodHS256, jwtSecret, "bob", now.Add(time.Hour)),
		forged:  sign(jwt.SigningMethodHS256, jwtOther, "alice", now.Add(time.Hour)),
		expired: sign(jwt.SigningMethodHS256, jwtSecret, "alice", now.Add(-time.Hour)),
		algNone: sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "alice", now.Add(time.Hour)),
	}
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func jwtRoutes(s *setup, limits []store.Limit, opts ...core.Option) []route {
	k, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(jwtSecret))
	if err != nil {
		s.t.Fatal(err)
	}
	return []route{{path: "/api", l: s.limiter("api", k, limits, opts...)}}
}

func scenarios(tok jwtTokens) []scenario {
	var rows []scenario

	{ // Allow then 429, per client IP. GCRA 3/h burst 3: T = 20 min; the
		// k-th request leaves the key full again at k·T; the 4th needs
		// tat+T-burst·T = start+T.
		lim := store.PerHour(3)
		T := interval(lim)
		rows = append(rows, scenario{
			name:   "allow then 429",
			routes: func(s *setup) []route { return s.api([]store.Limit{lim}) },
			steps: []step{
				{status: 200, rl: &rl{limit: 3, remaining: 2, reset: T}},
				{status: 200, rl: &rl{limit: 3, remaining: 1, reset: 2 * T}},
				{status: 200, rl: &rl{limit: 3, remaining: 0, reset: 3 * T}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * T, retry: T}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * T, retry: T}},
				// Another client has its own allowance.
				{remote: "192.0.2.2:1234", status: 200, rl: &rl{limit: 3, remaining: 2, reset: T}},
			},
		})
	}

	{ // GCRA 3/s burst 3: T = ceil(1e6/3) µs = 333334 µs, so the full
		// allowance after three requests is 1.000002 s away (Reset rounds up
		// to start+2) and the 4th may pass after T (Retry-After 1). After T
		// one more passes, and the next waits until 2T.
		lim := store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Second, Burst: 3}
		T := interval(lim)
		rows = append(rows, scenario{
			name:      "exact headers GCRA 3 per s",
			fakeClock: true,
			routes:    func(s *setup) []route { return s.api([]store.Limit{lim}) },
			steps: []step{
				{status: 200, rl: &rl{limit: 3, remaining: 2, reset: T}},
				{status: 200, rl: &rl{limit: 3, remaining: 1, reset: 2 * T}},
				{status: 200, rl: &rl{limit: 3, remaining: 0, reset: 3 * T}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * T, retry: T}},
				{advance: T, status: 200, rl: &rl{limit: 3, remaining: 0, reset: 4 * T}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 4 * T, retry: 2 * T}},
			},
		})
	}

	{ // Plans by API key, the only code a service needs beyond New: free
		// keys get 2/h, pro keys 4/h, anything else the Limiter's own 1/h.
		// Each plan's IETF policy is named after it; a pro key exhausted
		// does not touch a free one.
		free, pro, own := store.PerHour(2), store.PerHour(4), store.PerHour(1)
		Tf, Tp, To := interval(free), interval(pro), interval(own)
		plan := func(r *http.Request) string {
			k := r.Header.Get("X-Api-Key")
			if i := strings.IndexByte(k, '-'); i > 0 {
				return k[:i]
			}
			return ""
		}
		key := func(k string) map[string]string { return map[string]string{"X-Api-Key": k} }
		// t: every request comes at once, so the next unit is back T after.
		ietf := func(name string, r int64, next time.Duration) []member { return []member{{name, r, next}} }
		pf, pp, po := policy("free", free), policy("pro", pro), policy("default", own)
		rows = append(rows, scenario{
			name: "plans by API key",
			routes: func(s *setup) []route {
				k, err := keyfuncs.Header("X-Api-Key")
				if err != nil {
					s.t.Fatal(err)
				}
				return []route{{path: "/api", l: s.limiter("api", k, []store.Limit{own},
					core.WithHeaders(core.HeadersLegacy|core.HeadersIETF), // policies named by plan, never "api.free"
					core.WithPolicyNames(map[string]string{"free": "free", "pro": "pro"}),
					core.WithPlans(plan, map[string][]store.Limit{"free": {free}, "pro": {pro}}))}}
			},
			steps: []step{
				{header: key("free-1"), status: 200, rl: &rl{limit: 2, remaining: 1, reset: Tf, policy: pf, ietf: ietf("free", 1, Tf)}},
				{header: key("free-1"), status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * Tf, policy: pf, ietf: ietf("free", 0, Tf)}},
				{header: key("free-1"), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * Tf, retry: Tf, policy: pf, ietf: ietf("free", 0, Tf)}},
				{header: key("pro-1"), status: 200, rl: &rl{limit: 4, remaining: 3, reset: Tp, policy: pp, ietf: ietf("pro", 3, Tp)}},
				{header: key("pro-1"), status: 200, rl: &rl{limit: 4, remaining: 2, reset: 2 * Tp, policy: pp, ietf: ietf("pro", 2, Tp)}},
				{header: key("pro-1"), status: 200, rl: &rl{limit: 4, remaining: 1, reset: 3 * Tp, policy: pp, ietf: ietf("pro", 1, Tp)}},
				{header: key("pro-1"), status: 200, rl: &rl{limit: 4, remaining: 0, reset: 4 * Tp, policy: pp, ietf: ietf("pro", 0, Tp)}},
				{header: key("pro-1"), status: 429, rl: &rl{limit: 4, remaining: 0, reset: 4 * Tp, retry: Tp, policy: pp, ietf: ietf("pro", 0, Tp)}},
				{header: key("other-1"), status: 200, rl: &rl{limit: 1, remaining: 0, reset: To, policy: po, ietf: ietf("default", 0, To)}},
				{header: key("other-1"), status: 429, rl: &rl{limit: 1, remaining: 0, reset: To, retry: To, policy: po, ietf: ietf("default", 0, To)}},
			},
		})
	}

	// The README's testing pattern, for every algorithm: exhaust a client,
	// move the clock (on miniredis: SetTime and FastForward), and the
	// client is served again, with the default configuration. Limits of
	// 2/min (LeakyBucket: 20/s, whose second request is held 50 ms); the
	// clock starts 20 s into a minute. Retry-After, from ALGORITHMS.md:
	// GCRA and TokenBucket T = 30 s; FixedWindow the 40 s left of the
	// window; SlidingLog until the first entry is a minute old; and
	// SlidingWindow (P-e) + P - ⌊(R-1)·P/c⌋ = 40 + 60 - 30 s.
	for _, c := range []struct {
		lim   store.Limit
		held  time.Duration // the second request's delay
		retry time.Duration
	}{
		{store.Limit{Algorithm: store.GCRA, Rate: 2, Period: time.Minute}, 0, 30 * time.Second},
		{store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Minute}, 0, 30 * time.Second},
		{store.Limit{Algorithm: store.FixedWindow, Rate: 2, Period: time.Minute}, 0, 40 * time.Second},
		{store.Limit{Algorithm: store.SlidingWindow, Rate: 2, Period: time.Minute}, 0, 70 * time.Second},
		{store.Limit{Algorithm: store.SlidingLog, Rate: 2, Period: time.Minute}, 0, time.Minute},
		{store.Limit{Algorithm: store.LeakyBucket, Rate: 20, Period: time.Second, Burst: 1}, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		lim := c.lim
		rows = append(rows, scenario{
			name:      "moving time serves again " + string(lim.Algorithm),
			fakeClock: true,
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithHeaders(0))
			},
			steps: []step{
				{status: 200},
				{status: 200, heldUntil: c.held},
				{status: 429, rl: &rl{retry: c.retry}},
				{advance: 2 * time.Minute, status: 200, heldUntil: 2 * time.Minute},
			},
		})
	}

	{ // IETF fields only: one member, named by WithPolicyName.
		lim := store.PerHour(3)
		T := interval(lim)
		pol := policy("api", lim)
		// t: every request comes at once, so the next unit is back T after.
		ietf := func(r int64, next time.Duration) []member { return []member{{"api", r, next}} }
		rows = append(rows, scenario{
			name: "IETF headers",
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithHeaders(core.HeadersIETF), core.WithPolicyNames(map[string]string{"": "api"}))
			},
			steps: []step{
				{status: 200, rl: &rl{policy: pol, ietf: ietf(2, T)}},
				{status: 200, rl: &rl{policy: pol, ietf: ietf(1, T)}},
				{status: 200, rl: &rl{policy: pol, ietf: ietf(0, T)}},
				{status: 429, rl: &rl{policy: pol, ietf: ietf(0, T), retry: T}},
			},
		})
	}

	{ // Several limits, 10/s (T1 = 100 ms) and 12/h (T2 = 300 s), both
		// header kinds. The legacy headers follow the binding limit: the one
		// with the least remaining, or the denying one. The denied 11th
		// request charges nothing: the hourly member shows its peek.
		perSec := store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 10}
		perHour := store.PerHour(12)
		T1, T2 := interval(perSec), interval(perHour)
		pol := policy("default-0", perSec) + ", " + policy("default-1", perHour)
		steps := []step{}
		for i := int64(1); i <= 10; i++ {
			d := time.Duration(i)
			steps = append(steps, step{status: 200, rl: &rl{
				limit: 10, remaining: 10 - i, reset: d * T1, policy: pol,
				ietf: []member{{"default-0", 10 - i, T1}, {"default-1", 12 - i, T2}}, // next units

			}})
		}
		steps = append(steps,
			step{status: 429, rl: &rl{
				limit: 10, remaining: 0, reset: 10 * T1, retry: T1, policy: pol,
				ietf: []member{{"default-0", 0, T1}, {"default-1", 2, T2}},
			}},
			// One second later the per-second limit is full again; the
			// hourly one has refilled nothing (1 s < T2), so it binds:
			// remaining floor((12·T2 - (11·T2 - 1s))/T2) = 1, then 0. Its
			// next unit is still back at start + T2; the per-second one's
			// at start + 1s + T1.
			step{advance: time.Second, status: 200, rl: &rl{
				limit: 12, remaining: 1, reset: 11 * T2, policy: pol,
				ietf: []member{{"default-0", 9, time.Second + T1}, {"default-1", 1, T2}},
			}},
			step{status: 200, rl: &rl{
				limit: 12, remaining: 0, reset: 12 * T2, policy: pol,
				ietf: []member{{"default-0", 8, time.Second + T1}, {"default-1", 0, T2}},
			}},
			// Denied by the hourly limit: it may pass at start + 13·T2 - 12·T2.
			step{status: 429, rl: &rl{
				limit: 12, remaining: 0, reset: 12 * T2, retry: T2, policy: pol,
				ietf: []member{{"default-0", 8, time.Second + T1}, {"default-1", 0, T2}},
			}},
		)
		rows = append(rows, scenario{
			name:      "several limits 10 per s and 12 per h, binding one",
			fakeClock: true,
			routes: func(s *setup) []route {
				return []route{{path: "/api", l: s.limiter("multi", mustIP(s.t), []store.Limit{perSec, perHour}, core.WithHeaders(core.HeadersLegacy|core.HeadersIETF))}}
			},
			steps: steps,
		})
	}

	{ // Several limits on any clock: 100/h (T1 = 36 s) and 3/min (T2 =
		// 20 s); the second one binds (the binding limit is not just the
		// first one) and denies the 4th request.
		perHour := store.PerHour(100)
		perMin := store.PerMinute(3)
		T1, T2 := interval(perHour), interval(perMin)
		pol := policy("default-0", perHour) + ", " + policy("default-1", perMin)
		steps := []step{}
		for i := int64(1); i <= 3; i++ {
			d := time.Duration(i)
			steps = append(steps, step{status: 200, rl: &rl{
				limit: 3, remaining: 3 - i, reset: d * T2, policy: pol,
				ietf: []member{{"default-0", 100 - i, T1}, {"default-1", 3 - i, T2}}, // next units
			}})
		}
		steps = append(steps, step{status: 429, rl: &rl{
			limit: 3, remaining: 0, reset: 3 * T2, retry: T2, policy: pol,
			ietf: []member{{"default-0", 97, T1}, {"default-1", 0, T2}},
		}})
		rows = append(rows, scenario{
			name: "several limits 100 per h and 3 per min",
			routes: func(s *setup) []route {
				return []route{{path: "/api", l: s.limiter("multi", mustIP(s.t), []store.Limit{perHour, perMin}, core.WithHeaders(core.HeadersLegacy|core.HeadersIETF))}}
			},
			steps: steps,
		})
	}

	{ // Skip: exempted requests get no headers and charge nothing.
		lim := store.PerHour(1)
		T := interval(lim)
		internal := map[string]string{"X-Internal": "yes"}
		rows = append(rows, scenario{
			name: "skip",
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithSkip(func(r *http.Request) bool {
					return r.Header.Get("X-Internal") == "yes"
				}))
			},
			steps: []step{
				{header: internal, status: 200},
				{status: 200, rl: &rl{limit: 1, remaining: 0, reset: T}},
				{header: internal, status: 200},
				{status: 429, rl: &rl{limit: 1, remaining: 0, reset: T, retry: T}},
				{header: internal, status: 200},
			},
		})
	}

	{ // Fixed cost 2 on GCRA 5/h (T = 12 min): 5 → 3 → 1; the third needs
		// 2 with 1 left: it may pass at 6T - 5T.
		lim := store.PerHour(5)
		T := interval(lim)
		rows = append(rows, scenario{
			name: "cost",
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithCost(func(*http.Request) int64 { return 2 }))
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 5, remaining: 3, reset: 2 * T}},
				{status: 200, rl: &rl{limit: 5, remaining: 1, reset: 4 * T}},
				{status: 429, rl: &rl{limit: 5, remaining: 1, reset: 4 * T, retry: T}},
			},
		})
	}

	{ // Cost per request from X-Cost, on GCRA 5/h (T = 12 min). Cost 0 is a
		// peek: served with the current figures. A cost over the burst can
		// never pass: 429 without Retry-After.
		lim := store.PerHour(5)
		T := interval(lim)
		cost := func(n int) map[string]string { return map[string]string{"X-Cost": strconv.Itoa(n)} }
		rows = append(rows, scenario{
			name: "cost function",
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithCost(func(r *http.Request) int64 {
					n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
					if err != nil {
						return 1
					}
					return n
				}))
			},
			steps: []step{
				{header: cost(0), status: 200, rl: &rl{limit: 5, remaining: 5, reset: 0}},
				{header: cost(3), status: 200, rl: &rl{limit: 5, remaining: 2, reset: 3 * T}},
				{header: cost(6), status: 429, rl: &rl{limit: 5, remaining: 2, reset: 3 * T}},
				{header: cost(2), status: 200, rl: &rl{limit: 5, remaining: 0, reset: 5 * T}},
				{header: cost(0), status: 200, rl: &rl{limit: 5, remaining: 0, reset: 5 * T}},
				{header: cost(1), status: 429, rl: &rl{limit: 5, remaining: 0, reset: 5 * T, retry: T}},
			},
		})
	}

	{ // Per-route limits: two limiters, same key function and store,
		// different names and limits; they never share state.
		a, b := store.PerHour(1), store.PerHour(2)
		Ta, Tb := interval(a), interval(b)
		rows = append(rows, scenario{
			name: "per-route limits",
			routes: func(s *setup) []route {
				return []route{
					{path: "/a", l: s.limiter("a", mustIP(s.t), []store.Limit{a})},
					{path: "/b", l: s.limiter("b", mustIP(s.t), []store.Limit{b})},
					{path: "/free", l: nil},
				}
			},
			steps: []step{
				{path: "/a", status: 200, rl: &rl{limit: 1, remaining: 0, reset: Ta}},
				{path: "/a", status: 429, rl: &rl{limit: 1, remaining: 0, reset: Ta, retry: Ta}},
				{path: "/b", status: 200, rl: &rl{limit: 2, remaining: 1, reset: Tb}},
				{path: "/free", status: 200},
				{path: "/b", status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * Tb}},
				{path: "/b", status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * Tb, retry: Tb}},
				{path: "/a", status: 429, rl: &rl{limit: 1, remaining: 0, reset: Ta, retry: Ta}},
			},
		})
	}

	{ // Route templates: keyfuncs.Route keys by the matched pattern (ServeMux
		// r.Pattern, gin FullPath, echo Path), so /users/1 and /users/2
		// share a limit and /posts/{id} has its own.
		lim := store.PerHour(2)
		T := interval(lim)
		rows = append(rows, scenario{
			name: "route templates",
			routes: func(s *setup) []route {
				l := s.limiter("routes", keyfuncs.Route(), []store.Limit{lim})
				return []route{{path: "/users/{id}", l: l}, {path: "/posts/{id}", l: l}}
			},
			steps: []step{
				{path: "/users/1", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{path: "/users/2", status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{path: "/users/3", status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{path: "/posts/1", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{path: "/posts/2", status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{path: "/posts/1", status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
			},
		})
	}

	{ // Route templates carry the method in every adapter, as ServeMux's
		// patterns do: GET and POST on one route have their own limits.
		lim := store.PerHour(1)
		T := interval(lim)
		rows = append(rows, scenario{
			name: "route templates per method",
			routes: func(s *setup) []route {
				l := s.limiter("methods", keyfuncs.Route(), []store.Limit{lim})
				return []route{{path: "/users/{id}", methods: []string{http.MethodGet, http.MethodPost}, l: l}}
			},
			steps: []step{
				{path: "/users/1", status: 200, rl: &rl{limit: 1, remaining: 0, reset: T}},
				{path: "/users/1", method: http.MethodPost, status: 200, rl: &rl{limit: 1, remaining: 0, reset: T}},
				{path: "/users/2", status: 429, rl: &rl{limit: 1, remaining: 0, reset: T, retry: T}},
				{path: "/users/2", method: http.MethodPost, status: 429, rl: &rl{limit: 1, remaining: 0, reset: T, retry: T}},
			},
		})
	}

	{ // Shadow mode: never refused, but the headers show the exhaustion
		// (without Retry-After, since nothing is refused).
		lim := store.PerHour(2)
		T := interval(lim)
		rows = append(rows, scenario{
			name:   "shadow mode",
			routes: func(s *setup) []route { return s.api([]store.Limit{lim}, core.WithShadow()) },
			steps: []step{
				{status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
			},
		})
	}

	{ // LeakyBucket 10/s, queue 2: T = 100 ms, capacity 3T, limit 3. The
		// k-th request leaves at (k-1)·T, so it is held until then; the 4th
		// would leave the queue over capacity: denied, may pass after T.
		// After 3T the queue is empty again.
		lim := store.Limit{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Second, Burst: 2}
		T := interval(lim)
		rows = append(rows, scenario{
			name:      "leaky bucket delay and 429",
			fakeClock: true,
			routes:    func(s *setup) []route { return s.api([]store.Limit{lim}) },
			steps: []step{
				{status: 200, rl: &rl{limit: 3, remaining: 2, reset: T}, heldUntil: 0},
				{status: 200, rl: &rl{limit: 3, remaining: 1, reset: 2 * T}, heldUntil: T},
				{status: 200, rl: &rl{limit: 3, remaining: 0, reset: 3 * T}, heldUntil: 2 * T},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * T, retry: T}},
				{advance: 3 * T, status: 200, rl: &rl{limit: 3, remaining: 2, reset: 4 * T}, heldUntil: 3 * T},
				// To be held for T, but the client goes away once the
				// Limiter has decided: the unavailable response, with the
				// headers of the charge already made (no Retry-After:
				// nothing was denied).
				{leaveWhenHeld: true, status: 503, rl: &rl{limit: 3, remaining: 1, reset: 5 * T}},
				// That charge stands: the next one leaves at 5T.
				{status: 200, rl: &rl{limit: 3, remaining: 0, reset: 6 * T}, heldUntil: 5 * T},
			},
		})
	}

	{ // LeakyBucket 2/s, queue 1, on any clock: T = 500 ms, capacity 2T.
		// The second request leaves at T after the first.
		lim := store.Limit{Algorithm: store.LeakyBucket, Rate: 2, Period: time.Second, Burst: 1}
		T := interval(lim)
		rows = append(rows, scenario{
			name:   "leaky bucket delay",
			routes: func(s *setup) []route { return s.api([]store.Limit{lim}) },
			steps: []step{
				{status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}, heldUntil: T},
			},
		})
	}

	{ // Dead Redis. FailLocal: a local store with the same limits decides,
		// with headers.
		lim := store.PerHour(2)
		T := interval(lim)
		rows = append(rows, scenario{
			name: "dead redis FailLocal",
			dead: true,
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithFailurePolicy(core.FailLocal))
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
			},
		})
		// FailOpen: served unlimited, without headers, never a 5xx.
		rows = append(rows, scenario{
			name: "dead redis FailOpen",
			dead: true,
			routes: func(s *setup) []route {
				return s.api([]store.Limit{store.PerHour(1)}, core.WithFailurePolicy(core.FailOpen))
			},
			steps: []step{{status: 200}, {status: 200}, {status: 200}},
		})
		// FailClosed: 503 with the JSON body, no headers, no error text.
		rows = append(rows, scenario{
			name: "dead redis FailClosed",
			dead: true,
			routes: func(s *setup) []route {
				return s.api([]store.Limit{store.PerHour(1)}, core.WithFailurePolicy(core.FailClosed))
			},
			steps: []step{{status: 503}, {status: 503}, {status: 503}},
		})
		// Shadow mode overrides the failure policy: served, no headers.
		rows = append(rows, scenario{
			name: "dead redis FailClosed in shadow mode",
			dead: true,
			routes: func(s *setup) []route {
				return s.api([]store.Limit{store.PerHour(1)}, core.WithFailurePolicy(core.FailClosed), core.WithShadow())
			},
			steps: []step{{status: 200}, {status: 200}},
		})
	}

	{ // IP behind trusted proxies 10.0.0.0/8. A peer outside them forging
		// forwarding headers is keyed by its own address: rotating values
		// buy it nothing.
		lim := store.PerHour(2)
		T := interval(lim)
		const peer = "203.0.113.7:40000"
		xff := func(v string) map[string]string { return map[string]string{"X-Forwarded-For": v} }
		routes := func(s *setup) []route {
			return []route{{path: "/api", l: s.limiter("api", mustIP(s.t, keyfuncs.WithTrustedProxies("10.0.0.0/8")), []store.Limit{lim})}}
		}
		rows = append(rows, scenario{
			name:   "spoofed X-Forwarded-For from an untrusted peer",
			routes: routes,
			steps: []step{
				{remote: peer, header: xff("198.51.100.1"), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{remote: peer, header: xff("198.51.100.2"), status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{remote: peer, header: xff("198.51.100.3"), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{remote: peer, header: xff("10.0.0.1"), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{remote: peer, header: map[string]string{"Forwarded": "for=198.51.100.4", "X-Real-Ip": "198.51.100.5"},
					status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				// The forged addresses were never charged.
				{remote: "198.51.100.1:5555", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
			},
		})
		// A trusted proxy forwarding distinct clients: each its own limit,
		// read from the right (entries a client prepends are ignored).
		lim1 := store.PerHour(1)
		T1 := interval(lim1)
		const proxy = "10.1.2.3:8080"
		rows = append(rows, scenario{
			name: "trusted proxy forwarding distinct clients",
			routes: func(s *setup) []route {
				return []route{{path: "/api", l: s.limiter("api", mustIP(s.t, keyfuncs.WithTrustedProxies("10.0.0.0/8")), []store.Limit{lim1})}}
			},
			steps: []step{
				{remote: proxy, header: xff("198.51.100.1"), status: 200, rl: &rl{limit: 1, remaining: 0, reset: T1}},
				{remote: proxy, header: xff("198.51.100.1"), status: 429, rl: &rl{limit: 1, remaining: 0, reset: T1, retry: T1}},
				{remote: proxy, header: xff("198.51.100.2"), status: 200, rl: &rl{limit: 1, remaining: 0, reset: T1}},
				{remote: proxy, header: xff("6.6.6.6, 198.51.100.2"), status: 429, rl: &rl{limit: 1, remaining: 0, reset: T1, retry: T1}},
				{remote: proxy, header: xff("198.51.100.1, 10.9.9.9"), status: 429, rl: &rl{limit: 1, remaining: 0, reset: T1, retry: T1}},
				{remote: proxy, header: xff("198.51.100.3"), status: 200, rl: &rl{limit: 1, remaining: 0, reset: T1}},
				// The proxy's own requests are keyed by the proxy.
				{remote: proxy, status: 200, rl: &rl{limit: 1, remaining: 0, reset: T1}},
			},
		})
	}

	{ // JWT keyed by "sub". Forged, expired and alg=none tokens (all
		// claiming alice) and a missing token follow the default key-error
		// rule, KeyErrorPerAddress: one bucket for all of them from one
		// address (the default peer here), never alice's.
		lim := store.PerHour(2)
		T := interval(lim)
		rows = append(rows, scenario{
			name:   "JWT forged expired none, bucket of the address",
			routes: func(s *setup) []route { return jwtRoutes(s, []store.Limit{lim}) },
			steps: []step{
				{header: bearer(tok.forged), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{header: bearer(tok.expired), status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{header: bearer(tok.algNone), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{header: bearer(tok.alice), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{header: bearer(tok.bob), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{header: bearer(tok.alice), status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{header: bearer(tok.alice), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
			},
		})
		// KeyErrorDeny: 403 with the JSON body, no rate-limit headers.
		rows = append(rows, scenario{
			name: "JWT forged expired none, KeyErrorDeny",
			routes: func(s *setup) []route {
				return jwtRoutes(s, []store.Limit{lim}, core.WithKeyErrorRule(core.KeyErrorDeny, nil))
			},
			steps: []step{
				{header: bearer(tok.forged), status: 403},
				{header: bearer(tok.expired), status: 403},
				{header: bearer(tok.algNone), status: 403},
				{status: 403},
				{header: map[string]string{"Authorization": "Bearer not.a.jwt"}, status: 403},
				{header: bearer(tok.alice), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{header: bearer(tok.forged), status: 403},
				{header: bearer(tok.alice), status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{header: bearer(tok.alice), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
			},
		})
		// KeyErrorAllow: served unlimited, without headers; alice's
		// allowance is untouched by the tokens that claim to be her.
		rows = append(rows, scenario{
			name: "JWT forged expired none, KeyErrorAllow",
			routes: func(s *setup) []route {
				return jwtRoutes(s, []store.Limit{lim}, core.WithKeyErrorRule(core.KeyErrorAllow, nil))
			},
			steps: []step{
				{header: bearer(tok.forged), status: 200},
				{header: bearer(tok.expired), status: 200},
				{header: bearer(tok.algNone), status: 200},
				{header: bearer(tok.forged), status: 200},
				{header: bearer(tok.alice), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
			},
		})
	}

	{ // A key error never charges strangers (issue 20, point 2): 60
		// requests with bad tokens from one client address spend that
		// address's allowance only; the next client without a key, from
		// another address, is served with a full allowance. Without
		// proxies the address is the peer; behind a trusted proxy it is
		// the one keyfuncs.IP resolves, given with WithKeyErrorRule.
		lim := store.PerHour(2)
		T := interval(lim)
		xff := func(v string) map[string]string { return map[string]string{"X-Forwarded-For": v} }
		bad := []map[string]string{bearer(tok.forged), bearer(tok.expired), bearer(tok.algNone), nil,
			{"Authorization": "Bearer " + strings.Repeat("x", 600)}}
		flood := func(remote string, via map[string]string) []step {
			steps := make([]step, 60)
			for i := range steps {
				h := map[string]string{}
				maps.Copy(h, bad[i%len(bad)])
				maps.Copy(h, via)
				steps[i] = step{remote: remote, header: h, status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}}
			}
			steps[0].status, steps[0].rl = 200, &rl{limit: 2, remaining: 1, reset: T}
			steps[1].status, steps[1].rl = 200, &rl{limit: 2, remaining: 0, reset: 2 * T}
			return steps
		}
		rows = append(rows, scenario{
			name:   "60 bad keys from one address, another address served",
			routes: func(s *setup) []route { return jwtRoutes(s, []store.Limit{lim}) },
			steps: append(flood("198.51.100.1:4000", nil),
				step{remote: "198.51.100.2:4000", header: bearer(tok.expired), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				step{remote: "[2001:db8:0:100::1]:4000", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				step{remote: "198.51.100.1:4001", header: bearer(tok.alice), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
			),
		})
		const proxy = "10.1.2.3:8080"
		rows = append(rows, scenario{
			name: "60 bad keys from one address behind a trusted proxy, another address served",
			routes: func(s *setup) []route {
				return jwtRoutes(s, []store.Limit{lim},
					core.WithKeyErrorRule(core.KeyErrorPerAddress, mustIP(s.t, keyfuncs.WithTrustedProxies("10.0.0.0/8"))))
			},
			steps: append(flood(proxy, xff("198.51.100.1")),
				step{remote: proxy, header: map[string]string{"X-Forwarded-For": "198.51.100.2", "Authorization": "Bearer " + tok.forged},
					status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				step{remote: proxy, header: xff("6.6.6.6, 198.51.100.1"), status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				step{remote: "10.9.9.9:80", header: xff("198.51.100.3"), status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
			),
		})
	}

	{ // Nested limiters on one route: a site-wide 3/h in front of a
		// route's 1/h. The binding decision's figures are sent: the one
		// with the least remaining, the route's. A request the inner
		// limiter refuses has already been charged by the outer one; once
		// the outer one is exhausted, it refuses with its own figures and
		// the inner one is not asked.
		site, page := store.PerHour(3), store.PerHour(1)
		Ts, Tp := interval(site), interval(page)
		rows = append(rows, scenario{
			name: "nested limiters",
			routes: func(s *setup) []route {
				return []route{{
					path:  "/api",
					outer: s.limiter("site", mustIP(s.t), []store.Limit{site}),
					l:     s.limiter("page", mustIP(s.t), []store.Limit{page}),
				}}
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 1, remaining: 0, reset: Tp}},
				{status: 429, rl: &rl{limit: 1, remaining: 0, reset: Tp, retry: Tp}},
				{status: 429, rl: &rl{limit: 1, remaining: 0, reset: Tp, retry: Tp}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * Ts, retry: Ts}},
			},
		})
	}

	{ // Stacked limiters, global binds: a global 3/h (ServeMux wrapper,
		// gin's and echo's Use), a group's 50/h and the route's 100/h. The
		// global one has the least remaining: its figures are sent, not the
		// route's, which ran last. Once it refuses, the others are not asked.
		global, group, page := store.PerHour(3), store.PerHour(50), store.PerHour(100)
		Tg := interval(global)
		rows = append(rows, scenario{
			name: "stacked limiters, global binds",
			routes: func(s *setup) []route {
				return []route{{
					path:   "/api",
					global: s.limiter("global", mustIP(s.t), []store.Limit{global}),
					outer:  s.limiter("group", mustIP(s.t), []store.Limit{group}),
					l:      s.limiter("route", mustIP(s.t), []store.Limit{page}),
				}}
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 3, remaining: 2, reset: Tg}},
				{status: 200, rl: &rl{limit: 3, remaining: 1, reset: 2 * Tg}},
				{status: 200, rl: &rl{limit: 3, remaining: 0, reset: 3 * Tg}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * Tg, retry: Tg}},
			},
		})
	}

	{ // Stacked limiters, route binds: global 100/h, group 50/h, route
		// 3/h. The route's figures are sent, and its refusal.
		global, group, page := store.PerHour(100), store.PerHour(50), store.PerHour(3)
		Tp := interval(page)
		rows = append(rows, scenario{
			name: "stacked limiters, route binds",
			routes: func(s *setup) []route {
				return []route{{
					path:   "/api",
					global: s.limiter("global", mustIP(s.t), []store.Limit{global}),
					outer:  s.limiter("group", mustIP(s.t), []store.Limit{group}),
					l:      s.limiter("route", mustIP(s.t), []store.Limit{page}),
				}}
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 3, remaining: 2, reset: Tp}},
				{status: 200, rl: &rl{limit: 3, remaining: 1, reset: 2 * Tp}},
				{status: 200, rl: &rl{limit: 3, remaining: 0, reset: 3 * Tp}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * Tp, retry: Tp}},
			},
		})
	}

	{ // Stacked limiters, refused by one: a global 3/h (Tg = 20 min) and
		// a route's 10/h at cost 4 (T = 6 min: 10 → 6 → 2). The third
		// request leaves the global one at 0 and is refused by the route's
		// (it needs 4 with 2 left, at 8T + 4T - 10T): the refusal's own
		// figures are sent, though the global one has less remaining. The
		// fourth is refused by the global one, with its own.
		global, page := store.PerHour(3), store.PerHour(10)
		Tg, T := interval(global), interval(page)
		rows = append(rows, scenario{
			name: "stacked limiters, refused by one",
			routes: func(s *setup) []route {
				return []route{{
					path:   "/api",
					global: s.limiter("global", mustIP(s.t), []store.Limit{global}),
					l:      s.limiter("route", mustIP(s.t), []store.Limit{page}, core.WithCost(func(*http.Request) int64 { return 4 })),
				}}
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 3, remaining: 2, reset: Tg}},
				{status: 200, rl: &rl{limit: 3, remaining: 1, reset: 2 * Tg}},
				{status: 429, rl: &rl{limit: 10, remaining: 2, reset: 8 * T, retry: 2 * T}},
				{status: 429, rl: &rl{limit: 3, remaining: 0, reset: 3 * Tg, retry: Tg}},
			},
		})
	}

	{ // FromContext in the handler: global 5/h (Tg = 12 min), a route's
		// 10/h at cost 3 (T = 6 min: 10 → 7 → 4 → 1). The handler writes
		// what core.FromContext gives it, which must be the headers'
		// figures: the global one's, then the route's once it has the least
		// remaining; the fourth request is refused by the route's, whose
		// own figures are sent (the global one has 1 left too).
		global, page := store.PerHour(5), store.PerHour(10)
		Tg, T := interval(global), interval(page)
		rows = append(rows, scenario{
			name: "stacked limiters, FromContext in the handler",
			routes: func(s *setup) []route {
				return []route{{
					path:        "/api",
					global:      s.limiter("global", mustIP(s.t), []store.Limit{global}),
					l:           s.limiter("route", mustIP(s.t), []store.Limit{page}, core.WithCost(func(*http.Request) int64 { return 3 })),
					fromContext: true,
				}}
			},
			steps: []step{
				{status: 200, body: "ok limit=5 remaining=4", rl: &rl{limit: 5, remaining: 4, reset: Tg}},
				{status: 200, body: "ok limit=5 remaining=3", rl: &rl{limit: 5, remaining: 3, reset: 2 * Tg}},
				{status: 200, body: "ok limit=10 remaining=1", rl: &rl{limit: 10, remaining: 1, reset: 9 * T}},
				{status: 429, rl: &rl{limit: 10, remaining: 1, reset: 9 * T, retry: 2 * T}},
			},
		})
	}

	{ // Stacked limiters, a skipped one does not bind: global 2/h in front
		// of a route Limiter that skips every request (no store result).
		// The global one's figures are sent and given to the handler.
		global := store.PerHour(2)
		Tg := interval(global)
		rows = append(rows, scenario{
			name: "stacked limiters, a skipped one does not bind",
			routes: func(s *setup) []route {
				return []route{{
					path:   "/api",
					global: s.limiter("global", mustIP(s.t), []store.Limit{global}),
					l: s.limiter("route", mustIP(s.t), []store.Limit{store.PerHour(100)},
						core.WithSkip(func(*http.Request) bool { return true })),
					fromContext: true,
				}}
			},
			steps: []step{
				{status: 200, body: "ok limit=2 remaining=1", rl: &rl{limit: 2, remaining: 1, reset: Tg}},
				{status: 200, body: "ok limit=2 remaining=0", rl: &rl{limit: 2, remaining: 0, reset: 2 * Tg}},
				{status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * Tg, retry: Tg}},
			},
		})
	}

	{ // IPv6 clients are grouped by /56, and an IPv4-mapped or 6to4 IPv6
		// peer is its IPv4 address: rotating addresses or /64s inside a
		// /56, or writing one IPv4 address three ways, buys nothing.
		lim := store.PerHour(2)
		T := interval(lim)
		rows = append(rows, scenario{
			name:   "IPv6 /56, IPv4-mapped and 6to4 peers",
			routes: func(s *setup) []route { return s.api([]store.Limit{lim}) },
			steps: []step{
				{remote: "[2001:db8:1:2::1]:40000", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{remote: "[2001:db8:1:2:ffff::9]:40001", status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{remote: "[2001:db8:1:2:abcd:1:2:3]:40002", status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{remote: "[2001:db8:1:ff::1]:40000", status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
				{remote: "[2001:db8:1:100::1]:40000", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{remote: "203.0.113.9:1", status: 200, rl: &rl{limit: 2, remaining: 1, reset: T}},
				{remote: "[::ffff:203.0.113.9]:2", status: 200, rl: &rl{limit: 2, remaining: 0, reset: 2 * T}},
				{remote: "[2002:cb00:7109:1::1]:3", status: 429, rl: &rl{limit: 2, remaining: 0, reset: 2 * T, retry: T}},
			},
		})
	}

	{ // Custom deny response: its status, type and body, with the
		// rate-limit headers and Retry-After as usual.
		lim := store.PerHour(1)
		T := interval(lim)
		rows = append(rows, scenario{
			name: "custom deny response",
			routes: func(s *setup) []route {
				return s.api([]store.Limit{lim}, core.WithRefusal(func(_ *http.Request, d core.Decision) core.Response {
					if d.Outcome != core.OutcomeDenied {
						return d.Response()
					}
					return core.Response{Status: http.StatusTeapot, ContentType: "text/plain; charset=utf-8", Body: []byte("slow down, please\n")}
				}))
			},
			steps: []step{
				{status: 200, rl: &rl{limit: 1, remaining: 0, reset: T}},
				{status: 418, body: "slow down, please\n", ctype: "text/plain; charset=utf-8", rl: &rl{limit: 1, remaining: 0, reset: T, retry: T}},
				{status: 418, body: "slow down, please\n", ctype: "text/plain; charset=utf-8", rl: &rl{limit: 1, remaining: 0, reset: T, retry: T}},
			},
		})
	}

	return rows
}

// ---------------------------------------------------------------------------
// Running and checking.

func TestMiddlewareScenarios(t *testing.T) {
	rows := scenarios(mintTokens(t))
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			newEnv := kind.prepare(t)
			for _, ad := range adapters {
				for _, sc := range rows {
					if sc.fakeClock && !kind.fake {
						continue // the row moves the clock: fake clocks only
					}
					t.Run(ad.name+"/"+sc.name, func(t *testing.T) {
						t.Parallel()
						run(t, newEnv(t), ad, sc)
					})
				}
			}
		})
	}
}

const defaultRemote = "192.0.2.1:1234"

// leaks are fragments of Go error text that must never reach a client.
var leaks = []string{
	"sluice", "keyfuncs", "redis", "dial", "refused", "connection", "deadline", "context",
	"breaker", "token", "jwt", "signature", "expired", "forwarded", "no key", "invalid",
	"panic", "goroutine", "127.0.0.1", ".go:",
}

func run(t *testing.T, e *env, ad adapter, sc scenario) {
	s := &setup{t: t, e: e, store: e.live, dead: sc.dead}
	if sc.dead {
		s.store = e.dead
	}
	p := &probe{}
	h := ad.build(sc.routes(s), p)

	var start time.Time // the scenario's start on the store's clock
	if e.fake() {
		start = e.clock.Now()
	} else {
		start = time.Now()
	}
	var slack time.Duration // the longest request so far (real clock)
	for i, st := range sc.steps {
		if st.advance != 0 {
			if !e.fake() {
				t.Fatalf("step %d moves the clock, but the scenario is not marked fakeClock", i+1)
			}
			e.clock.advance(st.advance)
		}
		path := st.path
		if path == "" {
			path = "/api"
		}
		method := st.method
		if method == "" {
			method = http.MethodGet
		}
		req := httptest.NewRequest(method, "http://example.com"+path, nil)
		req.RemoteAddr = defaultRemote
		if st.remote != "" {
			req.RemoteAddr = st.remote
		}
		for k, v := range st.header {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		n0, _ := p.state()

		cancel := context.CancelFunc(func() {})
		if st.leaveWhenHeld {
			ctx, c := context.WithCancel(req.Context())
			cancel = c
			req = req.WithContext(context.WithValue(ctx, leaveKey{}, c))
		}
		before := time.Now()
		h.ServeHTTP(w, req)
		after := time.Now()
		cancel()
		slack = max(slack, after.Sub(before))
		tm := timing{fake: e.fake(), start: start, before: before, after: after, slack: slack}
		if e.fake() {
			tm.now = e.clock.Now()
		}

		res := w.Result()
		body := w.Body.String()
		where := fmt.Sprintf("step %d (%s %s from %s %v)", i+1, method, path, req.RemoteAddr, st.header)
		dump := fmt.Sprintf("got %d %q\nheaders %v", res.StatusCode, body, res.Header)

		if res.StatusCode != st.status {
			t.Fatalf("%s: status %d, want %d\n%s", where, res.StatusCode, st.status, dump)
		}
		wantBody := st.body
		if wantBody == "" {
			wantBody = defaultBody(t, st.status)
		}
		if body != wantBody {
			t.Errorf("%s: body %q, want %q\n%s", where, body, wantBody, dump)
		}
		lower := strings.ToLower(body)
		for _, frag := range leaks {
			if strings.Contains(lower, frag) {
				t.Errorf("%s: body leaks %q: %q", where, frag, body)
			}
		}
		wantReached := strings.HasPrefix(wantBody, "ok")
		if !wantReached {
			ctype := st.ctype
			if ctype == "" {
				ctype = "application/json"
				var v map[string]string
				if err := json.Unmarshal([]byte(body), &v); err != nil || len(v) != 1 || v["error"] == "" {
					t.Errorf("%s: body %q is not {\"error\": ...} JSON (%v)", where, body, err)
				}
			}
			if got := res.Header.Values("Content-Type"); len(got) != 1 || got[0] != ctype {
				t.Errorf("%s: Content-Type %q, want %q", where, got, ctype)
			}
		}

		if wantReached && wantBody != "ok" {
			// The handler wrote what core.FromContext gave it: the
			// figures of the headers.
			fromHeaders := fmt.Sprintf("ok limit=%s remaining=%s", res.Header.Get("X-Ratelimit-Limit"), res.Header.Get("X-Ratelimit-Remaining"))
			if body != fromHeaders {
				t.Errorf("%s: the handler's FromContext says %q, the headers %q", where, body, fromHeaders)
			}
		}
		n1, reached := p.state()
		if got := n1 - n0; wantReached && got != 1 || !wantReached && got != 0 {
			t.Errorf("%s: handler called %d times, want reached=%v", where, got, wantReached)
		}
		if wantReached {
			checkHold(t, where, e, st.heldUntil, tm, before, reached)
		}
		checkRateLimitHeaders(t, where, res.Header, st.rl, tm)
	}
}

func defaultBody(t *testing.T, status int) string {
	switch status {
	case 200:
		return "ok"
	case 429:
		return `{"error":"rate limit exceeded"}` + "\n"
	case 503:
		return `{"error":"service unavailable"}` + "\n"
	case 403:
		return `{"error":"forbidden"}` + "\n"
	}
	t.Fatalf("no default body for status %d", status)
	return ""
}

// timing locates a request on the store's clock. Offsets in the table
// count from the scenario's start. On a fake clock start and now (when the
// store decided) are exact, and a key's first request is at start plus
// whatever the table says. On the real clock start is read before the first
// request, the store decided in [before, after], and a key's first request,
// which its offsets count from, was decided in [start, the store's now].
//
// The real Redis store's deny cache (redisstore.WithDenyCache) answers a
// repeated denial from memory with figures that may be up to one round
// trip early, never late; slack, the longest request of the scenario so
// far, bounds that round trip, and widens the lower bounds on that clock.
type timing struct {
	fake          bool
	start, now    time.Time // now: fake clock only
	before, after time.Time // around the request, real time
	slack         time.Duration
}

// epoch returns the range of X-RateLimit-Reset for a key that is full again
// at offset off: the Unix second of start+off, rounded up. On the real clock
// the Limiter adds the store's ResetAfter to its own clock, read after the
// store's: at least start+off, at most after+off.
func (tm timing) epoch(off time.Duration) (lo, hi int64) {
	if tm.fake {
		v := ceilUnix(tm.start.Add(off))
		return v, v
	}
	return ceilUnix(tm.start.Add(off - tm.slack)), ceilUnix(tm.after.Add(off))
}

// delta returns the range of a delta-seconds field (Retry-After, the IETF
// t) for the moment at offset off: the seconds from the decision to it,
// rounded up. On the real clock the moment is at most off after the
// decision (the key's first request came no later), at least start+off
// minus the latest the decision can have been.
func (tm timing) delta(off time.Duration) (lo, hi int64) {
	if tm.fake {
		v := ceilSeconds(tm.start.Add(off).Sub(tm.now))
		return v, v
	}
	return ceilSeconds(tm.start.Add(off - tm.slack).Sub(tm.after)), ceilSeconds(off)
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// checkHold checks a held request: the handler ran no earlier than
// start+heldUntil on the store's clock (Decision.Wait's timer never fires
// early), and not absurdly late. On a fake clock that is heldUntil minus the
// fake time already passed, after the request began; on the real clock the
// departure is counted from the first request, taken no earlier than start.
func checkHold(t *testing.T, where string, e *env, heldUntil time.Duration, tm timing, before, reached time.Time) {
	t.Helper()
	var earliest time.Time
	if e.fake() {
		earliest = before.Add(heldUntil - tm.now.Sub(tm.start))
	} else {
		// Redis' TIME and time.Now share the system clock; allow for the
		// wall clock stepping against the monotonic one.
		earliest = tm.start.Add(heldUntil - 5*time.Millisecond)
	}
	if reached.Before(earliest) {
		t.Errorf("%s: handler ran %v early (held %v after the request began; want it held until start+%v)",
			where, earliest.Sub(reached), reached.Sub(before), heldUntil)
	}
	if late := reached.Sub(earliest); late > 10*time.Second {
		t.Errorf("%s: handler ran %v after it was due", where, late)
	}
}

var rateLimitHeaders = []string{
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After",
	"Ratelimit", "Ratelimit-Policy",
}

func checkRateLimitHeaders(t *testing.T, where string, h http.Header, want *rl, tm timing) {
	t.Helper()
	if want == nil {
		for _, name := range rateLimitHeaders {
			if v, ok := h[name]; ok {
				t.Errorf("%s: %s: %q, want no such header", where, name, v)
			}
		}
		return
	}
	one := func(name string) (string, bool) {
		v := h.Values(name)
		if len(v) > 1 {
			t.Errorf("%s: %s sent %d times: %q", where, name, len(v), v)
		}
		if len(v) == 0 {
			return "", false
		}
		return v[0], true
	}
	absent := func(names ...string) {
		for _, name := range names {
			if v, ok := one(name); ok {
				t.Errorf("%s: %s: %q, want no such header", where, name, v)
			}
		}
	}
	inRange := func(name, got string, lo, hi int64) {
		n, err := strconv.ParseInt(got, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != got || n < lo || n > hi {
			if lo == hi {
				t.Errorf("%s: %s: %q, want %d", where, name, got, lo)
			} else {
				t.Errorf("%s: %s: %q, want %d..%d", where, name, got, lo, hi)
			}
		}
	}

	if want.limit > 0 {
		if v, _ := one("X-Ratelimit-Limit"); v != strconv.FormatInt(want.limit, 10) {
			t.Errorf("%s: X-RateLimit-Limit: %q, want %d", where, v, want.limit)
		}
		if v, _ := one("X-Ratelimit-Remaining"); v != strconv.FormatInt(want.remaining, 10) {
			t.Errorf("%s: X-RateLimit-Remaining: %q, want %d", where, v, want.remaining)
		}
		v, _ := one("X-Ratelimit-Reset")
		lo, hi := tm.epoch(want.reset)
		inRange("X-RateLimit-Reset", v, lo, hi)
	} else {
		absent("X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset")
	}

	if want.retry > 0 {
		v, ok := one("Retry-After")
		if !ok {
			t.Errorf("%s: no Retry-After", where)
		} else {
			lo, hi := tm.delta(want.retry)
			inRange("Retry-After", v, max(lo, 1), max(hi, 1))
		}
	} else {
		absent("Retry-After")
	}

	if want.policy == "" {
		absent("Ratelimit", "Ratelimit-Policy")
		return
	}
	if v, _ := one("Ratelimit-Policy"); v != want.policy {
		t.Errorf("%s: RateLimit-Policy: %q, want %q", where, v, want.policy)
	}
	v, _ := one("Ratelimit")
	items := strings.Split(v, ", ")
	if len(items) != len(want.ietf) {
		t.Errorf("%s: RateLimit: %q, want %d members", where, v, len(want.ietf))
		return
	}
	for i, m := range want.ietf {
		parts := strings.Split(items[i], ";")
		if len(parts) != 3 || parts[0] != strconv.Quote(m.name) || parts[1] != "r="+strconv.FormatInt(m.r, 10) ||
			!strings.HasPrefix(parts[2], "t=") {
			t.Errorf("%s: RateLimit member %d: %q, want %q;r=%d;t=...", where, i, items[i], m.name, m.r)
			continue
		}
		lo, hi := tm.delta(m.next)
		inRange(fmt.Sprintf("RateLimit member %d t", i), strings.TrimPrefix(parts[2], "t="), lo, hi)
	}
}
