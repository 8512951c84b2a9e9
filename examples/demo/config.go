package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
)

// usageText is printed for -h.
const usageText = `Usage: go run ./examples/demo [flags]

Serves GET / (rate limited, answers 200 "ok"), GET /healthz and GET /metrics
(never limited). Prints "listening on http://ADDR" once it accepts connections.

  -addr HOST:PORT        listen address (default 127.0.0.1:8080; port 0 picks a free one)
  -framework NAME        nethttp, gin or echo (default nethttp)
  -name NAME             limiter name; it namespaces the store keys (default demo)

Store (default: in memory, this process only):
  -redis URL             redis://[user:password@]host:port/db
  -cluster ADDRS         Redis Cluster seed nodes, host:port,host:port,...
  -failure POLICY        when Redis fails: local (the Redis store's local
                         fallback), open (serve unlimited) or closed (503) (default local)
  -timeout DURATION      per-decision deadline of a Redis call; past it -failure
                         applies (default 100ms; at least 1ms; 0: none)

Limit:
  -algorithm NAME        gcra, token_bucket, fixed_window, sliding_window,
                         sliding_log or leaky_bucket (default gcra)
  -rate N                requests per period (default 10)
  -period DURATION       (default 1s)
  -burst N               capacity (gcra, token_bucket) or queue (leaky_bucket);
                         0: the algorithm's default (default 0)
  -penalty DURATION      lock a client out this long after a denial (default 0)
  -limit TEXT            the limit in one string, instead of the five flags above:
                         "10/s burst 20", "100/m", "1000/3s fixed_window penalty 1m"

Client key:
  -key KIND              ip, header:NAME, jwt or route (default ip)
                         jwt: the "sub" claim of a verified HS256 bearer token,
                         else the client IP
  -jwt-secret SECRET     HS256 secret for -key jwt (at least 32 bytes)
  -trusted-proxies CIDRS proxies whose X-Forwarded-For is believed, for -key ip
                         and jwt (default none: the peer address is the client)

Response headers:
  -headers STYLE         legacy (X-RateLimit-*), ietf (RateLimit, RateLimit-Policy)
                         or both (default legacy)
`

// usageError is a bad command line: the process exits with status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// errHelp is returned by parseConfig for -h: print the usage, exit 0.
var errHelp = flag.ErrHelp

// config is a validated command line.
type config struct {
	addr      string
	framework string // nethttp, gin or echo
	name      string

	redisURL *redis.Options // nil unless -redis; from redisstore.ParseURL
	cluster  []string       // nil unless -cluster

	limit store.Limit

	keyKind   string // ip, header, jwt or route
	keyHeader string // the NAME of -key header:NAME
	jwtSecret []byte
	trusted   []string
	failure   core.FailurePolicy
	timeout   time.Duration
	headers   core.HeaderStyle
	// the -failure and -headers values, for messages
	failureName, headersName string
}

// failurePolicies and headerStyles are the values of -failure and
// -headers.
var (
	failurePolicies = map[string]core.FailurePolicy{
		"local": core.FailLocal, "open": core.FailOpen, "closed": core.FailClosed,
	}
	headerStyles = map[string]core.HeaderStyle{
		"legacy": core.HeadersLegacy, "ietf": core.HeadersIETF, "both": core.HeadersLegacy | core.HeadersIETF,
	}
)

// limitFlags are the flags -limit replaces.
var limitFlags = []string{"algorithm", "rate", "period", "burst", "penalty"}

// parseConfig parses and validates args (without the program name). Every
// error is a *usageError, or errHelp. The checks run in the order of the
// usage text: server, store, limit, client key, headers.
func parseConfig(args []string) (*config, error) {
	var c config
	f, err := parseFlags(args, &c)
	if err != nil {
		return nil, err
	}
	if err := c.checkServer(); err != nil {
		return nil, err
	}
	if err := c.setStore(f); err != nil {
		return nil, err
	}
	if err := c.setLimit(f); err != nil {
		return nil, err
	}
	if err := c.setKey(f); err != nil {
		return nil, err
	}
	var ok bool
	if c.headers, ok = headerStyles[f.headers]; !ok {
		return nil, usageErrorf("-headers %q: want legacy, ietf or both", f.headers)
	}
	c.headersName = f.headers
	return &c, nil
}

// flagValues holds the flags that parseConfig checks and converts before
// they go into a config.
type flagValues struct {
	algorithm, limitText string
	rate, burst          int64
	period, penalty      time.Duration
	redisURL, cluster    string
	key, secret, trusted string
	failure, headers     string
	given                map[string]bool // the flags on the command line
}

// parseFlags parses args: the flags that need no conversion into c, the
// others into the flagValues it returns.
func parseFlags(args []string, c *config) (*flagValues, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and reported once, by main
	fs.Usage = func() {}

	f := &flagValues{given: map[string]bool{}}
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "")
	fs.StringVar(&c.framework, "framework", "nethttp", "")
	fs.StringVar(&c.name, "name", "demo", "")
	fs.StringVar(&f.redisURL, "redis", "", "")
	fs.StringVar(&f.cluster, "cluster", "", "")
	fs.StringVar(&f.algorithm, "algorithm", string(store.GCRA), "")
	fs.Int64Var(&f.rate, "rate", 10, "")
	fs.DurationVar(&f.period, "period", time.Second, "")
	fs.Int64Var(&f.burst, "burst", 0, "")
	fs.DurationVar(&f.penalty, "penalty", 0, "")
	fs.StringVar(&f.limitText, "limit", "", "")
	fs.StringVar(&f.key, "key", "ip", "")
	fs.StringVar(&f.secret, "jwt-secret", "", "")
	fs.StringVar(&f.trusted, "trusted-proxies", "", "")
	fs.StringVar(&f.failure, "failure", "local", "")
	fs.DurationVar(&c.timeout, "timeout", 100*time.Millisecond, "")
	fs.StringVar(&f.headers, "headers", "legacy", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, &usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	return f, nil
}

// checkServer checks -addr, -framework and -name.
func (c *config) checkServer() error {
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return usageErrorf("-addr %q: want HOST:PORT, such as 127.0.0.1:8080: %w", c.addr, err)
	}
	switch c.framework {
	case "nethttp", "gin", "echo":
	default:
		return usageErrorf("-framework %q: want nethttp, gin or echo", c.framework)
	}
	if c.name == "" {
		return usageErrorf("-name must not be empty")
	}
	return nil
}

// setStore sets the store from -redis or -cluster, and checks -timeout
// and -failure.
func (c *config) setStore(f *flagValues) error {
	if f.redisURL != "" && f.cluster != "" {
		return usageErrorf("-redis and -cluster are alternatives: give one of them")
	}
	if f.redisURL != "" {
		opt, err := redisstore.ParseURL(f.redisURL)
		if err != nil {
			return usageErrorf("-redis %q: want redis://host:port/db: %w", f.redisURL, err)
		}
		c.redisURL = opt
	}
	if f.given["cluster"] {
		for _, addr := range strings.Split(f.cluster, ",") {
			addr = strings.TrimSpace(addr)
			if err := checkNodeAddr(addr); err != nil {
				return usageErrorf("-cluster: node %q: want host:port: %w", addr, err)
			}
			c.cluster = append(c.cluster, addr)
		}
	}
	if c.timeout < 0 || c.timeout > 0 && c.timeout < time.Millisecond {
		return usageErrorf("-timeout %v: want 0 (no deadline) or at least 1ms; a shorter one never reaches Redis", c.timeout)
	}
	var ok bool
	if c.failure, ok = failurePolicies[f.failure]; !ok {
		return usageErrorf("-failure %q: want local, open or closed", f.failure)
	}
	c.failureName = f.failure
	return nil
}

// checkNodeAddr reports a -cluster node that is not host:port with a host
// and a port from 1 to 65535.
func checkNodeAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("missing host")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// setLimit sets the limit from -limit, or from -algorithm, -rate,
// -period, -burst and -penalty.
func (c *config) setLimit(f *flagValues) error {
	if f.given["limit"] {
		for _, name := range limitFlags {
			if f.given[name] {
				return usageErrorf("-limit and -%s are alternatives: give the whole limit with -limit, or use -algorithm, -rate, -period, -burst and -penalty", name)
			}
		}
		lim, err := store.ParseLimit(f.limitText)
		if err != nil {
			return usageErrorf("-limit: %w", err)
		}
		c.limit = lim
		return nil
	}
	alg, err := algorithmOf(f.algorithm)
	if err != nil {
		return err
	}
	switch {
	case f.rate <= 0:
		return usageErrorf("-rate %d: must be positive", f.rate)
	case f.period <= 0:
		return usageErrorf("-period %v: must be positive", f.period)
	case f.burst < 0:
		return usageErrorf("-burst %d: must not be negative (0 selects the algorithm's default)", f.burst)
	case f.penalty < 0:
		return usageErrorf("-penalty %v: must not be negative", f.penalty)
	}
	c.limit = store.Limit{Algorithm: alg, Rate: f.rate, Period: f.period, Burst: f.burst, Penalty: f.penalty}
	if _, err := c.limit.Spec(); err != nil {
		return usageErrorf("the limit flags do not make a valid limit: %w", err)
	}
	return nil
}

// algorithmOf returns the algorithm -algorithm names.
func algorithmOf(name string) (store.Algorithm, error) {
	names := make([]string, 0, len(store.Algorithms()))
	for _, a := range store.Algorithms() {
		if string(a) == name {
			return a, nil
		}
		names = append(names, string(a))
	}
	return "", usageErrorf("-algorithm %q: want one of %s", name, strings.Join(names, ", "))
}

// setKey sets the client key from -key, -jwt-secret and -trusted-proxies.
func (c *config) setKey(f *flagValues) error {
	kind, arg, hasArg := strings.Cut(f.key, ":")
	switch {
	case kind == "header" && hasArg:
		if arg == "" {
			return usageErrorf("-key header:NAME needs a header name, such as header:X-API-Key")
		}
		c.keyHeader = arg
	case (kind == "ip" || kind == "jwt" || kind == "route") && !hasArg:
	default:
		return usageErrorf("-key %q: want ip, header:NAME, jwt or route", f.key)
	}
	c.keyKind = kind
	if kind == "jwt" {
		if f.secret == "" {
			return usageErrorf("-key jwt needs -jwt-secret (the HS256 secret, at least 32 bytes)")
		}
		c.jwtSecret = []byte(f.secret)
	} else if f.given["jwt-secret"] {
		return usageErrorf("-jwt-secret is only used with -key jwt")
	}
	if !f.given["trusted-proxies"] {
		return nil
	}
	if kind != "ip" && kind != "jwt" {
		return usageErrorf("-trusted-proxies is only used with -key ip or jwt (the client address)")
	}
	for _, p := range strings.Split(f.trusted, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.trusted = append(c.trusted, p)
		}
	}
	if len(c.trusted) == 0 {
		return usageErrorf("-trusted-proxies is empty: give CIDR prefixes or addresses, such as 10.0.0.0/8,192.0.2.10")
	}
	return nil
}

// storeName describes the store for the log line.
func (c *config) storeName() string {
	switch {
	case c.redisURL != nil:
		return "redis " + c.redisURL.Addr
	case c.cluster != nil:
		return "redis cluster " + strings.Join(c.cluster, ",")
	}
	return "memory"
}

// keyDesc describes the key for the log line.
func (c *config) keyDesc() string {
	if c.keyKind == "header" {
		return "header " + c.keyHeader
	}
	return c.keyKind
}
