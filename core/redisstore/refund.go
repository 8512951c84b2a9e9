package redisstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core/store"
)

// refundScript gives back what a charge took (lua/refund.lua).
var refundScript = newScript(refundSource)

// chargeRedis is Charge without the fallback (see direct).
func (s *Store) chargeRedis(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if err := s.check(key, n, limits); err != nil {
		return store.Result{}, err
	}
	c, err := s.takeCall(key, n, limits, true) // the take script, asked for its clock
	if err != nil {
		return store.Result{}, err
	}
	r, _, err := s.runCall(ctx, c, n, key, limits)
	return r, err
}

// refundRedis is Refund without the fallback (see direct).
func (s *Store) refundRedis(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	if err := s.check(key, n, limits); err != nil || n == 0 {
		return err
	}
	base := s.redisKey(key, "")
	cmd := refundScript.command(len(limits), 5+len(limits)+argsPerLimit*len(limits))
	ps := make([]*prepared, len(limits))
	for i, l := range limits {
		p, err := s.prepare(l)
		if err != nil {
			return fmt.Errorf("redisstore: refund: limit %d: %w", i, err)
		}
		ps[i] = p
		cmd = append(cmd, base+p.state)
	}
	cmd = append(cmd, chargeArg(n), stamp) // sent once: a give-back sent again by the client is refused
	for _, p := range ps {
		cmd = append(cmd, s.argv(p)...)
	}
	key0 := base + ps[0].state
	server := s.health.nodeFor(ctx, key0)
	if err := server.admit(ctx); err != nil {
		return fmt.Errorf("redisstore: refund %d on %d limit(s): %w", n, len(limits), err)
	}
	start := monoMicros()
	_, server, sent, err := s.send(ctx, server, key0, refundScript, cmd, len(ps) > 1)
	server.report(ctx, err, start, sent)
	if r, _ := redirectOf(err); r == redirectTryAgain && len(ps) > 1 {
		// keys split by a slot migration: one limit at a time (see split)
		err = (&split{base: base, limits: ps}).refundAll(ctx, s, n, stamp)
	}
	if err != nil {
		return fmt.Errorf("redisstore: refund %d on %d limit(s): %w", n, len(limits), err)
	}
	return nil
}
