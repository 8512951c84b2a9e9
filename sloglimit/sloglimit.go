package sloglimit

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
)

// LevelOff, given to WithLevel, stops an outcome from being logged.
const LevelOff = slog.Level(math.MaxInt)

// defaultRepeatInterval is how often, at most, a record of store failures
// or of key errors is written for one Limiter, or of denials for one
// client key of a Limiter, unless WithRepeatInterval says otherwise.
const defaultRepeatInterval = 10 * time.Second

// maxField is the most bytes of a client-controlled field (method, path,
// key, and the error texts, which may quote client input) written: a
// longer value is cut at a character boundary and marked "…(truncated)".
const maxField = 256

// An Option configures New.
type Option interface{ apply(*logConfig) }

// optionFunc adapts a function to Option.
type optionFunc func(*logConfig)

func (f optionFunc) apply(c *logConfig) { f(c) }

type logConfig struct {
	levels  [numOutcomes]slog.Level
	key     bool
	redact  func(string) string
	repeats repeats
}

const numOutcomes = int(core.OutcomeGiveBackFailed) + 1

// defaultLogLevels are the levels by outcome.
var defaultLogLevels = [numOutcomes]slog.Level{
	core.OutcomeAllowed:      LevelOff,
	core.OutcomeDenied:       slog.LevelInfo,
	core.OutcomeDelayed:      slog.LevelDebug,
	core.OutcomeShadowDenied: slog.LevelInfo,
	core.OutcomeFailedOpen:   slog.LevelWarn,
	core.OutcomeFailedClosed: slog.LevelError,
	core.OutcomeFallback:     slog.LevelWarn,
	core.OutcomeSkipped:      LevelOff,
	core.OutcomeKeyError:     slog.LevelWarn,
	core.OutcomeCanceled:     slog.LevelDebug,

	core.OutcomeGiveBackFailed: slog.LevelWarn,
}

var logMessages = [numOutcomes]string{
	core.OutcomeAllowed:      "sluice: request allowed",
	core.OutcomeDenied:       "sluice: rate limit exceeded",
	core.OutcomeDelayed:      "sluice: request delayed by rate limit",
	core.OutcomeShadowDenied: "sluice: rate limit exceeded (shadow mode)",
	core.OutcomeFailedOpen:   "sluice: store unavailable, failing open",
	core.OutcomeFailedClosed: "sluice: store unavailable, failing closed",
	core.OutcomeFallback:     "sluice: store unavailable, local store decided",
	core.OutcomeSkipped:      "sluice: request skipped",
	core.OutcomeKeyError:     "sluice: key function failed",
	core.OutcomeCanceled:     "sluice: request canceled before a decision",

	core.OutcomeGiveBackFailed: "sluice: store unavailable, a charge was not given back",
}

// WithLevel sets the level decisions with outcome o are logged at;
// LevelOff stops logging them. It also turns on outcomes that are off by
// default (core.OutcomeAllowed, core.OutcomeSkipped).
func WithLevel(o core.Outcome, level slog.Level) Option {
	return optionFunc(func(c *logConfig) {
		if int(o) < numOutcomes {
			c.levels[o] = level
		}
	})
}

// WithKey logs the client key (core.Event.Key) as the "key"
// attribute, passed through redact first unless redact is nil. Keys often
// identify people (a client address, a user id): log them raw only where
// that is allowed, or give a redact function that truncates an address or
// hashes the key (with a secret: a plain hash of an IPv4 address is
// reversed by trying all 2^32).
func WithKey(redact func(key string) string) Option {
	return optionFunc(func(c *logConfig) {
		c.key = true
		c.redact = redact
	})
}

// WithRepeatInterval sets how often, at most, a record is written of
// each kind that comes in floods, per Limiter: store failures (failed_open,
// failed_closed, fallback), key errors (core.Event.KeyErr set), and denials
// (denied, shadow_denied) of one client key. d ≤ 0 writes every record; the
// default is 10 s.
//
// The first record of a kind is written at once, the others within the
// interval are counted, and the next one written has the attribute
// suppressed, the number left out. When an interval passes with none
// written, the next decision observed (of any Limiter, logged or not)
// writes "sluice: similar records suppressed", with limiter, kind
// ("store_error", "key_error" or "denied"), key (denials, under WithKey) and
// suppressed, at the highest level left out. Denials are told apart for up
// to 1024 client keys at a time; further keys are counted together per
// Limiter (other_keys=true) until keys have been quiet for an interval. So
// a flood from one client writes one record per interval, and many clients
// one each: lower the level with WithLevel, or use a sampling slog.Handler
// or metrics (promlimit), where that is too many.
func WithRepeatInterval(d time.Duration) Option {
	return optionFunc(func(c *logConfig) { c.repeats.every = d })
}

// withClock sets the clock the repeat interval is measured with (default
// and nil: time.Now); the tests' fake clock.
func withClock(now func() time.Time) Option {
	return optionFunc(func(c *logConfig) { c.repeats.now = now })
}

// New returns an observer, for core.WithObserver, that logs the decisions
// an operator wants to see with logger (slog.Default(), looked up at each
// record, when logger is nil). By outcome, at these levels unless
// WithLevel says otherwise:
//
//	denied, shadow_denied                               Info
//	delayed, canceled                                   Debug
//	failed_open, fallback, key_error, give_back_failed  Warn
//	failed_closed                                       Error
//	allowed, skipped                                    not logged
//
// A decision made while the circuit breaker is open (core.Event.Err wraps
// store.ErrBreakerOpen) is logged one level lower, as the failures that opened it
// were logged in full; one with a key error under KeyErrorPerAddress at
// least at key_error's level, and one with a negative cost at least at Warn.
//
// Each record has the attributes limiter, outcome, action, method, path
// (without the query) and cost; when a store decided, limit, remaining, and
// retry_after ("never" for a cost the limit never admits) or delay; err and
// key_error when set; key only under WithKey. Texts the client controls are
// cut to 256 bytes. Floods are folded (see WithRepeatInterval). The
// observer is safe for concurrent use; when the logger is not enabled for
// a record's level it costs one atomic load (and a clock reading while
// left-out records wait to be counted).
func New(logger *slog.Logger, opts ...Option) func(core.Event) {
	cfg := &logConfig{levels: defaultLogLevels, repeats: repeats{every: defaultRepeatInterval}}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(cfg)
		}
	}
	return func(ev core.Event) { cfg.log(logger, ev) }
}

func (c *logConfig) log(logger *slog.Logger, ev core.Event) {
	if logger == nil {
		logger = slog.Default()
	}
	ctx := context.Background()
	if ev.Request != nil {
		ctx = ev.Request.Context()
	}
	level, msg := c.levelOf(ev)
	write, suppressed := level != LevelOff && logger.Enabled(ctx, level), int64(0)
	if kind := repeatKindOf(ev); write && kind != repeatNone {
		key := ""
		if kind == repeatDenied {
			key = clip(ev.Key)
		}
		write, suppressed = c.repeats.admit(ev.Limiter, kind, key, level)
	}
	if c.repeats.pending.Load() > 0 {
		c.summarize(logger)
	}
	if write {
		logger.LogAttrs(ctx, level, msg, c.attrs(ev, suppressed)...)
	}
}

// levelOf returns the level and message of ev's record.
func (c *logConfig) levelOf(ev core.Event) (slog.Level, string) {
	level, msg := slog.LevelInfo, "sluice: decision" // an outcome this file does not know yet
	if int(ev.Outcome) < numOutcomes {
		level, msg = c.levels[ev.Outcome], logMessages[ev.Outcome]
	}
	if level != LevelOff && errors.Is(ev.Err, store.ErrBreakerOpen) {
		level -= 4
	}
	if ev.KeyErr != nil && ev.Outcome != core.OutcomeKeyError { // KeyErrorPerAddress
		level = atLeast(level, c.levels[core.OutcomeKeyError])
	}
	if ev.Err != nil && errors.Is(ev.Err, store.ErrNegativeCost) {
		level = atLeast(level, slog.LevelWarn)
	}
	return level, msg
}

// attrs returns the attributes of ev's record; suppressed > 0 is the
// number of similar records left out before it.
func (c *logConfig) attrs(ev core.Event, suppressed int64) []slog.Attr {
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("limiter", ev.Limiter),
		slog.String("outcome", ev.Outcome.String()),
		slog.String("action", ev.Action.String()),
	)
	if r := ev.Request; r != nil {
		attrs = append(attrs, slog.String("method", clip(r.Method)))
		if r.URL != nil {
			attrs = append(attrs, slog.String("path", clip(r.URL.Path)))
		}
	}
	if c.key && ev.Key != "" {
		attrs = append(attrs, slog.String("key", c.keyText(ev.Key)))
	}
	attrs = append(attrs, slog.Int64("cost", ev.Cost))
	if res := ev.Result; res.Limit > 0 {
		attrs = append(attrs, slog.Int64("limit", res.Limit), slog.Int64("remaining", res.Remaining))
		switch {
		case !res.Allowed && res.RetryAfter == store.InfDuration:
			attrs = append(attrs, slog.String("retry_after", "never"))
		case !res.Allowed:
			attrs = append(attrs, slog.Duration("retry_after", res.RetryAfter))
		case res.Delay > 0:
			attrs = append(attrs, slog.Duration("delay", res.Delay))
		}
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("err", clip(ev.Err.Error())))
	}
	if ev.KeyErr != nil {
		attrs = append(attrs, slog.String("key_error", clip(ev.KeyErr.Error())))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	return attrs
}

// summarize writes a record for each kind whose left-out records are due
// to be counted.
func (c *logConfig) summarize(logger *slog.Logger) {
	for _, s := range c.repeats.due() {
		if !logger.Enabled(context.Background(), s.level) {
			continue
		}
		attrs := []slog.Attr{slog.String("limiter", s.limiter), slog.String("kind", s.kind.String())}
		if s.others {
			attrs = append(attrs, slog.Bool("other_keys", true))
		} else if c.key && s.key != "" {
			attrs = append(attrs, slog.String("key", c.keyText(s.key)))
		}
		attrs = append(attrs, slog.Int64("suppressed", s.n))
		logger.LogAttrs(context.Background(), s.level, "sluice: similar records suppressed", attrs...)
	}
}

// keyText is a client key as WithKey logs it: redacted, then cut.
func (c *logConfig) keyText(k string) string {
	if c.redact != nil {
		k = c.redact(k)
	}
	return clip(k)
}

// clip returns s cut to maxField bytes at a character boundary, marked
// "…(truncated)" when cut.
func clip(s string) string {
	if len(s) <= maxField {
		return s
	}
	cut := maxField
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(truncated)"
}

// atLeast returns level raised to floor; LevelOff counts as below every
// level here.
func atLeast(level, floor slog.Level) slog.Level {
	if floor != LevelOff && (level == LevelOff || level < floor) {
		return floor
	}
	return level
}
