package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// twice is a go-redis hook that sends every command and pipeline a second
// time after the first, as go-redis' own retries do after a broken
// connection whose command had run.
type twice struct{}

func (twice) DialHook(next redis.DialHook) redis.DialHook { return next }

func (twice) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		_ = next(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (twice) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		_ = next(ctx, cmds)
		return next(ctx, cmds)
	}
}

// A Take the client sends twice fails with the scripts' refusal and is
// charged once, on every script (lean, take with a penalty, several
// limits), with and without pipelining; a peek sent twice succeeds.
func TestResentChargedOnce(t *testing.T) {
	for _, pipe := range []int{0, defaultPipeline} {
		for _, c := range []struct {
			name   string
			limits []store.Limit
		}{
			{"lean", []store.Limit{store.PerMinute(10)}},
			{"penalty", []store.Limit{{Algorithm: store.GCRA, Rate: 10, Period: time.Minute, Penalty: time.Minute}}},
			{"several", []store.Limit{store.PerMinute(10), {Algorithm: store.FixedWindow, Rate: 20, Period: time.Hour}}},
		} {
			t.Run(fmt.Sprintf("%s/pipeline=%d", c.name, pipe), func(t *testing.T) {
				m := miniredis.RunT(t)
				client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
				t.Cleanup(func() { _ = client.Close() })
				s := realStore(t, client, WithPipelining(pipe))
				takeOK(t, s, "k", 1, c.limits...) // scripts loaded
				client.AddHook(twice{})
				_, err := s.Take(context.Background(), "k", 1, specs(c.limits...)...)
				if err == nil || !strings.Contains(err.Error(), resentError) {
					t.Fatalf("Take sent twice: error %v, want %q", err, resentError)
				}
				r := takeOK(t, s, "k", 0, c.limits...) // a peek: sent twice, harmless
				if r.Remaining != 8 {
					t.Errorf("after two Takes, one sent twice: remaining %d, want 8 (charged once each)", r.Remaining)
				}
			})
		}
	}
}

// A call that met NOSCRIPT is sent again as EVAL with a new cost argument:
// it runs, once.
func TestResentAfterNoScript(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client, WithPipelining(0))
	takeOK(t, s, "k", 1, store.PerMinute(10))
	if err := client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	takeOK(t, s, "k", 1, store.PerMinute(10))
	if r := takeOK(t, s, "k", 0, store.PerMinute(10)); r.Remaining != 8 {
		t.Errorf("remaining %d, want 8", r.Remaining)
	}
}

func TestOnceWrittenOnce(t *testing.T) {
	o := chargeArg(3).(*once)
	for i, want := range []string{"3", resentArg, resentArg} {
		b, err := o.MarshalBinary()
		if err != nil || string(b) != want {
			t.Errorf("write %d: %q, %v; want %q", i+1, b, err, want)
		}
	}
	if o.String() != "3" {
		t.Errorf("String() = %q, want 3", o.String())
	}
	f := fresh([]any{"evalsha", "sha", 1, "k", o, int64(7)})
	if b, _ := f[4].(*once).MarshalBinary(); string(b) != "3" {
		t.Errorf("fresh copy writes %q, want 3", b)
	}
	for _, n := range []int64{0, -2} {
		if _, ok := chargeArg(n).(*once); ok {
			t.Errorf("chargeArg(%d) is a once: a peek or dry run writes nothing and may run twice", n)
		}
	}
}

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestRedirectOf(t *testing.T) {
	ctxErr := fmt.Errorf("%w (after %w)", context.DeadlineExceeded, redisErr("TRYAGAIN Multiple keys request during rehashing of slot"))
	for _, c := range []struct {
		err     error
		r       redirect
		addr    string
		failure bool
	}{
		{redisErr("MOVED 3999 127.0.0.1:6381"), redirectMoved, "127.0.0.1:6381", false},
		{redisErr("ASK 3999 127.0.0.1:6381"), redirectAsk, "127.0.0.1:6381", false},
		{redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), redirectTryAgain, "", false},
		{fmt.Errorf("wrapped: %w", redisErr("MOVED 1 h:1")), redirectMoved, "h:1", false},
		{ctxErr, redirectTryAgain, "", false},
		{redisErr("CLUSTERDOWN The cluster is down"), notRedirected, "", true},
		{redisErr("MOVED nonsense"), notRedirected, "", true},
		{errors.New("MOVED 1 h:1"), notRedirected, "", true}, // not a reply from Redis
		{io.EOF, notRedirected, "", true},
		{context.DeadlineExceeded, notRedirected, "", true},
	} {
		r, addr := redirectOf(c.err)
		if r != c.r || addr != c.addr || isServerFailure(c.err) != c.failure {
			t.Errorf("%v: %d %q failure %v; want %d %q %v", c.err, r, addr, isServerFailure(c.err), c.r, c.addr, c.failure)
		}
	}
}

// MOVED, ASK and TRYAGAIN never open a breaker, even one that opens on
// the first failure; a timeout after TRYAGAIN does not either, nor a lost
// connection.
func TestBreakerIgnoresRedirects(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	h := newHealth(client, 1, time.Second, nil)
	t.Cleanup(h.close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	for _, err := range []error{redisErr("MOVED 1 h:1"), redisErr("ASK 1 h:1"), redisErr("TRYAGAIN x"),
		fmt.Errorf("%w (after %w)", ctx.Err(), redisErr("TRYAGAIN x"))} {
		now := monoMicros()
		h.whole.report(ctx, err, now, now)
		if err := h.whole.admit(context.Background()); err != nil {
			t.Fatalf("after %v: breaker open", err)
		}
	}
	// Lost connections, however many, open nothing (churn is no failure:
	// a server gone refuses the next connection); an error reply does.
	for i := range 5 {
		now := monoMicros() + int64(i)
		h.whole.report(context.Background(), io.EOF, now, now)
		if h.whole.admit(context.Background()) != nil {
			t.Fatalf("%d lost connections opened the breaker", i+1)
		}
	}
	now := monoMicros()
	h.whole.report(context.Background(), redisErr("ERR something"), now, now)
	if h.whole.admit(context.Background()) == nil {
		t.Error("an error reply did not open a breaker that opens on one failure")
	}
}

// switchable is twice while on is set, else a hook that does nothing.
type switchable struct{ on *atomic.Bool }

func (h switchable) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h switchable) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	twiceNext := twice{}.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			return twiceNext(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (h switchable) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	twiceNext := twice{}.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			return twiceNext(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// A lease grant the client sends twice is refused the second time: the
// key is charged one lease, not two.
func TestResentLeaseChargedOnce(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	var on atomic.Bool
	client.AddHook(switchable{&on})
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}
	lim := specs(l)
	s := realStore(t, client, WithPipelining(0), WithLeases(LeaseConfig{HotTakes: 1, MinUnits: 8, MaxUnits: 8, Share: 2}))
	exact := realStore(t, client, WithPipelining(0))
	takeOK(t, exact, "warm", 1, l) // scripts loaded
	on.Store(true)
	_, err := s.Take(context.Background(), "k", 1, lim...)
	on.Store(false)
	if err == nil || !strings.Contains(err.Error(), resentError) {
		t.Fatalf("lease sent twice: error %v, want %q", err, resentError)
	}
	if r := takeOK(t, exact, "k", 0, l); r.Remaining != 92 {
		t.Errorf("after a lease of 8 sent twice: remaining %d, want 92 (one lease charged)", r.Remaining)
	}
}

// A call sent after ASK whose replies cannot be read (here a server that
// never answers within the read timeout) fails with the pipeline's
// error: go-redis leaves such a command with neither reply nor error.
func TestAskingFailsWhenUnanswered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn) }() // reads, never answers
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, Protocol: 2, DisableIdentity: true,
		ReadTimeout: 50 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	v, err := asking(ctx, c, lockScript, append(lockScript.command(1, 5), "k", 0))
	if err == nil {
		t.Fatalf("asking a server that never answers: reply %v and no error", v)
	}
}
