package redisstore

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A client closed without Store.Close, as a program that only closes its
// client does, ends the Store's reset listener rather than leaving it to
// retry forever, and the deny cache stays off; a later Close still
// returns. Both ways of starting the listener are tried: the deny cache
// and the fallback (the default).
func TestListenerStopsWhenClientClosed(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"deny cache", []Option{WithDenyCache(64), WithFallback(nil)}},
		{"fallback", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
			s, err := New(client, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			<-s.listener.subscribed
			select {
			case <-s.listener.done:
				t.Fatal("the listener ended while subscribed")
			default:
			}
			if err := client.Close(); err != nil {
				t.Fatal(err)
			}
			// Generous for a loaded machine: the listener needs one
			// failed Receive, one backoff (250ms) and one failed
			// reconnection.
			select {
			case <-s.listener.done:
			case <-time.After(30 * time.Second):
				t.Fatal("the listener still runs 30s after its client was closed")
			}
			if s.deny != nil && s.deny.live.Load() {
				t.Fatal("the deny cache answers after its listener stopped")
			}
			closed := make(chan struct{})
			go func() { _ = s.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(30 * time.Second):
				t.Fatal("Close did not return after the listener stopped")
			}
		})
	}
}
