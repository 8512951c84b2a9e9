package core

import "github.com/sluicehq/sluice/core/store"

// ParseError is the error ParseLimit returns; see store.ParseError.
type ParseError = store.ParseError

// ParseLimit parses a limit written the way people say it: "100/m" (GCRA,
// burst 100), "10/s burst 20", "3/s leaky_bucket burst 5", "1000/3s
// fixed_window penalty 1m", "5/1m30s token-bucket". The grammar is
// case-insensitive, words separated by spaces or tabs, leading and
// trailing space ignored:
//
//	limit     = RATE "/" PERIOD { "burst" COUNT | "penalty" DURATION | ALGORITHM }
//	PERIOD    = UNIT | DURATION     (a bare UNIT is 1 of it: "m" = "1m")
//	DURATION  = NUMBER UNIT { NUMBER UNIT }   ("1m30s", "1.5h", "2d")
//	UNIT      = ns | us | µs | ms | s | sec | second | m | min | minute |
//	            h | hr | hour | d | day   (long names also with a final "s")
//	ALGORITHM = gcra | token_bucket | fixed_window | sliding_window |
//	            sliding_log | leaky_bucket | in_flight   ("-" may replace "_")
//
// RATE and COUNT are decimal integers, NUMBER a decimal with an optional
// fraction; RATE/PERIOD has no spaces inside, and the clauses follow in
// any order, each at most once. Without an algorithm or burst they stay
// zero: GCRA and the algorithm's default burst. The result is validated
// (Limit.Validate): "10/s sliding_log burst 5" fails, as windows take no
// burst. Errors are *ParseError values wrapping ErrInvalidLimit that quote
// the input and say what is wrong; inputs over 256 bytes are rejected.
// ParseLimit(l.String()) returns l for every valid Limit l. It is safe for
// concurrent use.
func ParseLimit(s string) (Limit, error) {
	var l Limit
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return Limit{}, err
	}
	return l, nil
}
