package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfuncs"
)

// hostileLimit is the allowance per key in the hostile-input tests.
const hostileLimit = 20

func hostileLimits() []store.Limit {
	return []store.Limit{{Algorithm: store.SlidingLog, Rate: hostileLimit, Period: longPeriod()}}
}

// sharedStore returns a Redis store on the redis-server shared by this
// test binary (for tests that do not break it).
func sharedStore(t *testing.T) *redisstore.Store {
	t.Helper()
	srv := redistest.Shared(t)
	rdb := newRedisClient(srv.Addr)
	t.Cleanup(func() { _ = rdb.Close() })
	return exactStore(t, rdb)
}

// clientFrom returns an HTTP client whose connections leave from the
// loopback address src (Linux routes all of 127.0.0.0/8 to lo), so that a
// test can play several clients with distinct addresses.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 8},
		Timeout:   30 * time.Second,
	}
}

// send sends n requests to url from hc, with headers set by prepare(i),
// over 4 workers, and summarises them.
func send(t *testing.T, hc *http.Client, url string, n int, prepare func(i int, r *http.Request)) stats {
	t.Helper()
	defer hc.CloseIdleConnections()
	rs := load{client: hc, urls: []string{url}, workers: 4, n: n, prepare: prepare}.run(context.Background())
	return summarize(rs)
}

// safeRand is a seeded source the load generator's workers may share.
type safeRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRand(seed1, seed2 uint64) *safeRand { return &safeRand{r: rand.New(rand.NewPCG(seed1, seed2))} }

func (s *safeRand) IntN(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.IntN(n)
}

// randIPv4 and randIPv6 return random addresses for forged headers.
func randIPv4(r *safeRand) string {
	return fmt.Sprintf("%d.%d.%d.%d", 1+r.IntN(223), r.IntN(256), r.IntN(256), 1+r.IntN(254))
}

func randIPv6(r *safeRand) string {
	return fmt.Sprintf("2001:db8:%x:%x::%x", r.IntN(1<<16), r.IntN(1<<16), 1+r.IntN(1<<16))
}

// forge sets every forwarding header a client could use to pick its key.
func forge(r *http.Request, addr string) {
	host := addr
	if strings.Contains(addr, ":") {
		host = "[" + addr + "]"
	}
	r.Header.Set("X-Forwarded-For", addr+", "+addr)
	r.Header.Add("X-Forwarded-For", addr)
	r.Header.Set("Forwarded", `for="`+host+`"`)
	r.Header.Set("X-Real-IP", addr)
	r.Header.Set("True-Client-IP", addr)
	r.Header.Set("CF-Connecting-IP", addr)
}

// mustKey returns a function that fails t when a key function
// constructor failed.
func mustKey(t *testing.T) func(core.KeyFunc, error) core.KeyFunc {
	return func(kf core.KeyFunc, err error) core.KeyFunc {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return kf
	}
}

func wantServed(t *testing.T, what string, st stats, served int) {
	t.Helper()
	t.Logf("%s: %s; want %d served", what, st, served)
	if st.errs != 0 || st.status[http.StatusOK] != served || st.status[http.StatusOK]+st.status[http.StatusTooManyRequests] != st.sent {
		t.Errorf("%s: %s; want exactly %d×200, the rest 429", what, st, served)
	}
}

// TestHostileForwardedHeaders: a client connecting directly rotates every
// forwarding header (X-Forwarded-For, Forwarded, X-Real-IP,
// True-Client-IP, CF-Connecting-IP) to a new random address on each
// request; without trusted proxies they are all ignored and the client
// stays in its one bucket.
func TestHostileForwardedHeaders(t *testing.T) {
	kv := sharedStore(t)
	svc := newServiceKey(t, kv, mustKey(t)(keyfuncs.IP()), hostileLimits())
	defer svc.Close()
	r := newRand(1, 2)
	st := send(t, clientFrom("127.0.0.4"), svc.URL, 10*hostileLimit, func(i int, req *http.Request) {
		if i%2 == 0 {
			forge(req, randIPv4(r))
		} else {
			forge(req, randIPv6(r))
		}
	})
	wantServed(t, "direct client rotating forged headers", st, hostileLimit)
}

// proxy is a reverse proxy on 127.0.0.1 in front of target that reports
// its client's address the way a real one does: appended to
// X-Forwarded-For (net/http/httputil), appended to Forwarded as for=, or
// written over X-Real-IP (nginx's proxy_set_header X-Real-IP
// $remote_addr).
func proxy(t *testing.T, target, mode string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		switch mode {
		case "forwarded":
			r.Header["X-Forwarded-For"] = nil // httputil would add one otherwise
			el := "for=" + ip
			if prior := strings.Join(r.Header.Values("Forwarded"), ", "); prior != "" {
				el = prior + ", " + el
			}
			r.Header.Set("Forwarded", el)
		case "real-ip":
			r.Header["X-Forwarded-For"] = nil
			r.Header.Set("X-Real-IP", ip)
		}
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestHostileBehindTrustedProxy puts the service behind a real reverse
// proxy on 127.0.0.1, its only trusted proxy, for each way a proxy reports
// the client: an attacker (connecting from 127.0.0.2) who forges the
// proxy's header with a new address on every request stays limited to one
// allowance, and an attacker who sends the victim's address (127.0.0.3)
// in every forwarding header does not lock the victim out.
func TestHostileBehindTrustedProxy(t *testing.T) {
	kv := sharedStore(t)
	for _, mode := range []string{"x-forwarded-for", "forwarded", "real-ip"} {
		t.Run(mode, func(t *testing.T) {
			opts := []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("127.0.0.1")}
			switch mode {
			case "forwarded":
				opts = append(opts, keyfuncs.WithForwardingHeader("Forwarded"))
			case "real-ip":
				opts = append(opts, keyfuncs.WithForwardingHeader("X-Real-IP"))
			}
			svc := newServiceKey(t, kv, mustKey(t)(keyfuncs.IP(opts...)), hostileLimits())
			defer svc.Close()
			front := proxy(t, svc.URL, mode)
			r := newRand(3, 4)

			st := send(t, clientFrom("127.0.0.2"), front, 10*hostileLimit, func(_ int, req *http.Request) {
				forge(req, randIPv4(r))
			})
			wantServed(t, "attacker rotating forged addresses", st, hostileLimit)

			st = send(t, clientFrom("127.0.0.2"), front, 5*hostileLimit, func(_ int, req *http.Request) {
				forge(req, "127.0.0.3")
			})
			wantServed(t, "attacker claiming the victim's address (bucket already spent)", st, 0)

			st = send(t, clientFrom("127.0.0.3"), front, hostileLimit, nil)
			wantServed(t, "victim after the attack", st, hostileLimit)
		})
	}
}

// TestHostileIPv6Rotation: a trusted proxy reports clients that rotate
// their address inside one IPv6 /56 (its /64s included) on every request;
// they share one allowance. Another /56 has its own, 6to4 addresses share
// their IPv4 host's, and two IPv4 neighbours are never grouped (the
// reverse bug).
func TestHostileIPv6Rotation(t *testing.T) {
	kv := sharedStore(t)
	svc := newServiceKey(t, kv, mustKey(t)(keyfuncs.IP(keyfuncs.WithTrustedProxies("127.0.0.1"))), hostileLimits())
	defer svc.Close()
	r := newRand(5, 6)
	from := func(addr func() string) func(int, *http.Request) {
		return func(_ int, req *http.Request) { req.Header.Set("X-Forwarded-For", addr()) }
	}
	inside := func(prefix string) func() string {
		return func() string {
			return fmt.Sprintf("%s:%x:%x:%x:%x", prefix, r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16))
		}
	}
	hc := newHTTPClient(4)
	inside56 := func(prefix string) func() string {
		return func() string {
			return fmt.Sprintf("%s%02x:%x:%x:%x:%x", prefix, r.IntN(1<<8), r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16))
		}
	}
	wantServed(t, "rotation inside 2001:db8:1:2::/64", send(t, hc, svc.URL, 10*hostileLimit, from(inside("2001:db8:1:2"))), hostileLimit)
	wantServed(t, "rotation over the /64s of 2001:db8:1::/56", send(t, hc, svc.URL, 3*hostileLimit, from(inside56("2001:db8:1:"))), 0)
	wantServed(t, "rotation inside 2001:db8:2:300::/56", send(t, hc, svc.URL, 3*hostileLimit, from(inside56("2001:db8:2:3"))), hostileLimit)
	wantServed(t, "6to4 rotation inside 2002:c633:6407::/48", send(t, hc, svc.URL, 3*hostileLimit, from(inside56("2002:c633:6407:"))), hostileLimit)
	wantServed(t, "IPv4 198.51.100.7, the 6to4 host", send(t, hc, svc.URL, 3*hostileLimit,
		from(func() string { return "198.51.100.7" })), 0)
	wantServed(t, "IPv4-mapped ::ffff:198.51.100.7, the same host", send(t, hc, svc.URL, 3*hostileLimit,
		from(func() string { return "::ffff:198.51.100.7" })), 0)
	wantServed(t, "IPv4 198.51.100.8, neighbour of .7", send(t, hc, svc.URL, 3*hostileLimit,
		from(func() string { return "198.51.100.8" })), hostileLimit)
}

// TestHostileTokens sends bearer tokens that claim a victim's identity but
// fail verification (signed with another secret, expired, alg "none",
// not yet valid, HS256 with an empty signature, garbage): none yields the
// victim's key. With Fallback(JWT, IP) the attacker gets its address's
// allowance and the victim keeps its own; with JWT alone and KeyErrorDeny
// every bad token gets the fixed 403 body, which names no error.
func TestHostileTokens(t *testing.T) {
	kv := sharedStore(t)
	secret := []byte("e2e-secret-Jx4tR8wQ2mZ7vK1cN5bH9sLp")
	other := []byte("not-the-secret-0123456789abcdefghijkl")
	jwtKey := mustKey(t)(keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret)))
	ipKey := mustKey(t)(keyfuncs.IP())
	now := time.Now()
	sign := func(m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claims := func(exp, nbf time.Time) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "victim", "exp": exp.Unix()}
		if !nbf.IsZero() {
			c["nbf"] = nbf.Unix()
		}
		return c
	}
	valid := sign(jwt.SigningMethodHS256, secret, claims(now.Add(time.Hour), time.Time{}))
	unsigned := valid[:strings.LastIndexByte(valid, '.')+1]
	bad := map[string]string{
		"wrong key":       sign(jwt.SigningMethodHS256, other, claims(now.Add(time.Hour), time.Time{})),
		"expired":         sign(jwt.SigningMethodHS256, secret, claims(now.Add(-time.Minute), time.Time{})),
		"not yet valid":   sign(jwt.SigningMethodHS256, secret, claims(now.Add(time.Hour), now.Add(30*time.Minute))),
		"alg none":        sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(now.Add(time.Hour), time.Time{})),
		"empty signature": unsigned,
		"HS512 wrong key": sign(jwt.SigningMethodHS512, other, claims(now.Add(time.Hour), time.Time{})),
		"garbage":         "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ2aWN0aW0ifQ.%%%",
	}
	names := make([]string, 0, len(bad))
	for name := range bad {
		names = append(names, name)
	}
	attack := func(i int, req *http.Request) {
		req.Header.Set("Authorization", "Bearer "+bad[names[i%len(names)]])
	}
	for name, tok := range bad {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if k, err := jwtKey(req); err == nil || k != "" {
			t.Errorf("%s token: key %q, error %v; want no key", name, k, err)
		}
	}

	t.Run("fallback to IP", func(t *testing.T) {
		svc := newServiceKey(t, kv, keyfuncs.Fallback(jwtKey, ipKey), hostileLimits())
		defer svc.Close()
		wantServed(t, "attacker with bad tokens claiming the victim", send(t, clientFrom("127.0.0.5"), svc.URL, 10*hostileLimit, attack), hostileLimit)
		wantServed(t, "victim with a valid token, same address as the attacker",
			send(t, clientFrom("127.0.0.5"), svc.URL, 2*hostileLimit, func(_ int, req *http.Request) {
				req.Header.Set("Authorization", "Bearer "+valid)
			}), hostileLimit)
	})

	t.Run("bucket per address", func(t *testing.T) {
		// KeyErrorPerAddress (the default): requests without a valid
		// identity share one bucket per client address, whatever token
		// they carry; another address keeps its own.
		svc := newServiceKey(t, kv, jwtKey, hostileLimits())
		defer svc.Close()
		wantServed(t, "bad tokens claiming the victim", send(t, newHTTPClient(4), svc.URL, 10*hostileLimit, attack), hostileLimit)
		wantServed(t, "bad tokens from another address", send(t, clientFrom("127.0.0.6"), svc.URL, 2*hostileLimit, attack), hostileLimit)
		wantServed(t, "victim with a valid token", send(t, newHTTPClient(4), svc.URL, 2*hostileLimit, func(_ int, req *http.Request) {
			req.Header.Set("Authorization", "Bearer "+valid)
		}), hostileLimit)
	})

	t.Run("deny without error text", func(t *testing.T) {
		svc := newServiceKey(t, kv, jwtKey, hostileLimits(), core.WithKeyErrorRule(core.KeyErrorDeny, nil))
		defer svc.Close()
		hc := newHTTPClient(4)
		defer hc.CloseIdleConnections()
		rs := load{client: hc, urls: []string{svc.URL}, workers: 4, n: 3 * len(bad), prepare: attack, keep: true}.run(context.Background())
		st := summarize(rs)
		t.Logf("bad tokens under KeyErrorDeny: %s", st)
		if st.status[http.StatusForbidden] != st.sent {
			t.Errorf("%s; want every bad token refused with 403", st)
		}
		for _, rp := range rs {
			if rp.body != `{"error":"forbidden"}`+"\n" {
				t.Errorf("403 body %q, want the fixed one", rp.body)
			}
			for name, vals := range rp.header {
				for _, v := range vals {
					if leaks(v) {
						t.Errorf("header %s: %q tells the client why its token failed", name, v)
					}
				}
			}
		}
	})
}

// leaks reports whether s carries error text about a token.
func leaks(s string) bool {
	s = strings.ToLower(s)
	for _, w := range []string{"token", "signature", "expired", "jwt", "keyfuncs", "sluice", "invalid", "malformed"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// TestHostileKeysCluster sends keys built to break the Redis layout
// (braces that would choose the Cluster slot, separators, newlines, NUL,
// RESP framing, 64 KiB) through the Redis store to a Redis Cluster: every
// Take succeeds (each key's Redis keys share one slot: no CROSSSLOT), no
// Redis key is longer than a fixed bound, and distinct keys never share
// state: each gets its full allowance after all the others were spent.
func TestHostileKeysCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	ctx := context.Background()
	rdb := newClusterClient(c.Addrs)
	defer rdb.Close()
	prefix := uniq("hk") + ":"
	kv := exactStore(t, rdb, redisstore.WithPrefix(prefix))
	big := strings.Repeat("x", 64<<10)
	keys := []string{
		"victim", "{victim}", "{victim}x", "x{victim}", "{}", "{", "}", "}{", "a}b{c",
		"a:b", "a", "b:c", "=victim", "#victim", "victim\n", "vic\ntim", "vic\x00tim", "vic\x00tin",
		"\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", "ключ", "\xff\xfe", " ", "*", "sluice:{x}",
		big, big + "y", big[:64], big[:65], strings.Repeat("{", 1000),
	}
	const limit = 3
	lims := []store.Limit{
		{Algorithm: store.FixedWindow, Rate: limit, Period: longPeriod(), Penalty: time.Hour},
		{Algorithm: store.SlidingLog, Rate: limit + 1, Period: longPeriod()},
	}
	for round := 0; round <= limit; round++ {
		for _, k := range keys {
			res, err := kv.Take(ctx, k, 1, specs(lims...)...)
			if err != nil {
				t.Fatalf("Take(%.40q): %v", k, err)
			}
			if want := round < limit; res.Allowed != want {
				t.Errorf("Take %d of %.40q: allowed %v, want %v (%d distinct keys share state?)", round+1, k, res.Allowed, want, len(keys))
			}
		}
	}
	var (
		mu  sync.Mutex
		all []string
	)
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		ks, err := node.Keys(ctx, prefix+"*").Result()
		mu.Lock()
		all = append(all, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	groups := map[string][]string{} // hash tag -> Redis keys
	for _, k := range all {
		longest = max(longest, len(k))
		open, close := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
		if open < 0 || close < open {
			t.Errorf("Redis key %q has no hash tag", k)
			continue
		}
		groups[k[open+1:close]] = append(groups[k[open+1:close]], k)
	}
	t.Logf("%d hostile keys (longest %d bytes) × %d limits: %d Redis keys under %d hash tags, longest Redis key %d bytes (prefix %d)",
		len(keys), len(big)+1, len(lims), len(all), len(groups), longest, len(prefix))
	// Every client key has its own tag, holding its two states plus the
	// lock its denial set, all in one slot.
	if len(groups) != len(keys) {
		t.Errorf("%d hash tags for %d distinct client keys, want one each", len(groups), len(keys))
	}
	for tag, ks := range groups {
		if len(ks) != 3 {
			t.Errorf("hash tag %q holds %d Redis keys %q, want 3", tag, len(ks), ks)
		}
		for _, k := range ks[1:] {
			a, errA := rdb.ClusterKeySlot(ctx, ks[0]).Result()
			b, errB := rdb.ClusterKeySlot(ctx, k).Result()
			if errA != nil || errB != nil || a != b {
				t.Errorf("%q in slot %d, %q in slot %d (%v, %v)", ks[0], a, k, b, errA, errB)
			}
		}
	}
	if longest > len(prefix)+160 {
		t.Errorf("a Redis key of %d bytes: client keys reach Redis unbounded", longest)
	}
}

// TestHostileAbsurdLimits: limits no store can enforce exactly (a huge
// rate, a period of 1ns, sizes that overflow) are refused by core.New with
// an error, never a panic; a request costing math.MaxInt64 (WithCost,
// WithCostFunc) is denied cleanly, 429 without Retry-After (it can never
// pass), by the memory store and by Redis alike, and does not disturb the
// allowance of cheaper requests.
func TestHostileAbsurdLimits(t *testing.T) {
	key := mustKey(t)(keyfuncs.Header(clientHeader))
	for _, lim := range []store.Limit{
		{Rate: math.MaxInt64, Period: time.Nanosecond},
		{Rate: 1, Period: time.Nanosecond},
		{Rate: math.MaxInt64, Period: time.Second},
		{Rate: 1, Period: math.MaxInt64},
		{Rate: 1, Period: time.Second, Burst: math.MaxInt64},
		{Algorithm: store.TokenBucket, Rate: math.MaxInt64 / 2, Period: time.Hour},
		{Algorithm: store.SlidingWindow, Rate: 1 << 40, Period: 1 << 50},
		{Algorithm: store.SlidingLog, Rate: 1 << 40, Period: time.Hour},
		{Algorithm: store.FixedWindow, Rate: 1 << 62, Period: time.Hour},
		{Algorithm: "nope", Rate: 1, Period: time.Second},
		{Rate: -1, Period: time.Second},
		{Rate: 1, Period: -time.Second},
	} {
		if _, err := core.New(memorystore.New(), "test", key, []store.Limit{lim}); err == nil || !errors.Is(err, store.ErrInvalidLimit) {
			t.Errorf("core.New with %v: err = %v, want one wrapping ErrInvalidLimit", lim, err)
		}
	}
	stores := map[string]store.Store{"memory": memorystore.New(), "redis": sharedStore(t)}
	// Absurd but enforceable: decided without error or panic.
	for name, kv := range stores {
		for _, lim := range []store.Limit{
			{Rate: 1, Period: time.Second, Penalty: (1<<53 - 1) * time.Microsecond},
			{Rate: 1, Period: time.Microsecond},
			{Algorithm: store.SlidingWindow, Rate: 1, Period: time.Microsecond},
			{Algorithm: store.TokenBucket, Rate: 1 << 20, Period: time.Hour, Burst: 1 << 20},
			{Algorithm: store.SlidingLog, Rate: 100_000, Period: 1000 * time.Hour},
		} {
			svc := newService(t, kv, []store.Limit{lim})
			hc := newHTTPClient(1)
			client := uniq("absurd")
			rs := load{client: hc, urls: []string{svc.URL}, workers: 1, n: 3, key: func(int) string { return client }, keep: true,
				timeout: 2 * time.Second}.run(context.Background())
			hc.CloseIdleConnections()
			svc.Close()
			st := summarize(rs)
			d := svc.tally.snapshot()
			retry := rs[len(rs)-1].header.Get("Retry-After")
			t.Logf("%s, %v: %s; Retry-After of the last: %q", name, lim, st, retry)
			if want := int64(math.Ceil(lim.Penalty.Seconds())); lim.Penalty > 0 && retry != strconv.FormatInt(want, 10) {
				t.Errorf("%s, %v: Retry-After %q during the penalty, want %d", name, lim, retry, want)
			}
			if st.errs != 0 || st.status[http.StatusOK] == 0 || st.status[http.StatusOK]+st.status[http.StatusTooManyRequests] != st.sent || d.storeErrs != 0 {
				t.Errorf("%s, %v: %s, decisions %s; want the first served, each answered 200 or 429, no store error", name, lim, st, d)
			}
		}
	}
	for name, kv := range stores {
		for _, alg := range store.Algorithms() {
			lims := []store.Limit{{Algorithm: alg, Rate: hostileLimit, Period: longPeriod()}}
			huge := newService(t, kv, lims, core.WithCost(func(*http.Request) int64 { return math.MaxInt64 }))
			hugeFunc := newService(t, kv, lims, core.WithCost(func(*http.Request) int64 { return math.MaxInt64 }))
			client := uniq("absurd")
			for _, svc := range []*service{huge, hugeFunc} {
				hc := newHTTPClient(1)
				rs := load{client: hc, urls: []string{svc.URL}, workers: 1, n: 3, key: func(int) string { return client }, keep: true}.run(context.Background())
				hc.CloseIdleConnections()
				svc.Close()
				for _, rp := range rs {
					if rp.err != nil || rp.status != http.StatusTooManyRequests || rp.header.Get("Retry-After") != "" {
						t.Errorf("%s %s cost MaxInt64: status %d, Retry-After %q, err %v; want 429 without Retry-After",
							name, alg, rp.status, rp.header.Get("Retry-After"), rp.err)
					}
				}
			}
			if d := huge.tally.snapshot(); d.storeErrs != 0 {
				t.Errorf("%s %s: store errors %s", name, alg, d)
			}
		}
	}
}

// TestHostilePenaltyOverflow: a Penalty within a microsecond of the
// largest Duration must be refused like any other Penalty of 2^53 µs or
// more. Limit.Validate used to round it up with (Penalty + 999ns) / 1µs,
// which overflowed int64 to a negative number that passed the size check:
// the Limiter accepted the limit and silently enforced no penalty at all
// (Retry-After 1 instead of a refusal at construction).
func TestHostilePenaltyOverflow(t *testing.T) {
	for _, p := range []time.Duration{math.MaxInt64, math.MaxInt64 - math.MaxInt64%time.Microsecond, math.MaxInt64 - 998} {
		lim := store.Limit{Rate: 1, Period: time.Second, Penalty: p}
		_, err := lim.Spec()
		if !errors.Is(err, store.ErrInvalidLimit) {
			sp, _ := lim.Spec()
			t.Errorf("Limit{Rate: 1, Period: 1s, Penalty: %d}.Spec() = %v, want ErrInvalidLimit (Spec().Penalty = %d µs)", int64(p), err, sp.Penalty())
		}
	}
}

// TestHostileClockSkew: two instances whose clocks are an hour apart
// (WithClock) share one Redis: the count stays exact, because every
// decision uses Redis' TIME inside the script, not the instance's clock.
func TestHostileClockSkew(t *testing.T) {
	kv := sharedStore(t)
	name := uniq("skew")
	lims := []store.Limit{{Algorithm: store.FixedWindow, Rate: hostileLimit, Period: longPeriod()}}
	ahead := newNamedService(t, kv, name, headerKey(t), lims, core.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	defer ahead.Close()
	behind := newNamedService(t, kv, name, headerKey(t), lims, core.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	defer behind.Close()
	client := uniq("skewed")
	hc := newHTTPClient(4)
	defer hc.CloseIdleConnections()
	st := summarize(load{client: hc, urls: []string{ahead.URL, behind.URL}, workers: 4, n: 5 * hostileLimit,
		key: func(int) string { return client }}.run(context.Background()))
	wantServed(t, "two instances an hour apart", st, hostileLimit)
}
