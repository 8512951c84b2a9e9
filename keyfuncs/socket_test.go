package keyfuncs_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// A peer on a Unix socket is one peer for every client. Keyed by it, every
// client shared one bucket (issue 29, item 2: 3 requests from one client
// and every other client got 429), and nothing let the user trust it. Now
// IP fails, saying what to do, unless "unix:" is trusted; then the
// forwarding header names the client.
func TestIPUnixSocketPeer(t *testing.T) {
	xff := func(v string) hdr { return hdr{"X-Forwarded-For", v} }
	plain := mustIP(t)
	for _, peer := range []string{"@", "@proxy", "/run/nginx.sock"} {
		_, err := plain(newRequest(peer, xff("203.0.113.7")))
		if err == nil || errors.Is(err, core.ErrNoKey) || !strings.Contains(err.Error(), `WithTrustedProxies("unix:")`) ||
			!strings.Contains(err.Error(), "Unix socket") {
			t.Errorf("%q untrusted: error %v, want one naming the socket and the option", peer, err)
		}
	}
	if _, err := plain(newRequest("")); !errors.Is(err, core.ErrNoKey) || !strings.Contains(err.Error(), "unix:") {
		t.Errorf("empty RemoteAddr: %v, want ErrNoKey mentioning unix:", err)
	}

	fn := mustIP(t, keyfuncs.WithTrustedProxies("unix:", "10.0.0.0/8"))
	tests := []struct {
		name    string
		peer    string
		headers []hdr
		want    outcome
		key     string
	}{
		{"unnamed socket", "@", []hdr{xff("203.0.113.7")}, ok, "203.0.113.7"},
		{"abstract socket", "@proxy", []hdr{xff("203.0.113.8")}, ok, "203.0.113.8"},
		{"socket path", "/run/nginx.sock", []hdr{xff("2001:db8:1:2::3")}, ok, "2001:db8:1::/56"},
		{"empty RemoteAddr (BSD)", "", []hdr{xff("203.0.113.9")}, ok, "203.0.113.9"},
		{"forged entries left of the client", "@", []hdr{xff("6.6.6.6, 203.0.113.7")}, ok, "203.0.113.7"},
		{"trusted hops skipped", "@", []hdr{xff("203.0.113.7, 10.0.0.2")}, ok, "203.0.113.7"},
		{"every hop trusted: left-most", "@", []hdr{xff("10.0.0.3, 10.0.0.2")}, ok, "10.0.0.3"},
		{"no header: no shared key", "@", nil, badData, ""},
		{"empty header: no shared key", "@", []hdr{xff(" , ")}, badData, ""},
		{"hidden client", "@", []hdr{xff("unknown")}, noKey, ""},
		{"IP peers are not sockets", "198.51.100.1:1", []hdr{xff("203.0.113.7")}, ok, "198.51.100.1"},
		{"a malformed peer is not a socket", "proxy.internal:80", []hdr{xff("203.0.113.7")}, badData, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, fn, newRequest(tt.peer, tt.headers...), tt.want, tt.key)
		})
	}
	_, err := fn(newRequest("@"))
	if err == nil || !strings.Contains(err.Error(), "sent no client address in X-Forwarded-For") {
		t.Errorf("no header: %v", err)
	}
	// The other headers, and "unix:" alone as the trusted list.
	fwd := mustIP(t, keyfuncs.WithTrustedProxies("unix:"), keyfuncs.WithForwardingHeader("Forwarded"))
	checkKey(t, fwd, newRequest("@", hdr{"Forwarded", `for=6.6.6.6, for="[2001:db8::7]:443"`}), ok, "2001:db8::/56")
	checkKey(t, fwd, newRequest("@", xff("203.0.113.7")), badData, "")
	single := mustIP(t, keyfuncs.WithTrustedProxies(" unix: "), keyfuncs.WithForwardingHeader("X-Real-IP"))
	checkKey(t, single, newRequest("@", hdr{"X-Real-IP", "203.0.113.7"}), ok, "203.0.113.7")
	checkKey(t, single, newRequest("@"), badData, "")
}

// Over real sockets: nginx-like, a reverse proxy reaches the server
// through a Unix socket and appends each client's address to
// X-Forwarded-For. Clients connect to the proxy from 127.0.0.2, .3 and .4.
// With "unix:" trusted each gets its own 2 a minute; without, the server
// sees RemoteAddr "@" for all of them, the key fails with the error that
// says what to do, and (the key-error rule charging by peer) they share
// one bucket.
func TestIPBehindUnixSocketProxy(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen on a Unix socket: %v", err)
	}
	var (
		mu      sync.Mutex
		limiter *core.Limiter
		peers   = map[string]bool{}
		keyErrs []error
	)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		l := limiter
		peers[r.RemoteAddr] = true
		mu.Unlock()
		nethttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: "app"})
	proxy.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)

	client := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	}
	probe, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Skipf("cannot connect from 127.0.0.2 (%v): the loopback network is a single address here", err)
	}
	probe.Close()
	run := func(t *testing.T, trusted bool) map[string][]int {
		var opts []keyfuncs.IPOption
		if trusted {
			opts = append(opts, keyfuncs.WithTrustedProxies("unix:"))
		}
		key := mustIP(t, opts...)
		l, err := core.New(memorystore.New(), "socket", key, []store.Limit{store.PerMinute(2)},
			core.WithObserver(func(ev core.Event) {
				if ev.KeyErr != nil {
					mu.Lock()
					keyErrs = append(keyErrs, ev.KeyErr)
					mu.Unlock()
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		limiter, keyErrs = l, nil
		mu.Unlock()
		codes := map[string][]int{}
		for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			c := client(ip)
			for range 3 {
				resp, err := c.Get(front.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				codes[ip] = append(codes[ip], resp.StatusCode)
			}
		}
		return codes
	}

	codes := run(t, true)
	for ip, got := range codes {
		if want := []int{200, 200, 429}; !slices.Equal(got, want) {
			t.Errorf("trusted socket, client %s: %v, want %v", ip, got, want)
		}
	}
	mu.Lock()
	if !peers["@"] || len(peers) != 1 || len(keyErrs) != 0 {
		t.Errorf("the server saw peers %v and key errors %v; want only \"@\" and none", peers, keyErrs)
	}
	mu.Unlock()

	codes = run(t, false)
	served := 0
	for _, got := range codes {
		for _, c := range got {
			if c == http.StatusOK {
				served++
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if served != 2 || len(keyErrs) != 9 || !strings.Contains(keyErrs[0].Error(), `WithTrustedProxies("unix:")`) {
		t.Errorf("untrusted socket: %d served (want 2: one bucket for all), key errors %d, first %v", served, len(keyErrs), keyErrs)
	}
}
