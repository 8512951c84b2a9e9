package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A sliding log sheds its expired members while its key is in use (issue
// 29, item 5): an admission removes them, at most 1024, when they may be
// as many as the live units (logAdd, which the lean and the take script
// share), so a log left with 80,000 expired members by a burst
// holds 80,000 - 50·1024 of them after 50 admissions, by either script,
// and none after 79; the set never holds more than 2R - 1 members. The
// lean script used to remove them only when an admission's unit numbers
// crossed a multiple of 64 (or none was live): 78,976 of 79,026 members
// were expired after 50 admissions, about 129 bytes each (MEMORY USAGE,
// logged with -v).
func TestRedisSlidingLogTrimsWhileInUse(t *testing.T) {
	redistest.Slow(t)
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	p := &boundedProbe{t: t, client: client, s: realStore(t, client)}
	R := int64(100_000) // the largest Rate a SlidingLog limit accepts
	l := store.Limit{Algorithm: store.SlidingLog, Rate: R, Period: time.Hour}
	loose := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Millisecond, Burst: 1 << 52}
	const burst = 80_000
	for i, limits := range [][]store.Limit{{l}, {l, loose}} {
		script := [...]string{"log.lua", "take.lua"}[i]
		key := "burst" + strconv.Itoa(i)
		spec, _ := l.Spec()
		rk := p.s.redisKey(key, stateSuffix(&spec))
		p.fillLog(key, l, burst, -2*time.Hour) // a burst whose period is over
		full := p.usage(rk)
		count := func() (members, expired int64) {
			t.Helper()
			now, err := client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			cut := strconv.FormatInt(now.Add(-time.Hour).UnixMicro(), 10)
			members, expired = client.ZCard(ctx, rk).Val(), client.ZCount(ctx, rk, "-inf", cut).Val()
			if members > 2*R-1 {
				t.Fatalf("%s: %d members, more than 2R - 1", script, members)
			}
			return members, expired
		}
		for calls := 1; calls <= 79; calls++ {
			if r := takeOK(t, p.s, key, 1, limits...); !r.Allowed || r.Remaining != R-int64(calls) {
				t.Fatalf("%s: admission %d: %+v", script, calls, r)
			}
			members, expired := count()
			if want := max(0, burst-1024*int64(calls)); expired != want || members != expired+int64(calls) {
				t.Fatalf("%s: after %d admissions, %d members of which %d expired; want %d expired and %d live", script, calls, members, expired, want, calls)
			}
			if calls == 50 {
				t.Logf("%s: after 50 admissions, %d of %d members expired, %d bytes (%d bytes per member of the burst)",
					script, expired, members, p.usage(rk), full/burst)
			}
		}
	}
}
