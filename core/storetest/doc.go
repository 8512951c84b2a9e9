// Package storetest is the conformance suite every store.Store must pass: it
// holds a store to the arithmetic of ALGORITHMS.md, figure by figure.
//
// A store's tests call Run with a Harness that says how to build the store
// and, optionally, how to control its clock, list its keys and flush its
// scripts:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			NewStore: func(tb testing.TB) store.Store { return newStore(tb) },
//			Now:      clock.Now,
//			Advance:  func(tb testing.TB, d time.Duration) { clock.Advance(d) },
//		})
//	}
//
// Run covers, as subtests:
//
//   - BadInput: an empty key, a negative cost, no limits and an invalid
//     limit (the zero Spec) return errors wrapping store.ErrEmptyKey,
//     store.ErrNegativeCost and store.ErrInvalidLimit (both of the last two),
//     without a panic and without charging anything; a cost beyond capacity
//     (up to math.MaxInt64) is a denial with RetryAfter store.InfDuration.
//   - Isolation: keys that a naive storage encoding would confuse ("k:x",
//     "{k}", "k\x00", …) and limits that differ in any field keep separate
//     state; two store instances on one backend share it.
//   - Algorithms: hand-computed sequences for every algorithm, weighted
//     requests (n > 1), peeks (n == 0 charges nothing), costs beyond
//     capacity, penalties (the lock denies without charging and is not
//     extended; a peek and a cost beyond capacity during a lock get the
//     lock's retry), and several limits in one Take (nothing is charged when
//     one denies; the Result is the binding limit's, PerLimit is filled, ties
//     go to the first; the same limit given twice is one state, charged and
//     locked once). Every field of every Result is compared, among them
//     redis-cell's figures: Limit{GCRA, 30, time.Minute, 16} first gives
//     allowed, limit 16, remaining 15, retry 0, reset 2s.
//   - ScriptFlush: the same with Harness.FlushScripts called before every
//     Take.
//   - Reset: a key exhausted and locked through one instance, under each
//     algorithm and all of them at once, then Reset through the other, gets
//     exactly what a fresh key gets; other keys keep their state; a key
//     without state is store.ErrNotFound.
//   - InFlight: 20 concurrent Takes through two instances on
//     MaxInFlight(3, 10s) admit exactly 3, each with its own Result.Slot;
//     a released slot (Store.Release) is free at once, through the other
//     instance, and releasing twice changes nothing; a slot never released
//     is free once its hold has passed, not before; with a rate limit in
//     the same Take, a refusal by either charges neither; the key's TTL is
//     at most the hold.
//   - Refund: under each algorithm and all of them at once, a key charged
//     (Store.Charge) to its limit through one instance and given one charge
//     back (Store.Refund) through the other admits exactly one more; a
//     give-back of a key without state changes nothing.
//   - Concurrency: two store instances × 200 goroutines on one key admit
//     exactly the allowance (100), for every algorithm.
//   - TTL: after each kind of call (peek, admission, denial, penalty lock,
//     locked call, several limits at once) every key the call left has the
//     TTL ALGORITHMS.md gives it, and nothing is left once they lapse
//     (needs Harness.Keys). NoImmortalKeys: every key the backend holds at
//     the end expires.
//   - SeedBoundaryBurst: the seed article's 1000 per 3 s with traffic of 10,
//     10, 980, 900, 100, 0 per second (see below).
//   - Bounds: pseudo-random bursty traffic of mixed costs, checking each
//     algorithm's guarantee on every admission (see below).
//
// # Clocks
//
// With Harness.Now and Harness.Advance the suite controls the clock and
// asserts every figure exactly. Without them the store runs on the wall
// clock (a local Redis's TIME is that clock): the suite then sleeps, runs
// the time-driven cases with every duration doubled (periods of 400 ms to
// 2 s; the figures scale with them) and at the same time, runs
// SeedBoundaryBurst at a tenth of its size (100 per 3 s; fixed window and
// sliding log, each second's requests in its middle 80%, retried when a
// request runs over 90 ms late), and skips Bounds and the case that needs
// 40 s. Each Take runs no
// earlier after the previous one than scheduled, so lateness only
// accumulates, and more elapsed time only ever adds allowance; every
// duration must then match within the lateness measured (plus 1 ms), and
// every count exactly. A case that fell behind by more than the room its
// figures leave (its margin, mostly 150–300 ms, always less than the time one
// unit of its limits takes to come back, P/R; in the TTL case also never
// more than the step's longest TTL, so the keys it judges cannot have
// lapsed because the run was late) proves nothing past that step: the
// steps before it are judged, and the case is retried on a fresh key after
// a pause, up to eight times (about 7 s of pauses), to wait out a busy
// machine. A case that ran late every time is logged as not judged past
// its steps that ran on time, not failed.
//
// # Guarantees checked on random traffic
//
// For admitted units over any span [t_i, t_j] of admissions, with T =
// ceil(P/R):
//
//   - GCRA: at most B + floor((t_j−t_i)/T).
//   - LeakyBucket: at most B+1 + floor((t_j−t_i)/T); each admitted request
//     held for its Delay leaves at least n·T after the previous one, and
//     no Delay exceeds B·T.
//   - TokenBucket: at most B + floor(R·(t_j−t_i)/P).
//   - FixedWindow: at most R in each epoch-aligned window, which is why up
//     to 2R can pass across a boundary: the seed case asserts the 1980.
//   - SlidingLog: at most R in every trailing span (t−P, t].
//   - SlidingWindow: an admission at time t, e into window w, leaves at
//     most R + floor(q·e/P) admitted in (t−P, t], where q is the count
//     admitted in window w−1. It follows from the admission rule
//     q·(P−e) + c·P ≤ R·P (c counting this admission): the trailing span
//     holds the c of window w and at most all q of window w−1, and
//     c + q ≤ R + q·e/P. So it is always below 2R, and R when window w−1
//     was empty; the excess needs window w−1's traffic bunched at its end.
//     In the seed case (980 of window 0's 1000 in its last second) the
//     trailing 3 s up to the last request (4.995 s) hold 1413 = 980 + 333 + 100, within the
//     bound 1000 + floor(1000·2/3) = 1666; the fixed window's 1980 is not.
//
// Run uses a fresh random key per case, so cases never share state, and
// only judges keys that appear while a case runs; it does not empty the
// backend.
package storetest
