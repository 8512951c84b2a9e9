package core

import "github.com/sluicehq/sluice/core/store"

// ParseError is the error ParseLimit returns; see store.ParseError.
type ParseError = store.ParseError

// ParseLimit parses a limit written the way people say it:
//
//	100/m                          GCRA, 100 per minute, burst 100
//	10/s burst 20                  GCRA, 10 per second, 20 at once
//	5000/h gcra
//	3/s leaky_bucket burst 5       nginx-style: 3/s, a queue of 5
//	1000/3s fixed_window penalty 1m
//	5/1m30s token-bucket
//
// The grammar, case-insensitive, words separated by spaces or tabs,
// leading and trailing space ignored:
//
//	limit    = RATE "/" PERIOD { clause }
//	clause   = "burst" COUNT | "penalty" DURATION | ALGORITHM
//	RATE     = decimal digits (events per PERIOD)
//	COUNT    = decimal digits
//	PERIOD   = UNIT | DURATION        (a bare UNIT means 1 of it: "m" = "1m")
//	DURATION = NUMBER UNIT { NUMBER UNIT }   (like time.ParseDuration: "10s",
//	           "1m30s", "1.5h", "500ms"; plus days, "2d" = 48h)
//	NUMBER   = digits [ "." digits ]
//	UNIT     = ns | us | µs | ms | s | sec | second | m | min | minute |
//	           h | hr | hour | d | day   (the long names also with a final "s")
//	ALGORITHM = gcra | token_bucket | fixed_window | sliding_window |
//	           sliding_log | leaky_bucket | in_flight   ("-" may replace "_")
//
// RATE/PERIOD comes first and has no spaces inside; the clauses follow in
// any order, each at most once. Without an algorithm the Limit's Algorithm
// is empty, its zero value, which means GCRA; without burst, Burst is 0,
// the algorithm's default. The parsed Limit is validated (Limit.Validate),
// so "10/s sliding_log burst 5" is rejected: the window algorithms take no
// burst.
//
// Errors are *ParseError values wrapping ErrInvalidLimit that quote the
// input and say what is wrong, for example
// `sluice: limit "10/x": unknown period unit "x"`. Strings longer than
// 256 bytes are rejected.
//
// ParseLimit is the inverse of Limit.String: for every valid Limit l,
// ParseLimit(l.String()) returns l. It is safe for concurrent use.
func ParseLimit(s string) (Limit, error) {
	var l Limit
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return Limit{}, err
	}
	return l, nil
}
