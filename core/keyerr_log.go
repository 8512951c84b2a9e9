package core

import (
	"log/slog"
	"net/http"
)

// keyErrorEffects says what each KeyErrorRule does, for the key-error log.
var keyErrorEffects = [...]string{
	KeyErrorPerAddress: "requests without a key are limited per client address",
	KeyErrorDeny:       "requests without a key are refused",
	KeyErrorAllow:      "requests without a key are served unlimited",
}

// logKeyError logs the Limiter's first key error, once, to slog.Default():
// a key function that fails for every request (a route key read outside
// the mux, a header no client sends) is otherwise silent. LogDenials and
// observers see every one.
func (l *Limiter) logKeyError(r *http.Request, err error) {
	if l.keyErrLogged.Load() || !l.keyErrLogged.CompareAndSwap(false, true) {
		return
	}
	slog.Default().LogAttrs(r.Context(), slog.LevelWarn, "sluice: a request has no key (logged once per Limiter); check the key function",
		slog.String("limiter", l.name),
		slog.String("error", err.Error()),
		slog.String("key_error_rule", l.keyRule.String()),
		slog.String("effect", keyErrorEffects[l.keyRule]))
}
