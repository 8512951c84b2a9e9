package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// keyFunc builds the key function -key asks for.
func (c *config) keyFunc() (core.KeyFunc, error) {
	var ipOpts []keyfuncs.IPOption
	if len(c.trusted) > 0 {
		ipOpts = append(ipOpts, keyfuncs.WithTrustedProxies(c.trusted...))
	}
	switch c.keyKind {
	case "header":
		k, err := keyfuncs.Header(c.keyHeader)
		if err != nil {
			return nil, usageErrorf("-key header:%s: %w", c.keyHeader, err)
		}
		return k, nil
	case "route":
		return keyfuncs.Route(), nil
	}
	ip, err := keyfuncs.IP(ipOpts...)
	if err != nil {
		return nil, usageErrorf("-trusted-proxies: %w", err)
	}
	if c.keyKind == "ip" {
		return ip, nil
	}
	user, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(c.jwtSecret))
	if err != nil {
		return nil, usageErrorf("-jwt-secret: %w", err)
	}
	// A request without a valid token (none, forged, expired) is limited
	// by its address: it can never spend a user's allowance.
	return keyfuncs.Fallback(user, ip), nil
}

// redisClient returns the client -redis or -cluster asks for, or nil for
// the memory store, with the settings of redisstore.UniversalOptions: no
// retries (a re-sent script may charge a request twice), the context's
// deadline bounding every call, and a prompt failure when Redis is down.
func (c *config) redisClient() redis.UniversalClient {
	switch {
	case c.redisURL != nil: // from redisstore.ParseURL
		opt := *c.redisURL // NewClient fills in defaults: keep c as parsed
		return redis.NewClient(&opt)
	case c.cluster != nil:
		opt := redisstore.UniversalOptions(c.cluster...)
		opt.IsClusterMode = true // even with one seed node
		return redis.NewUniversalClient(opt)
	}
	return nil
}

// newLimiter builds the limiter of GET /.
func (c *config) newLimiter(st store.Store, opts ...core.Option) (*core.Limiter, error) {
	key, err := c.keyFunc()
	if err != nil {
		return nil, err
	}
	opts = append([]core.Option{
		core.WithFailurePolicy(c.failure),
		core.WithHeaders(c.headers),
	}, opts...)
	l, err := core.New(st, c.name, key, []store.Limit{c.limit}, opts...)
	if err != nil {
		return nil, usageErrorf("%w", err)
	}
	return l, nil
}

func writeOK(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

var ginReleaseMode sync.Once

// newHandler routes GET / through l with the framework's adapter; /healthz
// and /metrics (served by metrics) are not limited.
func newHandler(framework string, l *core.Limiter, metrics http.Handler) http.Handler {
	ok := http.HandlerFunc(writeOK)
	switch framework {
	case "gin":
		ginReleaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
		r := gin.New()
		r.GET("/", ginlimit.New(l), gin.WrapH(ok))
		r.GET("/healthz", gin.WrapH(ok))
		r.GET("/metrics", gin.WrapH(metrics))
		return r
	case "echo":
		e := echo.New()
		e.HideBanner = true
		e.HidePort = true
		e.GET("/", echo.WrapHandler(ok), echolimit.New(l))
		e.GET("/healthz", echo.WrapHandler(ok))
		e.GET("/metrics", echo.WrapHandler(metrics))
		return e
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", nethttp.Middleware(l)(ok))
	mux.Handle("GET /healthz", ok)
	mux.Handle("GET /metrics", metrics)
	return mux
}

// redisCheckTimeout bounds the start-up check of Redis.
const redisCheckTimeout = 2 * time.Second

// checkRedis asks Redis whether it accepts the store's settings, for at
// most redisCheckTimeout. A setting Redis refuses (a database that does not
// exist, a wrong password) is an error: every decision would follow
// -failure for as long as the demo runs. A Redis that does not answer yet
// is reported on w, and the demo starts all the same, following -failure
// until Redis answers.
func checkRedis(ctx context.Context, st *redisstore.Store, c *config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	err := st.Ping(ctx)
	var refused redis.Error
	switch {
	case err == nil:
		fmt.Fprintf(w, "demo: %s answers\n", c.storeName())
	case errors.As(err, &refused):
		return fmt.Errorf("%s refuses the settings: %w", c.storeName(), err)
	default:
		fmt.Fprintf(w, "demo: %s is not answering (%v); requests follow -failure %s until it does\n",
			c.storeName(), err, c.failureName)
	}
	return nil
}
