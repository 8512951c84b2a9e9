package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// soakInstanceEnv, set to a Redis URL, makes the test binary run as the
// starved instance of TestSoakStarvedInstance instead of running tests
// (see TestMain): the parent starts it with GOMAXPROCS=1.
const soakInstanceEnv = "SLUICE_E2E_SOAK_INSTANCE"

// The soak's limits, per client key: a fixed window of 20 per 10 s on
// /fw and a GCRA of 300 per 30 s with a burst of 30 on /gcra.
var (
	soakFixed = store.Limit{Algorithm: store.FixedWindow, Rate: 20, Period: 10 * time.Second}
	soakGCRA  = store.Limit{Algorithm: store.GCRA, Rate: 300, Period: 30 * time.Second, Burst: 30}
)

// soakDecision is one decision of the starved instance. Lo and Hi (Unix
// µs) bound when the store that decided read its clock: the Redis store
// between the start and the end of its Take; the local fallback store
// between the end of the Redis Take (or the request, when none ran) and
// the observer's call.
type soakDecision struct {
	Route     string `json:"r"`
	Key       string `json:"k"`
	Outcome   string `json:"o"`
	Served    bool   `json:"s"`
	Err       string `json:"e,omitempty"` // errKind of Event.Err
	Lo        int64  `json:"lo"`
	Hi        int64  `json:"hi"`
	Reset     int64  `json:"reset"` // Result.ResetAfter, µs
	Remaining int64  `json:"rem"`
	TakeMicro int64  `json:"lat"` // Event.Latency, µs
}

// soakReport is what the starved instance reports at GET /report.
type soakReport struct {
	GOMAXPROCS int            `json:"gomaxprocs"`
	Decisions  []soakDecision `json:"decisions"`
	Wall       time.Duration  `json:"wall"`        // since it started
	CPU        time.Duration  `json:"cpu"`         // user+system, this process
	Spins      int64          `json:"spins"`       // iterations of the busy loop
	Stall      time.Duration  `json:"stall"`       // the longest a 1 ms sleep overslept
	Stalls50   int            `json:"stalls_50ms"` // sleeps that overslept 50 ms or more
	Stalls100  int            `json:"stalls_100ms"`
}

// takeTimes is where timedStore leaves the bounds of a request's Take; a
// pointer to it rides in the request's context.
type takeTimes struct{ at, lo, hi int64 } // at: when the request reached the Limiter

type takeTimesKey struct{}

// timedStore records, in the request's takeTimes, when the Redis store's
// Take started and ended; its other methods (Fleet, ResetNotifier, ...)
// are the Redis store's, so that the Limiters' shared fallback sees it as
// it is.
type timedStore struct{ *redisstore.Store }

func (s timedStore) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	tt, _ := ctx.Value(takeTimesKey{}).(*takeTimes)
	lo := time.Now().UnixMicro()
	res, err := s.Store.Take(ctx, key, n, limits...)
	if tt != nil {
		tt.lo, tt.hi = lo, time.Now().UnixMicro()
	}
	return res, err
}

// soakRecorder collects the instance's decisions.
type soakRecorder struct {
	mu  sync.Mutex
	all []soakDecision
}

func (rec *soakRecorder) observer(route string) func(core.Event) {
	return func(ev core.Event) {
		d := soakDecision{Route: route, Key: ev.Key, Outcome: ev.Outcome.String(), Served: ev.Action != core.Refuse,
			Reset: ev.Result.ResetAfter.Microseconds(), Remaining: ev.Result.Remaining, TakeMicro: ev.Latency.Microseconds()}
		if ev.Err != nil {
			d.Err = errKind(ev.Err)
		}
		if tt, ok := ev.Request.Context().Value(takeTimesKey{}).(*takeTimes); ok {
			// The Redis store's Take: Redis or its fallback (after the
			// call that failed, or at once for a key it holds) decided
			// within it.
			d.Lo, d.Hi = tt.lo, tt.hi
		}
		rec.mu.Lock()
		rec.all = append(rec.all, d)
		rec.mu.Unlock()
	}
}

// runSoakInstance is the starved instance: GOMAXPROCS as the parent set
// it (1), one goroutine looping without end beside the server, two
// Limiters with the default timeout, failure policy and breaker on a Redis
// store, /fw and /gcra limited per X-Client, /report for the parent. It
// prints "listening on <URL>" and serves until SIGTERM.
func runSoakInstance(redisURL string) int {
	started := time.Now()
	var spins atomic.Int64
	go func() {
		for {
			spins.Add(1)
		}
	}()
	stalls := &stallWatch{}
	go stalls.run(nil)

	opt, err := redisstore.ParseURL(redisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client := redis.NewClient(opt)
	defer client.Close()
	rs, err := redisstore.New(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rec := &soakRecorder{}
	mux := http.NewServeMux()
	for route, limit := range map[string]store.Limit{"fw": soakFixed, "gcra": soakGCRA} {
		h, err := soakRoute(timedStore{rs}, route, limit, rec)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		mux.Handle("/"+route, h)
	}
	mux.HandleFunc("/report", func(w http.ResponseWriter, _ *http.Request) {
		rec.mu.Lock()
		all := append([]soakDecision(nil), rec.all...)
		rec.mu.Unlock()
		worst, n50, n100 := stalls.get()
		_ = json.NewEncoder(w).Encode(soakReport{GOMAXPROCS: runtime.GOMAXPROCS(0), Decisions: all,
			Wall: time.Since(started), CPU: selfCPU(), Spins: spins.Load(), Stall: worst, Stalls50: n50, Stalls100: n100})
	})
	return serveUntilTERM(mux)
}

// soakRoute is a handler answering "ok" behind a Limiter of limit on kv,
// keyed by X-Client, all its other settings the defaults.
func soakRoute(kv store.Store, route string, limit store.Limit, rec *soakRecorder) (http.Handler, error) {
	key, err := keyfuncs.Header(clientHeader)
	if err != nil {
		return nil, err
	}
	lim, err := core.New(kv, "soak-"+route, key, []store.Limit{limit}, core.WithObserver(rec.observer(route)))
	if err != nil {
		return nil, err
	}
	limited := nethttp.Middleware(lim)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limited.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), takeTimesKey{}, &takeTimes{at: time.Now().UnixMicro()})))
	}), nil
}

func serveUntilTERM(h http.Handler) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Printf("listening on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// stallWatch measures how late a goroutine that sleeps 1 ms at a time
// wakes up: how starved the process is. run returns when stop is closed
// (never for a nil stop).
type stallWatch struct {
	mu          sync.Mutex
	worst       time.Duration
	n50, n100   int
	serverWorst time.Duration // see watchServers
	serverN50   int
}

func (s *stallWatch) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		before := time.Now()
		time.Sleep(time.Millisecond)
		late := time.Since(before) - time.Millisecond
		s.mu.Lock()
		s.worst = max(s.worst, late)
		if late >= 50*time.Millisecond {
			s.n50++
		}
		if late >= 100*time.Millisecond {
			s.n100++
		}
		s.mu.Unlock()
	}
}

// watchServers PINGs each of addrs every few ms, on connections of its
// own, until stop closes, and counts a PING that took 50 ms or more as a
// stall of the machine too: a CPU-starved redis-server misses deadlines
// while this process runs on time (seen at a load average of 19).
func (s *stallWatch) watchServers(addrs []string, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, ReadTimeout: 10 * time.Second})
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond): // pacing, not ordering
				}
				start := time.Now()
				if c.Ping(context.Background()).Err() != nil {
					continue
				}
				took := time.Since(start)
				s.mu.Lock()
				s.serverWorst = max(s.serverWorst, took)
				if took >= 50*time.Millisecond {
					s.serverN50++
				}
				s.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// servers returns the slowest PING watchServers saw and how many took
// 50 ms or more.
func (s *stallWatch) servers() (time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serverWorst, s.serverN50
}

func (s *stallWatch) get() (time.Duration, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.worst, s.n50, s.n100
}
