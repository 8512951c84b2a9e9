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
  -failure POLICY        when Redis fails: local (a memory store with the same
                         limits), open (serve unlimited) or closed (503) (default local)
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

	limit core.Limit

	keyKind   string // ip, header, jwt or route
	keyHeader string // the NAME of -key header:NAME
	jwtSecret []byte
	trusted   []string
	failure   core.FailurePolicy
	timeout   time.Duration
	headers   core.HeaderStyle
}

// failurePolicies and headerStyles are the values of -failure and
// -headers.
var (
	failurePolicies = map[string]core.FailurePolicy{
		"local": core.FailLocal, "open": core.FailOpen, "closed": core.FailClosed,
	}
	headerStyles = map[string]core.HeaderStyle{
		"legacy": core.HeadersLegacy, "ietf": core.HeadersIETF, "both": core.HeadersBoth,
	}
)

// limitFlags are the flags -limit replaces.
var limitFlags = []string{"algorithm", "rate", "period", "burst", "penalty"}

// parseConfig parses and validates args (without the program name). Every
// error is a *usageError, or errHelp.
func parseConfig(args []string) (*config, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and reported once, by main
	fs.Usage = func() {}

	var (
		c         config
		algorithm string
		rate      int64
		period    time.Duration
		burst     int64
		penalty   time.Duration
		redisURL  string
		cluster   string
		key       string
		secret    string
		trusted   string
		failure   string
		headers   string
		limitText string
	)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "")
	fs.StringVar(&c.framework, "framework", "nethttp", "")
	fs.StringVar(&c.name, "name", "demo", "")
	fs.StringVar(&redisURL, "redis", "", "")
	fs.StringVar(&cluster, "cluster", "", "")
	fs.StringVar(&algorithm, "algorithm", string(core.GCRA), "")
	fs.Int64Var(&rate, "rate", 10, "")
	fs.DurationVar(&period, "period", time.Second, "")
	fs.Int64Var(&burst, "burst", 0, "")
	fs.DurationVar(&penalty, "penalty", 0, "")
	fs.StringVar(&limitText, "limit", "", "")
	fs.StringVar(&key, "key", "ip", "")
	fs.StringVar(&secret, "jwt-secret", "", "")
	fs.StringVar(&trusted, "trusted-proxies", "", "")
	fs.StringVar(&failure, "failure", "local", "")
	fs.DurationVar(&c.timeout, "timeout", core.DefaultTimeout, "")
	fs.StringVar(&headers, "headers", "legacy", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, &usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return nil, usageErrorf("-addr %q: want HOST:PORT, such as 127.0.0.1:8080: %w", c.addr, err)
	}
	switch c.framework {
	case "nethttp", "gin", "echo":
	default:
		return nil, usageErrorf("-framework %q: want nethttp, gin or echo", c.framework)
	}
	if c.name == "" {
		return nil, usageErrorf("-name must not be empty")
	}

	// Store.
	if redisURL != "" && cluster != "" {
		return nil, usageErrorf("-redis and -cluster are alternatives: give one of them")
	}
	if redisURL != "" {
		opt, err := redisstore.ParseURL(redisURL)
		if err != nil {
			return nil, usageErrorf("-redis %q: want redis://host:port/db: %w", redisURL, err)
		}
		c.redisURL = opt
	}
	if given["cluster"] {
		for _, addr := range strings.Split(cluster, ",") {
			addr = strings.TrimSpace(addr)
			host, port, err := net.SplitHostPort(addr)
			if err == nil && host == "" {
				err = errors.New("missing host")
			}
			if err == nil {
				if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || n == 0 {
					err = fmt.Errorf("bad port %q", port)
				}
			}
			if err != nil {
				return nil, usageErrorf("-cluster: node %q: want host:port: %w", addr, err)
			}
			c.cluster = append(c.cluster, addr)
		}
	}
	if c.timeout < 0 || c.timeout > 0 && c.timeout < core.MinTimeout {
		return nil, usageErrorf("-timeout %v: want 0 (no deadline) or at least %v; a shorter one never reaches Redis", c.timeout, core.MinTimeout)
	}
	var ok bool
	if c.failure, ok = failurePolicies[failure]; !ok {
		return nil, usageErrorf("-failure %q: want local, open or closed", failure)
	}

	// Limit.
	if given["limit"] {
		for _, f := range limitFlags {
			if given[f] {
				return nil, usageErrorf("-limit and -%s are alternatives: give the whole limit with -limit, or use -algorithm, -rate, -period, -burst and -penalty", f)
			}
		}
		lim, err := core.ParseLimit(limitText)
		if err != nil {
			return nil, usageErrorf("-limit: %w", err)
		}
		c.limit = lim
	} else {
		alg := core.Algorithm(algorithm)
		known := false
		for _, a := range core.Algorithms() {
			known = known || a == alg
		}
		if !known {
			names := make([]string, len(core.Algorithms()))
			for i, a := range core.Algorithms() {
				names[i] = string(a)
			}
			return nil, usageErrorf("-algorithm %q: want one of %s", algorithm, strings.Join(names, ", "))
		}
		switch {
		case rate <= 0:
			return nil, usageErrorf("-rate %d: must be positive", rate)
		case period <= 0:
			return nil, usageErrorf("-period %v: must be positive", period)
		case burst < 0:
			return nil, usageErrorf("-burst %d: must not be negative (0 selects the algorithm's default)", burst)
		case penalty < 0:
			return nil, usageErrorf("-penalty %v: must not be negative", penalty)
		}
		c.limit = core.Limit{Algorithm: alg, Rate: rate, Period: period, Burst: burst, Penalty: penalty}
		if err := c.limit.Validate(); err != nil {
			return nil, usageErrorf("the limit flags do not make a valid limit: %w", err)
		}
	}

	// Key.
	kind, arg, hasArg := strings.Cut(key, ":")
	switch {
	case kind == "header" && hasArg:
		if arg == "" {
			return nil, usageErrorf("-key header:NAME needs a header name, such as header:X-API-Key")
		}
		c.keyHeader = arg
	case (kind == "ip" || kind == "jwt" || kind == "route") && !hasArg:
	default:
		return nil, usageErrorf("-key %q: want ip, header:NAME, jwt or route", key)
	}
	c.keyKind = kind
	if kind == "jwt" {
		if secret == "" {
			return nil, usageErrorf("-key jwt needs -jwt-secret (the HS256 secret, at least 32 bytes)")
		}
		c.jwtSecret = []byte(secret)
	} else if given["jwt-secret"] {
		return nil, usageErrorf("-jwt-secret is only used with -key jwt")
	}
	if given["trusted-proxies"] {
		if kind != "ip" && kind != "jwt" {
			return nil, usageErrorf("-trusted-proxies is only used with -key ip or jwt (the client address)")
		}
		for _, p := range strings.Split(trusted, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.trusted = append(c.trusted, p)
			}
		}
		if len(c.trusted) == 0 {
			return nil, usageErrorf("-trusted-proxies is empty: give CIDR prefixes or addresses, such as 10.0.0.0/8,192.0.2.10")
		}
	}

	if c.headers, ok = headerStyles[headers]; !ok {
		return nil, usageErrorf("-headers %q: want legacy, ietf or both", headers)
	}
	return &c, nil
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
