package ginlimit

import (
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/gin-gonic/gin"
)

// ginChecks is how many requests each middleware examines for gin's
// client-IP settings: a deployment behind proxies shows them at once.
const ginChecks = 1024

// ginWarned is set once a middleware has logged that gin resolves clients
// in a way sluice does not follow; the log is written once per process.
var ginWarned atomic.Bool

// ginIPCheck notices, for one middleware, that gin's own client-IP
// settings (Engine.SetTrustedProxies, TrustedPlatform, RemoteIPHeaders)
// resolve a request's client through a proxy. sluice does not use them:
// keys come from the Limiter's key function, and keyfuncs.IP trusts only
// its own WithTrustedProxies. A user who configured gin alone would get
// every client keyed by the proxy, so the first such request is logged.
// Gin's default, which trusts every peer (CVE-2020-28483), is not a
// setting sluice should follow and is not reported.
type ginIPCheck struct {
	left      atomic.Int32 // requests still to examine
	once      sync.Once
	trustsAll bool // gin trusts forwarding headers from any peer: its default
	platform  bool // gin takes the client from a platform's header
}

func newGinIPCheck() *ginIPCheck {
	g := new(ginIPCheck)
	g.left.Store(ginChecks)
	return g
}

// examine looks at one of the first ginChecks requests.
func (g *ginIPCheck) examine(c *gin.Context) {
	if g.left.Load() <= 0 || g.left.Add(-1) < 0 || ginWarned.Load() {
		return
	}
	g.once.Do(func() {
		g.trustsAll = probe(c, "X-Forwarded-For", "X-Real-IP")
		g.platform = probe(c, gin.PlatformCloudflare, gin.PlatformGoogleAppEngine, gin.PlatformFlyIO)
	})
	switch {
	case g.platform:
		warn(c, "Engine.TrustedPlatform")
	case !g.trustsAll && !samePeer(c.ClientIP(), c.RemoteIP()):
		warn(c, "Engine.SetTrustedProxies, RemoteIPHeaders or TrustedPlatform")
	}
}

// probeClient is the address probe writes in forwarding headers.
const probeClient = "192.0.2.1"

// probe reports whether gin takes a request from a public peer, carrying
// headers set to probeClient, as coming from probeClient. It asks a copy
// of c, so that c's engine answers.
func probe(c *gin.Context, headers ...string) bool {
	r := &http.Request{RemoteAddr: "198.51.100.1:1", Header: make(http.Header, len(headers))}
	for _, h := range headers {
		r.Header.Set(h, probeClient)
	}
	cp := c.Copy()
	cp.Request = r
	return cp.ClientIP() == probeClient
}

// samePeer reports whether gin's client IP is the peer's address.
func samePeer(client, peer string) bool {
	a, errA := netip.ParseAddr(client)
	b, errB := netip.ParseAddr(peer)
	if errA != nil || errB != nil {
		return client == peer
	}
	return a.Unmap() == b.Unmap()
}

func warn(c *gin.Context, setting string) {
	if !ginWarned.CompareAndSwap(false, true) {
		return
	}
	slog.Default().LogAttrs(c.Request.Context(), slog.LevelWarn,
		"ginlimit: gin resolves this request's client through a proxy by its own settings ("+setting+"), which sluice "+
			"does not use (logged once): keyfuncs.IP reads forwarding headers only from the proxies given to "+
			"keyfuncs.WithTrustedProxies, and the header keyfuncs.WithForwardingHeader names. Give it the same proxies, "+
			"or every client behind them shares the proxy's key",
		slog.String("gin_client_ip", cut(c.ClientIP())),
		slog.String("remote_addr", cut(c.Request.RemoteAddr)))
}

// cut bounds a client-influenced text for a log record.
func cut(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return s[:maxLen] + "…"
	}
	return s
}
