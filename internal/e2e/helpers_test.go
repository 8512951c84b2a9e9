package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// clientHeader carries the key the load generator chooses, for services
// keyed with keyfuncs.Header (the demo's -key header:X-Client).
const clientHeader = "X-Client"

// longPeriod is a period over which nothing refills while a test runs
// (1000 hours: GCRA and LeakyBucket emit one unit every 7.2 s even at a
// rate of 500 per hour, which a test of a few seconds would see), chosen
// so that no epoch-aligned window boundary (FixedWindow, SlidingWindow)
// falls within the next ten minutes.
func longPeriod() time.Duration {
	p := 1000 * time.Hour
	for time.Duration(time.Now().UnixNano())%p > p-10*time.Minute {
		p -= time.Hour
	}
	return p
}

// uniq returns a name no other call in this test binary returns, for keys
// and limiter names that must start with a fresh allowance.
func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, uniqSeq.Add(1))
}

var uniqSeq atomic.Int64

// roomy is the deadline of the stores of services that check counts
// exactly: no slow moment of a loaded machine runs out of it.
const roomy = 2 * time.Second

// defaultTimeout is the Redis store's deadline when none is given.
const defaultTimeout = 100 * time.Millisecond

// newStore returns a Redis store on rdb whose deadline is timeout, closed
// when the test ends.
func newStore(t testing.TB, rdb redis.UniversalClient, timeout time.Duration, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(rdb, append([]redisstore.Option{redisstore.WithTimeout(timeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// exactStore is the store of services that check counts exactly: a roomy
// deadline, and no fallback (they refuse when Redis fails), so no
// subscription that the fallbacks of other stores on the same Redis would
// count as an instance of their fleet.
func exactStore(t testing.TB, rdb redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	return newStore(t, rdb, roomy, append([]redisstore.Option{redisstore.WithFallback(nil)}, opts...)...)
}

// newRedisClient returns a client configured as redisstore.New recommends
// for a limiter (redisstore.UniversalOptions): the context's deadline
// bounds every wait, a Take is never re-sent, and a refused connection is
// reported at once, not retried until the deadline.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(redisstore.UniversalOptions(addr).Simple())
}

// newClusterClient is newRedisClient for a Cluster.
func newClusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(redisstore.UniversalOptions(addrs...).Cluster())
}

// tally observes a Limiter's decisions.
type tally struct {
	mu        sync.Mutex
	byOutcome map[core.Outcome]int
	served    map[core.Outcome]int // decisions with Action Serve or Hold
	errs      map[string]int       // kv errors by kind
	lastErr   error

	mark      atomic.Int64 // unix ns; decisions after it are watched
	recovered atomic.Int64 // unix ns of the first kv decision (Err nil) after mark
	lastFail  atomic.Int64 // unix ns of the latest decision with a kv error
}

func newTally() *tally {
	return &tally{byOutcome: map[core.Outcome]int{}, served: map[core.Outcome]int{}, errs: map[string]int{}}
}

// observe counts ev. A fallback decision without a store error is one the
// local fallback made without calling the store, holding a key it had
// admitted while its debts settle after a failure: it is counted as the
// failure kind "held", and is not a decision of the store.
func (ta *tally) observe(ev core.Event) {
	now := time.Now().UnixNano()
	held := ev.Outcome == core.OutcomeFallback && ev.Err == nil
	ta.mu.Lock()
	ta.byOutcome[ev.Outcome]++
	if ev.Action != core.Refuse {
		ta.served[ev.Outcome]++
	}
	if ev.Err != nil {
		ta.errs[errKind(ev.Err)]++
		ta.lastErr = ev.Err
	} else if held {
		ta.errs["held"]++
	}
	ta.mu.Unlock()
	if held {
		return
	}
	if ev.Err != nil {
		ta.lastFail.Store(now)
		return
	}
	if m := ta.mark.Load(); m != 0 && now > m && ev.KeyErr == nil {
		ta.recovered.CompareAndSwap(0, now)
	}
}

// watch starts watching for the first decision made by the store.
func (ta *tally) watch() time.Time {
	now := time.Now()
	ta.recovered.Store(0)
	ta.mark.Store(now.UnixNano())
	return now
}

// waitRecovered waits up to max for the first store decision after watch.
func (ta *tally) waitRecovered(max time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		if r := ta.recovered.Load(); r != 0 {
			return time.Unix(0, r), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, false
}

type tallySnapshot struct {
	byOutcome, served map[core.Outcome]int
	errs              map[string]int
	storeErrs         int
	lastErr           error
}

func (ta *tally) snapshot() tallySnapshot {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	s := tallySnapshot{byOutcome: map[core.Outcome]int{}, served: map[core.Outcome]int{}, errs: map[string]int{}, lastErr: ta.lastErr}
	for k, v := range ta.byOutcome {
		s.byOutcome[k] = v
	}
	for k, v := range ta.served {
		s.served[k] = v
	}
	for k, v := range ta.errs {
		s.errs[k] = v
		s.storeErrs += v
	}
	return s
}

// sub returns s minus an earlier snapshot.
func (s tallySnapshot) sub(before tallySnapshot) tallySnapshot {
	d := tallySnapshot{byOutcome: map[core.Outcome]int{}, served: map[core.Outcome]int{}, errs: map[string]int{}, lastErr: s.lastErr}
	for k, v := range s.byOutcome {
		d.byOutcome[k] = v - before.byOutcome[k]
	}
	for k, v := range s.served {
		d.served[k] = v - before.served[k]
	}
	for k, v := range s.errs {
		d.errs[k] = v - before.errs[k]
		d.storeErrs += d.errs[k]
	}
	return d
}

func (s tallySnapshot) String() string {
	var parts []string
	for o := core.OutcomeAllowed; o <= core.OutcomeKeyError; o++ {
		if n := s.byOutcome[o]; n != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d(served %d)", o, n, s.served[o]))
		}
	}
	kinds := make([]string, 0, len(s.errs))
	for k, v := range s.errs {
		if v != 0 {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
		}
	}
	slices.Sort(kinds)
	return strings.Join(parts, " ") + " store-errors{" + strings.Join(kinds, " ") + "}"
}

// errKind classifies a store error for the figures.
func errKind(err error) string {
	switch {
	case errors.Is(err, store.ErrBreakerOpen):
		return "breaker-open"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "deadline"
	case strings.Contains(err.Error(), "connection refused"):
		return "refused"
	case strings.Contains(err.Error(), "NOSCRIPT"):
		return "noscript"
	case strings.Contains(err.Error(), "EOF"), strings.Contains(err.Error(), "reset by peer"), strings.Contains(err.Error(), "broken pipe"):
		return "conn-broken"
	}
	return "other"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// service is a limited "ok" handler served over loopback TCP, in process,
// so that the test sees every decision.
type service struct {
	lim   *core.Limiter
	tally *tally
	srv   *httptest.Server
	URL   string
}

// newService starts a service limiting every request with limits in
// store, keyed by the X-Client header.
func newService(t testing.TB, kv store.Store, limits []store.Limit, opts ...core.Option) *service {
	t.Helper()
	return newNamedService(t, kv, uniq("svc"), headerKey(t), limits, opts...)
}

// headerKey is the key function of newService: the clientHeader.
func headerKey(t testing.TB) core.KeyFunc {
	t.Helper()
	key, err := keyfuncs.Header(clientHeader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func newServiceKey(t testing.TB, kv store.Store, key core.KeyFunc, limits []store.Limit, opts ...core.Option) *service {
	return newNamedService(t, kv, uniq("svc"), key, limits, opts...)
}

// newNamedService is newServiceKey with the Limiter's name: services of
// one name on one store share their state.
func newNamedService(t testing.TB, kv store.Store, name string, key core.KeyFunc, limits []store.Limit, opts ...core.Option) *service {
	t.Helper()
	ta := newTally()
	// By default a store failure refuses (503), so that a slow moment of a
	// loaded machine can neither admit a request through a local fallback
	// nor pass unnoticed: tests of exact counts then fail loudly (their
	// stores have a roomy deadline, see newStore). The fault tests set
	// their own policy.
	opts = append([]core.Option{
		core.WithObserver(ta.observe), core.WithFailurePolicy(core.FailClosed),
	}, opts...)
	lim, err := core.New(kv, name, key, limits, opts...)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(nethttp.Middleware(lim)(ok))
	return &service{lim: lim, tally: ta, srv: srv, URL: srv.URL}
}

func (s *service) Close() { s.srv.Close() }

// newHTTPClient returns a client for the load generator; close its idle
// connections when done.
func newHTTPClient(workers int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        4 * workers,
			MaxIdleConnsPerHost: 2 * workers,
			DisableCompression:  true,
		},
		Timeout: 30 * time.Second, // a hang guard; tests assert far tighter bounds
	}
}

// reply is one request of the load generator.
type reply struct {
	status  int // 0 for a transport error
	latency time.Duration
	err     error
	body    string
	header  http.Header
	at      time.Time // when it was sent
	target  int       // index of the URL it went to
	index   int       // i, the request's number in its load
}

// load describes a run of the load generator: workers goroutines send
// requests (n in all, or until stop is closed when n is 0), request i to
// urls[i%len(urls)], with the header X-Client: key(i).
type load struct {
	client  *http.Client
	urls    []string
	workers int
	n       int
	stop    <-chan struct{}
	key     func(i int) string
	prepare func(i int, r *http.Request) // optional: more headers
	timeout time.Duration                // per request; 0 means the client's
	keep    bool                         // keep the body and headers of each reply
}

// run sends the requests and returns every reply, in the order sent.
func (l load) run(ctx context.Context) []reply {
	var (
		next    atomic.Int64
		mu      sync.Mutex
		replies []reply
		wg      sync.WaitGroup
	)
	for range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []reply
			defer func() {
				mu.Lock()
				replies = append(replies, mine...)
				mu.Unlock()
			}()
			for {
				if l.stop != nil {
					select {
					case <-l.stop:
						return
					default:
					}
				}
				i := int(next.Add(1) - 1)
				if l.n > 0 && i >= l.n {
					return
				}
				if ctx.Err() != nil {
					return
				}
				mine = append(mine, l.one(ctx, i))
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(replies, func(a, b reply) int { return a.at.Compare(b.at) })
	return replies
}

func (l load) one(ctx context.Context, i int) reply {
	target := i % len(l.urls)
	rp := reply{at: time.Now(), target: target, index: i}
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.urls[target], nil)
	if err != nil {
		rp.err = err
		return rp
	}
	if l.key != nil {
		req.Header.Set(clientHeader, l.key(i))
	}
	if l.prepare != nil {
		l.prepare(i, req)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		rp.err, rp.latency = err, time.Since(rp.at)
		return rp
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	rp.latency = time.Since(rp.at)
	rp.status = resp.StatusCode
	if err != nil {
		rp.err = err
	}
	if l.keep {
		rp.body, rp.header = string(body), resp.Header
	}
	return rp
}

// stats summarises replies.
type stats struct {
	sent   int
	status map[int]int
	errs   int
	first  error
	lat    []time.Duration // sorted
}

func summarize(rs []reply) stats {
	s := stats{status: map[int]int{}}
	for _, r := range rs {
		s.sent++
		s.lat = append(s.lat, r.latency)
		if r.err != nil {
			s.errs++
			if s.first == nil {
				s.first = r.err
			}
			continue
		}
		s.status[r.status]++
	}
	slices.Sort(s.lat)
	return s
}

func (s stats) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	i := int(p * float64(len(s.lat)-1))
	return s.lat[i]
}

func (s stats) max() time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	return s.lat[len(s.lat)-1]
}

func (s stats) String() string {
	codes := make([]int, 0, len(s.status))
	for c := range s.status {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d:", s.sent)
	for _, c := range codes {
		fmt.Fprintf(&b, " %d×%d", s.status[c], c)
	}
	if s.errs > 0 {
		fmt.Fprintf(&b, " transport-errors×%d (first: %v)", s.errs, s.first)
	}
	fmt.Fprintf(&b, "; latency p50 %v p99 %v max %v", s.pct(0.5).Round(10*time.Microsecond),
		s.pct(0.99).Round(10*time.Microsecond), s.max().Round(10*time.Microsecond))
	return b.String()
}

// between returns the replies sent in [from, to).
func between(rs []reply, from, to time.Time) []reply {
	var out []reply
	for _, r := range rs {
		if !r.at.Before(from) && r.at.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// goroutines returns the number of goroutines once the count has settled.
func goroutines() int {
	runtime.GC()
	return runtime.NumGoroutine()
}

// checkGoroutines fails t when, within a few seconds, the number of
// goroutines does not come back to at most base+slack.
func checkGoroutines(t testing.TB, base, slack int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	n := 0
	for {
		n = runtime.NumGoroutine()
		if n <= base+slack || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("goroutines: %d before, %d after (slack %d)", base, n, slack)
	if n > base+slack {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutine leak: %d goroutines before, %d after; stacks:\n%s", base, n, buf)
	}
}
