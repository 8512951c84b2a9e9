// Package sloglimit logs a Limiter's decisions with log/slog: New returns
// an observer for core.WithObserver that writes the decisions an operator
// wants to see (denials, store failures, key errors) at chosen levels,
// folding floods into one record per interval.
//
//	limiter, err := core.New(st, "api", key, limits,
//		core.WithObserver(sloglimit.New(slog.Default())))
package sloglimit
