package redisstore

// How a Take becomes a script call: each limit prepared once in the forms
// the scripts take (prepare), the call's keys and arguments (call,
// request), and its reply turned into a Result (decode).

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// prepared is a validated limit in the forms the scripts take.
type prepared struct {
	state string            // stateSuffix, appended to the tagged key
	lock  string            // state + ":x"
	args  [argsPerLimit]any // the take script's ARGV

	// lean is the limit's family, whose lean script serves a Take of this
	// limit alone, with leanArgs after the cost; nil with a penalty, which
	// only the take script knows.
	lean     *family
	leanArgs []any
	// calendar is set for a calendar window, whose args change with the
	// window (see argv); it has no lean script.
	calendar bool

	spec     store.Spec
	capacity int64
	alg      store.Algorithm
	penalty  int64 // µs
}

// prepare returns spec prepared, from the Store's cache when it holds it.
func (s *Store) prepare(spec store.Spec) (*prepared, error) {
	if p, ok := s.cache.Get(spec); ok {
		return p, nil
	}
	return s.prepareNew(spec)
}

// prepareNew is prepare for a limit not in the cache: apart, since its spec
// escapes to the heap (an allocation on every call of the function that
// holds it).
func (s *Store) prepareNew(spec store.Spec) (*prepared, error) {
	f := families[spec.Algorithm()]
	if f == nil {
		return nil, fmt.Errorf("%w: algorithm %q has no Redis script", store.ErrInvalidLimit, string(spec.Algorithm()))
	}
	state := stateSuffix(&spec)
	p := &prepared{
		state:    state,
		lock:     state + ":x",
		spec:     spec,
		capacity: spec.Capacity(),
		alg:      spec.Algorithm(),
		penalty:  spec.Penalty(),
		args: [argsPerLimit]any{
			f.code,
			strconv.FormatInt(spec.Rate(), 10),
			strconv.FormatInt(spec.Period(), 10),
			strconv.FormatInt(spec.Burst(), 10),
			strconv.FormatInt(spec.Interval(), 10),
			strconv.FormatInt(spec.Penalty(), 10),
		},
	}
	if unit, _ := spec.Calendar(); unit != "" {
		p.calendar = true
	} else if spec.Penalty() == 0 && f.script != nil {
		p.lean, p.leanArgs = f, leanArgs(f, &spec)
	}
	return s.cache.Add(spec, p, maxCachedLimits), nil
}

// scriptCall is one script call for a Take: the script, its command
// (EVALSHA, the script's hash, KEYS and ARGV), and the prepared limits it
// decodes the reply with.
type scriptCall struct {
	script *script
	cmd    []any
	key    string    // the first Redis key, whose slot picks the Cluster node
	first  *prepared // the first limit
	m      int       // the number of limits
	// slotted: the reply ends with the slot taken (an InFlight limit)
	slotted bool
	// stamped: the take script's reply ends with Redis' clock (Charge)
	stamped bool
	// splits: on TRYAGAIN the Take is decided one key at a time
	// (splitOf); not when the call has two InFlight limits (one slot id
	// for both), nor for a lean script's call (one key)
	splits bool
	// limits are the take script's limits, prepared, which decode its
	// reply (nil for a lean script's)
	limits []*prepared
}

// call builds the script call for a Take of n (negative: a dry run of -n):
// the lean script of its family for one limit without a penalty, else the
// take script.
func (s *Store) call(key string, n int64, limits []store.Spec) (scriptCall, error) {
	if len(limits) == 1 {
		p, err := s.prepare(limits[0])
		if err != nil {
			return scriptCall{}, fmt.Errorf("redisstore: take: limit 0: %w", err)
		}
		if f := p.lean; f != nil {
			k := s.redisKey(key, p.state)
			cmd := append(f.script.command(1, 5+len(p.leanArgs)), k, chargeArg(n))
			return scriptCall{f.script, append(cmd, p.leanArgs...), k, p, 1, false, false, false, nil}, nil
		}
	}
	return s.takeCall(key, n, limits, false)
}

// takeCall builds the take script's call for a Take of n (negative: a dry
// run of -n); stamped asks for Redis' clock too (a Charge).
func (s *Store) takeCall(key string, n int64, limits []store.Spec, stamped bool) (scriptCall, error) {
	m := len(limits)
	size := 3 + keysPerLimit*m + 1 + argsPerLimit*m
	if stamped {
		size++
	}
	c := scriptCall{script: takeScript, cmd: takeScript.command(keysPerLimit*m, size), m: m, stamped: stamped,
		limits: make([]*prepared, m)}
	base := s.redisKey(key, "")
	for i, l := range limits {
		p, err := s.prepare(l)
		if err != nil {
			return scriptCall{}, fmt.Errorf("redisstore: take: limit %d: %w", i, err)
		}
		c.limits[i] = p
		c.slotted = c.slotted || p.alg == store.InFlight
		// Without a penalty, its lock is the state key again (unread): a
		// lock key that does not exist would have a Cluster answer
		// TRYAGAIN for as long as the slot migrates.
		var state any = base + p.state
		lock := state
		if p.penalty != 0 {
			lock = base + p.lock
		}
		c.cmd = append(c.cmd, state, lock)
	}
	c.key, c.first, c.splits = c.cmd[3].(string), c.limits[0], splittable(c.limits)
	c.cmd = append(c.cmd, chargeArg(n))
	for _, p := range c.limits {
		c.cmd = append(c.cmd, s.argv(p)...)
	}
	if stamped {
		c.cmd = append(c.cmd, "s")
	}
	return c, nil
}

// keysArgs returns the KEYS and ARGV of c's command.
func (c *scriptCall) keysArgs() ([]string, []any) {
	n := c.cmd[2].(int)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = c.cmd[3+i].(string)
	}
	return keys, c.cmd[3+n:]
}

// decode turns the reply of c into the Result of its Take of n.
func (c *scriptCall) decode(reply any, n int64) (store.Result, error) {
	if c.script != takeScript && c.script != takeScript.twin {
		return decodeLean(c.first, n, reply)
	}
	v, err := int64s(reply)
	if err != nil {
		return store.Result{}, err
	}
	return c.decodeInts(v, n)
}

// decodeInts turns v, the take script's reply to c, into the Result of
// its Take of n.
func (c *scriptCall) decodeInts(v []int64, n int64) (store.Result, error) {
	// take.lua appends the slot (slotted), then its clock (stamped)
	var stamp, slot int64
	if c.stamped {
		if len(v) == 0 {
			return store.Result{}, fmt.Errorf("redisstore: take: script replied no integers, want a stamp")
		}
		stamp, v = v[len(v)-1], v[:len(v)-1]
	}
	if c.slotted {
		if len(v) == 0 {
			return store.Result{}, fmt.Errorf("redisstore: take: script replied no integers, want a slot")
		}
		slot, v = v[len(v)-1], v[:len(v)-1]
	}
	r, err := decode(v, n, c.limits)
	r.Stamp, r.Slot = stamp, slot
	return r, err
}

// stateSuffix is what follows the hash tag in the Redis key of a limit's
// state: ":" + specID, and ":h" after it for a fixed window, whose state
// is a hash (a window's index → its count) since the string "<w>:<c>" of
// earlier versions; the mark keeps the two layouts in different keys, so a
// process of an earlier version running beside this one never meets a key
// of the wrong type.
func stateSuffix(s *store.Spec) string {
	if s.Algorithm() == store.FixedWindow {
		return ":" + specID(s) + ":h"
	}
	return ":" + specID(s)
}

// specID returns a short, injective identity of s: two limits share state
// on a key exactly when every field that shapes their arithmetic is equal.
// Example: "g30/60000000b16p0".
func specID(s *store.Spec) string {
	if unit, zone := s.Calendar(); unit != "" { // "f10000/month@Europe/Berlinp0"
		return families[store.FixedWindow].code + strconv.FormatInt(s.Rate(), 10) + "/" + unit + "@" + zone.String() +
			"p" + strconv.FormatInt(s.Penalty(), 10)
	}
	return families[s.Algorithm()].code + strconv.FormatInt(s.Rate(), 10) + "/" + strconv.FormatInt(s.Period(), 10) +
		"b" + strconv.FormatInt(s.Burst(), 10) + "p" + strconv.FormatInt(s.Penalty(), 10)
}

// redisKey returns the Redis key of suffix (a prepared state or lock) for
// key: the prefix, key's Cluster hash tag between braces, and suffix. Every
// Redis key of a key is made here, all under one hash tag.
func (s *Store) redisKey(key, suffix string) string {
	if plainKey(key) {
		return s.prefix + "{=" + key + "}" + suffix
	}
	return s.prefix + "{" + hashTag(key) + "}" + suffix
}

// argv returns p's ARGV for the take and refund scripts: p.args, but for
// a calendar window, whose P, B and T carry the boundaries of two
// consecutive windows around the Store's clock (arith.CalendarBounds),
// among which the script finds the one holding Redis' clock.
func (s *Store) argv(p *prepared) []any {
	if !p.calendar {
		return p.args[:]
	}
	b := arith.CalendarBounds(&p.spec, s.wall().UnixMicro())
	a := p.args
	a[2], a[3], a[4] = strconv.FormatInt(b[0], 10), strconv.FormatInt(b[1], 10), strconv.FormatInt(b[2], 10)
	return a[:]
}

// decode turns the take script's reply into the Result of a Take of n
// (negative: a dry run of -n) over limits: each limit's three integers
// by its family's decoder, as a lean script's, then its penalty lock.
// When some limit denies or is locked, nothing was charged and a limit
// that allows replied as a peek does.
func decode(reply []int64, n int64, limits []*prepared) (store.Result, error) {
	m := len(limits)
	if len(reply) != repliesPerLimit*m {
		return store.Result{}, fmt.Errorf("redisstore: take: script replied %d integers for %d limit(s), want %d",
			len(reply), m, repliesPerLimit*m)
	}
	all := true
	for i := range m {
		v := reply[repliesPerLimit*i:]
		all = all && v[0] >= 0 && v[3] == 0
	}
	n = abs(n)
	per := make([]store.Result, m)
	for i, p := range limits {
		v := reply[repliesPerLimit*i:]
		cost := n
		if !all && v[0] >= 0 {
			cost = 0
		}
		r := families[p.alg].decode(p, cost, [3]int64{v[0], v[1], v[2]})
		switch {
		case v[3] > 0: // locked: denied, nothing charged, until the lock ends
			left := arith.Micros(v[3])
			r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay = false, 0, left, max(r.ResetAfter, left), 0
		case !r.Allowed && p.penalty > 0:
			penalty := arith.Micros(p.penalty)
			if r.RetryAfter != store.InfDuration {
				r.RetryAfter = max(r.RetryAfter, penalty)
			}
			r.ResetAfter = max(r.ResetAfter, penalty)
		}
		per[i] = r
	}
	return arith.Combine(per), nil
}

// costArg is n for the scripts (negative: a dry run of -n). Every limit's
// capacity is below maxCost, so a larger cost is sent as maxCost:
// it is denied with RetryAfter store.InfDuration all the same, and no
// arithmetic overflows.
func costArg(n int64) int64 {
	return max(-maxCost, min(n, maxCost))
}

func retryDuration(us int64) time.Duration {
	if us == retryNever {
		return store.InfDuration
	}
	return arith.Micros(us)
}

// hashTag returns the part of the Redis keys between braces for key: "="
// and the key itself when it is short and plain, "#" and 32 hex digits of
// its SHA-256 otherwise. The two forms cannot meet ("=" versus "#"), plain
// keys map to themselves, and neither form contains a brace.
func hashTag(key string) string {
	if plainKey(key) {
		return "=" + key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:16])
}

func plainKey(key string) bool {
	if len(key) == 0 || len(key) > maxPlainKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '@' || c == '/' || c == '-':
		default:
			return false
		}
	}
	return true
}
