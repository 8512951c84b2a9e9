package store

import (
	"encoding/json"
	"errors"
	"flag"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	cases := []struct {
		in   string
		want Limit
	}{
		{"100/m", Limit{Rate: 100, Period: time.Minute}},
		{"10/s burst 20", Limit{Rate: 10, Period: time.Second, Burst: 20}},
		{"5000/h gcra", Limit{Algorithm: GCRA, Rate: 5000, Period: time.Hour}},
		{"3/s leaky_bucket burst 5", Limit{Algorithm: LeakyBucket, Rate: 3, Period: time.Second, Burst: 5}},
		{"1000/3s fixed_window penalty 1m", Limit{Algorithm: FixedWindow, Rate: 1000, Period: 3 * time.Second, Penalty: time.Minute}},
		{"5/1m30s", Limit{Rate: 5, Period: 90 * time.Second}},
		{"100/10s", Limit{Rate: 100, Period: 10 * time.Second}},
		{"  7/D  ", Limit{Rate: 7, Period: 24 * time.Hour}},
		{"7/day", Limit{Rate: 7, Period: 24 * time.Hour}},
		{"7/2d", Limit{Rate: 7, Period: 48 * time.Hour}},
		{"7/1d12h", Limit{Rate: 7, Period: 36 * time.Hour}},
		{"1/second", Limit{Rate: 1, Period: time.Second}},
		{"1/Sec", Limit{Rate: 1, Period: time.Second}},
		{"1/min", Limit{Rate: 1, Period: time.Minute}},
		{"1/minute", Limit{Rate: 1, Period: time.Minute}},
		{"1/hour", Limit{Rate: 1, Period: time.Hour}},
		{"1/10min", Limit{Rate: 1, Period: 10 * time.Minute}},
		{"1/1.5h", Limit{Rate: 1, Period: 90 * time.Minute}},
		{"1/500ms", Limit{Rate: 1, Period: 500 * time.Millisecond}},
		{"1/250us", Limit{Rate: 1, Period: 250 * time.Microsecond}},
		{"1/250µs", Limit{Rate: 1, Period: 250 * time.Microsecond}},
		{"1/ms", Limit{Rate: 1, Period: time.Millisecond}},
		{"10/S BURST 20 TOKEN-BUCKET", Limit{Algorithm: TokenBucket, Rate: 10, Period: time.Second, Burst: 20}},
		{"10/s\ttoken_bucket\tburst 20", Limit{Algorithm: TokenBucket, Rate: 10, Period: time.Second, Burst: 20}},
		{"10/s penalty 1.5s burst 0 sliding-window", Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Second, Penalty: 1500 * time.Millisecond}},
		{"10/m sliding_log penalty 1ns", Limit{Algorithm: SlidingLog, Rate: 10, Period: time.Minute, Penalty: time.Nanosecond}},
	}
	for _, tc := range cases {
		got, err := ParseLimit(tc.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseLimit(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		if back, err := ParseLimit(got.String()); err != nil || back != got {
			t.Errorf("ParseLimit(%q.String() = %q) = %#v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestParseLimitErrors(t *testing.T) {
	cases := []struct {
		in, msg string
		offset  int
	}{
		{"10/x", `sluice: limit "10/x": unknown period unit "x"`, 3},
		{"", `empty`, 0},
		{"   ", `empty`, 3},
		{"100", `"100" is not RATE/PERIOD`, 0},
		{"/s", `missing rate`, 0},
		{"x/s", `rate "x" is not a whole number`, 0},
		{"-1/s", `rate "-1" is not a whole number`, 0},
		{"99999999999999999999/s", `rate "99999999999999999999" is too large`, 0},
		{"10/", `missing period`, 3},
		{"10 /s", `"10" is not RATE/PERIOD`, 0},
		{"10/10", `missing unit after "10"`, 3},
		{"10/10x", `unknown unit "x"`, 3},
		{"10/1m30", `missing unit after "30"`, 3},
		{"10/1..5s", `bad number "1..5"`, 3},
		{"10/1.s", `bad number "1."`, 3},
		{"10/s burst", `burst needs a count`, 10},
		{"10/s burst -3", `burst "-3" is not a whole number`, 11},
		{"10/s burst 2 burst 3", `burst given twice`, 13},
		{"10/s penalty", `penalty needs a duration`, 12},
		{"10/s penalty m", `penalty: "m": want a number before the unit`, 13},
		{"10/s penalty 1y", `penalty: "1y": unknown unit "y"`, 13},
		{"10/s gcra token_bucket", `algorithm given twice (gcra, then token_bucket)`, 10},
		{"10/s fast", `unexpected "fast": want "burst N"`, 5},
		{"10/s 20/m", `unexpected "20/m": only one RATE/PERIOD`, 5},
		{"10/999999999h", `too long a duration`, 3},
		// Well formed, but not a valid limit: Validate's reason.
		{"0/s", `sluice: limit "0/s": rate must be positive`, 0},
		{"10/s sliding_log burst 5", `sliding_log takes no burst`, 0},
		{"10/1ns", `period must be a whole number of microseconds`, 0},
		{"2/us gcra", `more than one event per microsecond`, 0},
		{"10/0s", `period must be positive`, 0},
		{strings.Repeat("1", 300) + "/s", `too long: 302 bytes`, 0},
	}
	for _, tc := range cases {
		l, err := ParseLimit(tc.in)
		if err == nil {
			t.Errorf("ParseLimit(%q) = %v, want an error", tc.in, l)
			continue
		}
		if !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q): %v does not wrap ErrInvalidLimit", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseLimit(%q): %q, want it to contain %q", tc.in, err, tc.msg)
		}
		if !strings.HasPrefix(err.Error(), "sluice: limit ") || strings.Count(err.Error(), "sluice:") != 1 {
			t.Errorf("ParseLimit(%q): %q, want one \"sluice: limit\" prefix", tc.in, err)
		}
		var pe *parseError
		if !errors.As(err, &pe) {
			t.Errorf("ParseLimit(%q): %T, want *parseError", tc.in, err)
		} else if pe.Offset != tc.offset || pe.Input != tc.in {
			t.Errorf("ParseLimit(%q): offset %d input %q, want %d", tc.in, pe.Offset, pe.Input, tc.offset)
		}
		if l != (Limit{}) {
			t.Errorf("ParseLimit(%q) returned %v with an error", tc.in, l)
		}
	}
}

// TestParseLimitValidateError: a well-formed but invalid limit reports the
// very error Validate returns, for errors.Is against it.
func TestParseLimitValidateError(t *testing.T) {
	_, err := ParseLimit("10/s fixed_window burst 3")
	want := Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Second, Burst: 3}.validate()
	if want == nil || errors.Unwrap(err) == nil || errors.Unwrap(err).Error() != want.Error() {
		t.Fatalf("got %v (unwraps to %v), want it to wrap %v", err, errors.Unwrap(err), want)
	}
}

// randomValidLimit draws a valid Limit with varied fields, including the
// zero Algorithm, odd periods and sub-microsecond penalties.
func randomValidLimit(r *rand.Rand) Limit {
	for {
		var l Limit
		if i := r.IntN(len(Algorithms()) + 1); i < len(Algorithms()) {
			l.Algorithm = Algorithms()[i]
		}
		switch r.IntN(4) {
		case 0:
			l.Period = []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour, time.Millisecond}[r.IntN(5)]
		case 1:
			l.Period = time.Duration(1+r.Int64N(1e6)) * time.Microsecond
		case 2:
			l.Period = time.Duration(1+r.Int64N(1<<40)) * time.Microsecond
		default:
			l.Period = time.Duration(1+r.Int64N(1e4)) * time.Second
		}
		l.Rate = 1 + r.Int64N([]int64{10, 1000, 1 << 30}[r.IntN(3)])
		if r.IntN(2) == 0 {
			l.Burst = r.Int64N(1000)
		}
		switch r.IntN(4) {
		case 0:
			l.Penalty = time.Duration(1 + r.Int64N(1e12))
		case 1:
			l.Penalty = time.Duration(1+r.Int64N(1e5)) * time.Second
		}
		if l.validate() == nil {
			return l
		}
	}
}

// TestLimitStringRoundTrip: ParseLimit(l.String()) == l for valid limits.
func TestLimitStringRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		l := randomValidLimit(r)
		s := l.String()
		back, err := ParseLimit(s)
		if err != nil || back != l {
			t.Fatalf("%#v renders as %q, which parses as %#v, %v", l, s, back, err)
		}
	}
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{Limit{Rate: 100, Period: time.Minute}, "100/m"},
		{Limit{Algorithm: GCRA, Rate: 30, Period: time.Minute, Burst: 16}, "30/m gcra burst 16"},
		{Limit{Algorithm: FixedWindow, Rate: 1000, Period: 3 * time.Second, Penalty: time.Minute}, "1000/3s fixed_window penalty 1m"},
		{Limit{Algorithm: TokenBucket, Rate: 5, Period: 90 * time.Second}, "5/1m30s token_bucket"},
		{Limit{Rate: 5, Period: 36*time.Hour + 1500*time.Millisecond}, "5/1d12h1.5s"},
		{Limit{Rate: 5, Period: 2 * time.Microsecond, Penalty: 3}, "5/2us penalty 3ns"},
		{Limit{Rate: 5, Period: time.Hour + time.Microsecond}, "5/1h1us"},
		// Invalid limits still render, for error messages.
		{Limit{Algorithm: "nope x", Rate: -1}, `-1/0s algorithm "nope x"`},
	} {
		if got := c.l.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.l, got, c.want)
		}
	}
}

func TestLimitText(t *testing.T) {
	var l Limit
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.TextVar(&l, "limit", PerSecond(10), "the limit")
	if err := fs.Parse([]string{"-limit", "5/m token_bucket burst 2"}); err != nil {
		t.Fatal(err)
	}
	if want := (Limit{Algorithm: TokenBucket, Rate: 5, Period: time.Minute, Burst: 2}); l != want {
		t.Fatalf("flag: %v, want %v", l, want)
	}
	fs.SetOutput(new(strings.Builder))
	if err := fs.Parse([]string{"-limit", "5/x"}); err == nil || !strings.Contains(err.Error(), `unknown period unit "x"`) {
		t.Fatalf("bad flag: %v", err)
	}

	var cfg struct{ Limits []Limit }
	if err := json.Unmarshal([]byte(`{"Limits": ["10/s burst 20", "1000/h sliding_log"]}`), &cfg); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(cfg)
	if err != nil || string(out) != `{"Limits":["10/s burst 20","1000/h sliding_log"]}` {
		t.Fatalf("json: %s, %v", out, err)
	}
	// An invalid limit marshals (a config with a zero Limit can be
	// written), and unmarshaling it says what is wrong.
	out, err = json.Marshal(Limit{Algorithm: SlidingLog, Rate: 5, Period: time.Second, Burst: 2})
	if err != nil || string(out) != `"5/s sliding_log burst 2"` {
		t.Fatalf("marshal of an invalid limit: %s, %v", out, err)
	}
	if err := json.Unmarshal(out, &l); !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), "sliding_log takes no burst") {
		t.Fatalf("unmarshal of an invalid limit: %v", err)
	}
	before := Limit{Rate: 1, Period: time.Second}
	l = before
	if err := l.UnmarshalText([]byte("nonsense")); err == nil || l != before {
		t.Fatalf("failed UnmarshalText: %v, limit %v", err, l)
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{
		"100/m", "10/s burst 20", "5000/h gcra", "3/s leaky_bucket burst 5",
		"1000/3s fixed_window penalty 1m", "5/1m30s", "10/x", "1/1.5h", "7/1d12h1.5s",
		"10/s penalty 1.000000001s token-bucket", "2/µs", "1/0.0000001s", "", "/", "1/ s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLimit(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q): %v does not wrap ErrInvalidLimit", s, err)
			}
			var pe *parseError
			if !errors.As(err, &pe) || pe.Offset < 0 || pe.Offset > len(s) {
				t.Fatalf("ParseLimit(%q): %#v", s, err)
			}
			return
		}
		if err := l.validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %v, which is invalid: %v", s, l, err)
		}
		back, err := ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %#v; its String %q parses as %#v, %v", s, l, l.String(), back, err)
		}
	})
}
