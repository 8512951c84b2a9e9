package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// resetChannel is the Pub/Sub channel, after the prefix, on which Reset
// announces the keys it cleared.
const resetChannel = "reset"

// peekRedis is Peek without the fallback (see direct).
func (s *Store) peekRedis(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if err := s.check(key, n, limits); err != nil {
		return store.Result{}, err
	}
	r, _, err := s.run(ctx, key, -n, limits)
	return r, err
}

// resetRedis is Reset without the fallback (see direct).
func (s *Store) resetRedis(ctx context.Context, key string, limits ...store.Spec) error {
	if err := s.check(key, 0, limits); err != nil {
		return err
	}
	c, err := s.takeCall(key, 0, limits, false)
	if err != nil {
		return err
	}
	keys, _ := c.keysArgs()
	deleted, err := s.client.Del(ctx, keys...).Result()
	if err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	if s.deny != nil {
		s.deny.forget(key)
	}
	s.lease.forget(key) // lease mode (lease.go); nil: off
	if err := s.client.Publish(ctx, s.prefix+resetChannel, key).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: the key's state was deleted in Redis and in this Store, "+
			"but not announced on %s, so other processes keep their deny caches, leases and fallbacks' "+
			"state of it: %w", s.prefix+resetChannel, err)
	}
	if deleted == 0 {
		return fmt.Errorf("redisstore: reset: %w", store.ErrNotFound)
	}
	return nil
}

// announced runs what a reset of key (or of everything, for "") means for
// this process: the deny cache, the leases and the fallback drop it.
func (s *Store) announced(key string) {
	s.lease.forget(key) // lease mode (lease.go); nil: off
	if s.deny != nil {
		if key == "" {
			s.deny.reopen()
		} else {
			s.deny.forget(key)
		}
	}
	if key == "" && s.health.anyOpen() {
		// The fallbacks decide now: their locks stay until Redis decides
		// again (breakerClosed).
		s.pendingClear.Store(true)
		return
	}
	(*s.tell.Load())(key)
}

// breakerOpened logs that the breaker of the server at addr opened.
func (s *Store) breakerOpened(addr string) {
	if addr == "" {
		addr = "redis"
	}
	s.logger().Warn("redisstore: circuit breaker open: the server stopped answering; decisions of its keys go to the "+
		"fallback (or the failure policy) at once, and a probe looks for it every cooldown", "server", addr)
}

// breakerClosed runs after a probe closed the breaker of client's server:
// it checks for state loss (a restart), has the fallback charge Redis with
// what it admitted meanwhile and, once no breaker is open, tells it of a
// re-subscription it was not told of while it decided.
func (s *Store) breakerClosed(ctx context.Context, client redis.UniversalClient) {
	s.logger().Info("redisstore: circuit breaker closed: the server answers again", "server", serverAddr(client))
	s.inspect(ctx, client)
	s.front.Settle()
	if !s.health.anyOpen() && s.pendingClear.CompareAndSwap(true, false) {
		(*s.tell.Load())("")
	}
}

// Close stops what the Store runs in the background (the subscription that
// keeps its deny cache, leases and fallback exact, the probes of open
// circuit breakers, the fallback's charging of its debts) and gives back
// its leases. It does not close the Redis client, which the caller owns.
// The Store must not be used after Close.
func (s *Store) Close() error {
	if s == nil {
		return nil
	}
	s.lease.close() // lease mode (lease.go): gives back every lease; nil: off
	s.front.Close()
	if s.health != nil {
		s.health.close()
	}
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()
	if l != nil {
		l.stop()
		<-l.counted
	}
	s.inspections.Wait()
	return nil
}

// listener keeps local state exact across processes: it subscribes to the
// reset channel and hands every key announced there to Store.announced,
// and it keeps the deny cache off (empty, answering nothing) whenever it
// is not subscribed, since a Reset may then go unheard. It ends when the
// Store is closed or when its client is (redis.ErrClosed), leaving the
// deny cache off.
type listener struct {
	cancel     context.CancelFunc
	done       chan struct{}
	counted    chan struct{} // closed when count returns
	subscribed chan struct{} // closed when first subscribed

	mu sync.Mutex
	ps *redis.PubSub
}

// listenBackoff is the wait between attempts to subscribe while Redis is
// unreachable.
const listenBackoff = 250 * time.Millisecond

// startListener starts the subscription. The caller holds s.mu (or is New).
func (s *Store) startListener() {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cancel: cancel, done: make(chan struct{}), counted: make(chan struct{}), subscribed: make(chan struct{})}
	l.ps = s.client.Subscribe(ctx, s.prefix+resetChannel)
	s.listener = l
	go func() {
		defer close(l.done)
		l.run(ctx, s)
	}()
	go func() {
		defer close(l.counted)
		s.count(ctx, l)
	}()
}

// fleetRefresh is how often a subscribed Store counts the subscribers of
// its reset channel (Instances), after a first count as soon as it has
// subscribed and a few more at shorter intervals (processes of a fleet
// start together).
const fleetRefresh = time.Second

// inspectEvery is how many counts pass between two looks at INFO (inspect):
// an eviction is reported within about this many seconds.
const inspectEvery = 5

// count keeps s.instances at the number of subscribers of the reset
// channel (PUBSUB NUMSUB): one per Store with a subscription, in every
// process on this Redis and prefix. While Redis does not answer, the last
// count stays; when Redis refuses the count, it is 0 and a warning says
// so. Every inspectEvery counts it also looks at INFO (inspect), so that
// keys evicted are reported while they are.
func (s *Store) count(ctx context.Context, l *listener) {
	select {
	case <-l.subscribed:
	case <-ctx.Done():
		return
	}
	countFailed, ticks := false, 0
	for wait := fleetRefresh / 16; ctx.Err() == nil; wait = min(2*wait, fleetRefresh) {
		cctx, cancel := context.WithTimeout(ctx, fleetRefresh/2)
		m, err := s.client.PubSubNumSub(cctx, s.prefix+resetChannel).Result()
		cancel()
		switch n := m[s.prefix+resetChannel]; {
		case err == nil && n > 0:
			s.instances.Store(n)
			countFailed = false
		case isReply(err) && !countFailed:
			// Refused (a user without PUBSUB NUMSUB: see MinimalACL): the
			// count is unknown, so each fallback would take a whole
			// allowance. It stays 0, which Stats reports.
			countFailed = true
			s.instances.Store(0)
			s.warn(warnFleet, "", fmt.Sprintf("cannot count the processes sharing Redis (%v): while Redis is away "+
				"each one's fallback admits a whole allowance, not its share", err))
		}
		if ticks++; ticks%inspectEvery == 0 {
			s.inspect(ctx, s.client)
		}
		sleep(ctx, wait)
	}
}

// instanceCount returns the number of Stores, in all processes, subscribed
// to this Store's reset channel on this Redis and prefix, as last counted:
// every second while the Store is subscribed (with the fallback or the
// deny cache on), kept while Redis does not answer; 0 before the first
// count. On a Redis Cluster, only the subscribers of the node asked are
// counted.
func (s *Store) instanceCount() int { return int(s.instances.Load()) }

func (l *listener) run(ctx context.Context, s *Store) {
	first := true
	for ctx.Err() == nil {
		msg, err := l.ps.Receive(ctx)
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.announced("") // resets may have been missed before this
				if first {
					first = false
					close(l.subscribed)
				} else {
					s.inspectSoon() // back: Redis may have restarted
				}
			}
		case *redis.Message:
			s.announced(m.Payload)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			// go-redis reconnects and subscribes again on the next
			// Receive; until then nothing may be answered from the cache.
			if s.deny != nil {
				s.deny.suspend()
			}
			s.lease.suspend()
			if errors.Is(err, redis.ErrClosed) {
				return // the client is closed: it will never subscribe again
			}
			sleep(ctx, listenBackoff)
		}
	}
}

func (l *listener) stop() {
	l.cancel()
	l.mu.Lock()
	_ = l.ps.Close() // ends a Receive blocked on the connection
	l.mu.Unlock()
	<-l.done
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// releaseRedis is Release without the fallback (see direct).
func (s *Store) releaseRedis(ctx context.Context, key string, slot int64, limits ...store.Spec) error {
	if err := s.check(key, 0, limits); err != nil {
		return err
	}
	for i := range limits {
		if limits[i].Algorithm() != store.InFlight {
			continue
		}
		p, err := s.prepare(limits[i])
		if err != nil {
			return fmt.Errorf("redisstore: release: limit %d: %w", i, err)
		}
		if err := s.release(ctx, s.redisKey(key, p.state), slot); err != nil {
			return err
		}
	}
	return nil
}

// release frees slot in the InFlight state at the Redis key k.
func (s *Store) release(ctx context.Context, k string, slot int64) error {
	if err := s.health.nodeFor(ctx, k).admit(ctx); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if err := s.client.ZRem(ctx, k, strconv.FormatInt(slot, 10)).Err(); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	return nil
}
