package store

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxLimitStringLength bounds the length of the string ParseLimit accepts.
const maxLimitStringLength = 256

// parseError is the error ParseLimit and Limit.UnmarshalText return. It
// wraps ErrInvalidLimit, or, when the string is well formed but the limit
// it describes is not valid, Limit.Spec's error.
type parseError struct {
	Input  string // the string parsed
	Offset int    // byte offset in Input of the part at fault; 0 when Limit.Spec refused the limit as a whole
	Msg    string // what is wrong, without the input
	Err    error  // ErrInvalidLimit, or the error of Limit.Spec
}

func (e *parseError) Error() string {
	in := e.Input
	if len(in) > 64 {
		// Keep messages readable (and logs bounded) for a long input.
		cut := 64
		for cut > 0 && !utf8.RuneStart(in[cut]) {
			cut--
		}
		in = in[:cut] + "..."
	}
	return "sluice: limit " + strconv.Quote(in) + ": " + e.Msg
}

// Unwrap returns ErrInvalidLimit, or the error of Limit.Spec.
func (e *parseError) Unwrap() error { return e.Err }

// ParseLimit parses a limit written the way people say it: "100/m" (GCRA,
// burst 100), "10/s burst 20", "3/s leaky_bucket burst 5", "1000/3s
// fixed_window penalty 1m", "5/1m30s token-bucket". The grammar is
// case-insensitive, words separated by spaces or tabs, leading and
// trailing space ignored:
//
//	limit     = RATE "/" PERIOD { "burst" COUNT | "penalty" DURATION | ALGORITHM }
//	PERIOD    = UNIT | DURATION     (a bare UNIT is 1 of it: "m" = "1m")
//	          | CALENDAR [ "@" ZONE ] | "day@" ZONE
//	CALENDAR  = week | month        (a calendar window, PerCalendar)
//	ZONE      = a name time.LoadLocation knows: UTC, Europe/Berlin, ...
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
// (Limit.Spec): "10/s sliding_log burst 5" fails, as windows take no
// burst. A calendar window, "10000/month@Europe/Berlin", "500/week"
// (UTC when no zone is named) or "100/day@America/New_York", is a
// PerCalendar limit: a fixed window from local midnight (Mondays for
// weeks, the 1st for months) to the next; it takes a penalty and no
// other algorithm, and "100/day" without a zone stays a period of 24
// hours. Zone names are case-sensitive (but "utc") and need the system's
// zone database or the time/tzdata package. Errors wrap ErrInvalidLimit; they quote
// the input and say what is wrong; inputs over 256 bytes are rejected.
// ParseLimit(l.String()) returns l for every valid Limit l (a calendar
// window's named zone is loaded anew; see Limit.String). It is safe for
// concurrent use.
func ParseLimit(s string) (Limit, error) {
	if len(s) > maxLimitStringLength {
		return Limit{}, &parseError{Input: s, Msg: fmt.Sprintf("too long: %d bytes, at most %d", len(s), maxLimitStringLength), Err: ErrInvalidLimit}
	}
	p := limitParser{in: s}
	l, err := p.parse()
	if err != nil {
		return Limit{}, err
	}
	if err := l.validate(); err != nil {
		// Limit.Spec's message repeats the limit (as String renders it);
		// the input is quoted already, so keep only what is wrong.
		msg := err.Error()
		if rest, ok := strings.CutPrefix(msg, ErrInvalidLimit.Error()+" "+l.String()+": "); ok {
			msg = rest
		}
		return Limit{}, &parseError{Input: s, Msg: msg, Err: err}
	}
	return l, nil
}

// MarshalText returns l.String(). With UnmarshalText it makes a Limit
// usable with flag.TextVar and as a string in JSON, YAML or TOML
// configuration (and log/slog's text and JSON handlers render it so). It
// never fails: an invalid Limit renders too, and UnmarshalText then
// reports what is wrong with it.
func (l Limit) MarshalText() ([]byte, error) {
	return []byte(l.String()), nil
}

// UnmarshalText parses text as ParseLimit does and sets *l to the
// result. On error, a *parseError, *l is left unchanged.
func (l *Limit) UnmarshalText(text []byte) error {
	v, err := ParseLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

type limitParser struct {
	in  string
	pos int // start of the next token
}

// token returns the next space-separated word and its offset ("" at the end).
func (p *limitParser) token() (string, int) {
	for p.pos < len(p.in) && isSpace(p.in[p.pos]) {
		p.pos++
	}
	start := p.pos
	for p.pos < len(p.in) && !isSpace(p.in[p.pos]) {
		p.pos++
	}
	return p.in[start:p.pos], start
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func (p *limitParser) fail(off int, format string, args ...any) error {
	return &parseError{Input: p.in, Offset: off, Msg: fmt.Sprintf(format, args...), Err: ErrInvalidLimit}
}

// parse reads "RATE/PERIOD" and then the options in any order.
func (p *limitParser) parse() (Limit, error) {
	l, err := p.ratePeriod()
	if err != nil {
		return l, err
	}
	seen := map[string]bool{}
	for {
		tok, off := p.token()
		if tok == "" {
			return l, nil
		}
		word := strings.ToLower(tok)
		if word != "burst" && word != "penalty" {
			err = p.algorithm(&l, tok, off, seen)
		} else if seen[word] {
			err = p.fail(off, "%s given twice", word)
		} else {
			seen[word] = true
			err = p.option(&l, word)
		}
		if err != nil {
			return l, err
		}
	}
}

// ratePeriod reads the leading "RATE/PERIOD".
func (p *limitParser) ratePeriod() (Limit, error) {
	var l Limit
	tok, off := p.token()
	if tok == "" {
		return l, p.fail(off, `empty; want RATE/PERIOD like "100/m"`)
	}
	slash := strings.IndexByte(tok, '/')
	if slash < 0 {
		return l, p.fail(off, `%q is not RATE/PERIOD (like "100/m" or "10/s")`, tok)
	}
	rate, period := tok[:slash], tok[slash+1:]
	if rate == "" {
		return l, p.fail(off, "missing rate before \"/\"")
	}
	r, err := parseCount(rate)
	if err != nil {
		return l, p.fail(off, "rate %q %v", rate, err)
	}
	l.Rate = r
	off += slash + 1
	if unit, zone, at := strings.Cut(period, "@"); at || calendarWord(unit) {
		return p.calendar(l, unit, zone, at, off)
	}
	switch {
	case period == "":
		return l, p.fail(off, `missing period after "/" (like "s", "m", "h", "d" or "10s")`)
	case period[0] < '0' || period[0] > '9':
		u, ok := durationUnit(strings.ToLower(period))
		if !ok {
			return l, p.fail(off, `unknown period unit %q (want s, m, h, d, a long name like "minute", or a duration like "10s")`, period)
		}
		l.Period = time.Duration(u)
	default:
		d, err := parseDuration(period)
		if err != nil {
			return l, p.fail(off, "period: %v", err)
		}
		l.Period = d
	}
	return l, nil
}

// calendarWord reports whether a period is a calendar unit without a
// zone: "week" or "month" (a bare "day" is 24 hours).
func calendarWord(unit string) bool {
	u := strings.ToLower(unit)
	return u == "week" || u == "month"
}

// calendar reads the period "UNIT@ZONE" (at) or "UNIT" of a calendar
// window, at off, into l.
func (p *limitParser) calendar(l Limit, unit, zone string, at bool, off int) (Limit, error) {
	u := strings.ToLower(unit)
	if calendarLength(u) == 0 {
		return l, p.fail(off, `%q before "@" is not a calendar unit (want day, week or month)`, unit)
	}
	if at && zone == "" {
		return l, p.fail(off+len(unit)+1, `missing zone after "@" (like "UTC" or "Europe/Berlin")`)
	}
	z, err := loadZone(zone)
	if err != nil {
		return l, p.fail(off+len(unit)+1, "zone %q: %v", zone, err)
	}
	return PerCalendar(l.Rate, u, z), nil
}

// option reads the argument of "burst" or "penalty" into l.
func (p *limitParser) option(l *Limit, word string) error {
	arg, off := p.token()
	if word == "burst" {
		if arg == "" {
			return p.fail(off, "burst needs a count, like \"burst 20\"")
		}
		b, err := parseCount(arg)
		if err != nil {
			return p.fail(off, "burst %q %v", arg, err)
		}
		l.Burst = b
		return nil
	}
	if arg == "" {
		return p.fail(off, "penalty needs a duration, like \"penalty 1m\"")
	}
	d, err := parseDuration(arg)
	if err != nil {
		return p.fail(off, "penalty: %v", err)
	}
	l.Penalty = d
	return nil
}

// algorithm reads an algorithm's name, tok at off, into l.
func (p *limitParser) algorithm(l *Limit, tok string, off int, seen map[string]bool) error {
	alg, ok := algorithmNamed(strings.ToLower(tok))
	switch {
	case !ok && strings.IndexByte(tok, '/') >= 0:
		return p.fail(off, "unexpected %q: only one RATE/PERIOD per limit", tok)
	case !ok:
		return p.fail(off, "unexpected %q: want \"burst N\", \"penalty DURATION\" or an algorithm (gcra, token_bucket, fixed_window, sliding_window, sliding_log, leaky_bucket, in_flight)", tok)
	case seen["algorithm"]:
		return p.fail(off, "algorithm given twice (%s, then %s)", string(l.Algorithm), string(alg))
	}
	seen["algorithm"] = true
	l.Algorithm = alg
	return nil
}

func algorithmNamed(word string) (Algorithm, bool) {
	word = strings.ReplaceAll(word, "-", "_")
	for _, a := range append(Algorithms(), InFlight) {
		if word == string(a) {
			return a, true
		}
	}
	return "", false
}

// parseCount parses a non-negative decimal integer.
func parseCount(s string) (int64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("is not a whole number")
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("is too large")
	}
	return n, nil
}

const day = 24 * time.Hour

// durationUnit returns the length of a unit name (lower case), in ns.
func durationUnit(u string) (int64, bool) {
	switch u {
	case "ns", "nsec", "nsecs":
		return int64(time.Nanosecond), true
	case "us", "µs", "μs", "usec", "usecs": // U+00B5 and U+03BC, as time.ParseDuration
		return int64(time.Microsecond), true
	case "ms", "msec", "msecs":
		return int64(time.Millisecond), true
	case "s", "sec", "secs", "second", "seconds":
		return int64(time.Second), true
	case "m", "min", "mins", "minute", "minutes":
		return int64(time.Minute), true
	case "h", "hr", "hrs", "hour", "hours":
		return int64(time.Hour), true
	case "d", "day", "days":
		return int64(day), true
	}
	return 0, false
}

// maxNumberLength bounds one number in a duration; longer ones are refused
// rather than computed.
const maxNumberLength = 40

// parseDuration parses a sequence of NUMBER UNIT pairs, case-insensitively,
// exactly (fractions are truncated to whole nanoseconds at the end, as
// time.ParseDuration does).
func parseDuration(s string) (time.Duration, error) {
	orig := s
	s = strings.ToLower(s)
	total := new(big.Rat)
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		num := s[i:j]
		k := j
		for k < len(s) && !(s[k] >= '0' && s[k] <= '9' || s[k] == '.') {
			k++
		}
		unit := s[j:k]
		switch {
		case num == "":
			if i == 0 {
				return 0, fmt.Errorf("%q: want a number before the unit, like \"10s\"", orig)
			}
			return 0, fmt.Errorf("%q: unknown unit %q", orig, unit)
		case len(num) > maxNumberLength:
			return 0, fmt.Errorf("%q: number too long", orig)
		case unit == "":
			return 0, fmt.Errorf("%q: missing unit after %q (like s, m, h, d)", orig, num)
		}
		u, ok := durationUnit(unit)
		if !ok {
			return 0, fmt.Errorf("%q: unknown unit %q (want ns, us, ms, s, m, h or d)", orig, unit)
		}
		if num == "." || strings.Count(num, ".") > 1 || strings.HasPrefix(num, ".") || strings.HasSuffix(num, ".") {
			return 0, fmt.Errorf("%q: bad number %q", orig, num)
		}
		v, ok := new(big.Rat).SetString(num)
		if !ok {
			return 0, fmt.Errorf("%q: bad number %q", orig, num)
		}
		total.Add(total, v.Mul(v, new(big.Rat).SetInt64(u)))
		if total.Cmp(maxDurationRat) > 0 {
			return 0, fmt.Errorf("%q: too long a duration (at most %v)", orig, time.Duration(math.MaxInt64))
		}
		i = k
	}
	ns := new(big.Int).Quo(total.Num(), total.Denom()) // truncates; total ≥ 0
	return time.Duration(ns.Int64()), nil
}

var maxDurationRat = new(big.Rat).SetInt64(math.MaxInt64)

// formatDuration renders d compactly and exactly, in the syntax
// parseDuration reads: "1d12h", "1m30s", "1.5s", "500ms", "1us". For
// d ≤ 0 (only in invalid limits) it is time.Duration's String.
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return d.String()
	}
	var b []byte
	if n := d / day; n > 0 {
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, 'd')
		d %= day
	}
	if n := d / time.Hour; n > 0 {
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, 'h')
		d %= time.Hour
	}
	if n := d / time.Minute; n > 0 {
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, 'm')
		d %= time.Minute
	}
	if d > 0 {
		// Below a minute, time.Duration's String is exact: "30s", "1.5s",
		// "500ms", "1.000001s", "2µs" (written "2us" to stay ASCII).
		s := d.String()
		if t, ok := strings.CutSuffix(s, "µs"); ok {
			s = t + "us"
		}
		b = append(b, s...)
	}
	return string(b)
}

// formatPeriod is formatDuration, with a single unit written bare: "s",
// "m", "h", "d".
func formatPeriod(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	case day:
		return "d"
	}
	return formatDuration(d)
}
