package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/fallback"
)

// A charging call whose reply is lost (its connection broke, or its
// deadline passed, after it was sent) may or may not have run. The
// fallback decides its request, and must then charge Redis with what it
// admitted, but not a second time what the call charged. So for
// recordFor after a server gave such an outcome (or answered a call
// slowly, taking more than half its time: see slow), the Store sends its
// charges to the scripts' recorded twins (lua/record.lua): each call
// carries a record key of its own, in which Redis keeps its reply for
// recordTTL (10 s), and a call whose record exists returns the recorded reply
// instead of running again. A call that broke is sent again at once, on a
// fresh connection, while its context lasts (connections killed under
// load are the usual cause, and one sent again gets the exact decision);
// one whose outcome stays unknown is handed to the fallback as an
// Uncertain error whose Settle, once Redis answers, fences the record
// (lua/fence.lua: a call that has not run never will) and says what is
// left to charge: what the fallback owes when the call did not run or was
// refused, nothing when it charged (giving back what it charged beyond
// what the fallback admitted). A call sent before its server was
// recording cannot be identified: the fallback takes it as having run
// (never charged twice; one that never ran goes uncharged).
//
// Healthy servers pay nothing for this: their calls go to the plain
// scripts. A recorded call costs Redis a GET, a TIME and a SET with PX
// more, and recordTTL of memory per call.

// recordFor is how long after an uncertain outcome on a server the Store
// records its charges there.
const recordFor = 10 * time.Second

// recordTTL is how long a record recognises a late call (record.lua's
// recordTTL); a call held longer by Redis (a pause of over 10 s) may be
// charged besides what settled it. It bounds the records' memory: about
// 150 bytes per recorded call for 10 s, on servers that are recording.
const recordTTL = 10 * time.Second

// arm has n's server record charges for recordFor.
func (n *node) arm() {
	if until := monoMicros() + recordFor.Microseconds(); n.recordUntil.Load() < until {
		n.recordUntil.Store(until)
	}
}

// slow reports whether a call made at start, answered now, took more than
// half of ctx's time. The next may run out of it, and a call whose reply
// is lost can be settled exactly only when it was recorded: so a slow
// answer, too, has its server record charges (arm), and the first call
// that times out there is most often recorded already.
func slow(ctx context.Context, start int64) bool {
	dl, ok := ctx.Deadline()
	return ok && monoMicros()-start > time.Until(dl).Microseconds()
}

// recording reports whether charges sent to n's server are recorded.
func (n *node) recording() bool { return monoMicros() < n.recordUntil.Load() }

// uncertain reports whether a call that failed with err, sent at sent,
// may have run: it was sent, and no reply came (a connection lost, a
// deadline passed), the server refusing no connection.
func uncertain(err error, sent int64) bool {
	return err != nil && sent != notSent && !isReply(err) && !refused(err)
}

// recordable reports whether c, a call of cost n, may go to a recorded
// twin: a charge of the take or a lean script, without an InFlight limit
// (whose slot its Release frees).
func (c *scriptCall) recordable(n int64) bool {
	return n > 0 && !c.slotted && c.script.twin != nil
}

// recorded returns c sent to its script's recorded twin, with the record
// key rk after its keys. It is not split on TRYAGAIN (the record is one):
// runCall sends it unrecorded then.
func (c scriptCall) recorded(rk string) scriptCall {
	k := c.cmd[2].(int)
	cmd := make([]any, 0, len(c.cmd)+1)
	cmd = append(cmd, c.cmd[0], c.script.twin.sha, k+1)
	cmd = append(cmd, c.cmd[3:3+k]...)
	cmd = append(cmd, rk)
	cmd = append(cmd, c.cmd[3+k:]...)
	c.cmd, c.script, c.splits = cmd, c.script.twin, false
	return c
}

// recordKey returns a new record key in the slot of the Redis key first.
func recordKey(first string) string {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return first + ":r:" + hex.EncodeToString(id[:])
}

// settler returns the Settle of c, a recorded call of cost n for key
// under limits whose record key is rk (see fallback.Uncertain).
func (s *Store) settler(c scriptCall, n int64, key string, limits []store.Spec, rk string) func(context.Context, int64) (int64, error) {
	return func(ctx context.Context, owe int64) (int64, error) {
		v, err := fenceScript.Run(ctx, s.client, []string{rk}, recordTTL.Milliseconds()).Result()
		if err != nil {
			return 0, fmt.Errorf("redisstore: settling a call whose reply was lost: %w", err)
		}
		rec, ok := v.([]any)
		if !ok || len(rec) < 2 {
			return owe, nil // it had not run, and now never will
		}
		stamp, _ := rec[0].(int64)
		var reply any = rec[2:]
		if kind, _ := rec[1].(int64); kind == 0 && len(rec) == 3 {
			reply = rec[2]
		}
		res, err := c.decode(reply, n)
		if err != nil || !res.Allowed {
			return owe, nil
		}
		if extra := n - owe; extra > 0 {
			// It charged a request the fallback refused: given back, at
			// the charge's stamp when the reply has it, else at the
			// record's (Redis' clock just before the call ran).
			if c.stamped {
				stamp = res.Stamp
			}
			_ = s.refundRedis(ctx, key, extra, stamp, limits...)
		}
		return 0, nil
	}
}

// uncertainError returns err, the error of c (of cost n, for key under
// limits, recorded under rk unless rk is ""), as a fallback.Uncertain.
func (s *Store) uncertainError(err error, c scriptCall, n int64, key string, limits []store.Spec, rk string) error {
	u := &fallback.Uncertain{Err: err}
	if rk != "" {
		u.Settle = s.settler(c, n, key, limits, rk)
	}
	return u
}
