package redisstore

import (
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// dialTimeout bounds one connection attempt (see UniversalOptions).
	dialTimeout = 500 * time.Millisecond
	// dialerBackoff is go-redis' pause after a failed dial, which it takes
	// even after its last attempt.
	dialerBackoff = time.Millisecond
)

// UniversalOptions returns options for redis.NewUniversalClient that suit a
// Store: one address is a single Redis, several are the seed nodes of a
// Cluster. Set any other field (Password, DB, TLSConfig, MasterName for
// Sentinel, IsClusterMode for a Cluster behind one address) on the result
// before making the client. It sets:
//
//   - MaxRetries: -1. A call go-redis sent again is refused unrun (see the
//     package doc, "Retries and Cluster redirects"), so a retry would cost
//     the caller's time and end in an error all the same.
//   - ContextTimeoutEnabled: true, so that the context's deadline (the
//     Store's, WithTimeout) bounds the wait for Redis, not the ReadTimeout
//     (3 s by default).
//   - DialTimeout: 500 ms (5 s by default), for the dials made without a
//     deadline: background reconnections, a TLS handshake, a Ping.
//   - DialerRetries: 1 and DialerRetryTimeout: 1 ms. go-redis would dial 5
//     times, 100 ms apart, and pause after the last failure too, so with
//     Redis down every call would wait out the Store's whole deadline
//     instead of failing at once and going to the fallback.
//
// For example:
//
//	client := redis.NewUniversalClient(redisstore.UniversalOptions("localhost:6379"))
//	defer client.Close()
//	store, err := redisstore.New(client)
func UniversalOptions(addrs ...string) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           dialTimeout,
		DialerRetries:         1,
		DialerRetryTimeout:    dialerBackoff,
	}
}

// ParseURL returns the options redis.ParseURL makes of url (such as
// redis://user:password@localhost:6379/0, rediss:// for TLS, or
// unix:///path/to/redis.sock), for redis.NewClient, with the settings of
// UniversalOptions; max_retries and dial_timeout given in the URL's query
// take precedence.
func ParseURL(url string) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if opt.MaxRetries == 0 {
		opt.MaxRetries = -1
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = dialTimeout
	}
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = 1
	opt.DialerRetryTimeout = dialerBackoff
	return opt, nil
}
