package core

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// Action says what an adapter does with a request.
type Action uint8

const (
	// Serve: call the next handler now.
	Serve Action = iota
	// Hold: wait Decision.Delay (Decision.Wait), then serve. If the wait
	// is cut short by the request's context, write Decision.Response
	// instead.
	Hold
	// Refuse: do not call the next handler; write Decision.Response
	// (Decision.WriteResponse).
	Refuse
)

var actionNames = [...]string{Serve: "serve", Hold: "hold", Refuse: "refuse"}

func (a Action) String() string { return enumString(actionNames[:], "action", uint8(a)) }

// Outcome is why a Decision was made. Its strings are stable metric labels.
type Outcome uint8

const (
	// OutcomeAllowed: the store admitted the request (in shadow mode, also
	// one it admitted with a delay, which shadow mode does not apply).
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: the store denied the request; it is refused (429).
	OutcomeDenied
	// OutcomeDelayed: the store admitted the request after a delay
	// (LeakyBucket); it is held.
	OutcomeDelayed
	// OutcomeShadowDenied: the store denied the request, and it is served
	// because the Limiter is in shadow mode.
	OutcomeShadowDenied
	// OutcomeFailedOpen: the store could not decide and the request is
	// served without limits: FailOpen, or FailLocal on a store that cannot
	// decide locally.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the store could not decide and the request is
	// refused with 503 (FailClosed).
	OutcomeFailedClosed
	// OutcomeFallback: the store's backend failed and its local fallback
	// decided (FailLocal; Result.Fallback says why). Result and Action say
	// what it decided.
	OutcomeFallback
	// OutcomeSkipped: the skip function exempted the request; no store was
	// called and no headers are set.
	OutcomeSkipped
	// OutcomeKeyError: the key function failed and the key-error rule is
	// KeyErrorDeny (the request is refused, 403) or KeyErrorAllow (it is
	// served unlimited). Under KeyErrorPerAddress the outcome is that of
	// the client address's bucket, and Event.KeyErr reports the failure.
	OutcomeKeyError
	// OutcomeCanceled: the request's context ended (the client went away,
	// a server deadline passed) before the store decided. Whatever the
	// failure policy it is refused (503), lest a client that drops its
	// connections run the handler unlimited; in shadow mode it is served.
	OutcomeCanceled
	// OutcomeGiveBackFailed is not a decision: it reports, after the
	// handler, that the charge of a request WithCountIf does not count
	// could not be given back (the client stays charged), or that a
	// MaxInFlight slot could not be released (it stays taken until its
	// hold ends); Event.Err says why. The response is not affected.
	OutcomeGiveBackFailed
)

var outcomeNames = [...]string{
	OutcomeAllowed:        "allowed",
	OutcomeDenied:         "denied",
	OutcomeDelayed:        "delayed",
	OutcomeShadowDenied:   "shadow_denied",
	OutcomeFailedOpen:     "failed_open",
	OutcomeFailedClosed:   "failed_closed",
	OutcomeFallback:       "fallback",
	OutcomeSkipped:        "skipped",
	OutcomeKeyError:       "key_error",
	OutcomeCanceled:       "canceled",
	OutcomeGiveBackFailed: "give_back_failed",
}

func (o Outcome) String() string { return enumString(outcomeNames[:], "outcome", uint8(o)) }

// enumString is the String of core's enumerations: names[v], or "typ(v)"
// for a value without a name.
func enumString(names []string, typ string, v uint8) string {
	if int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

// Response is a complete HTTP response that an adapter writes instead of
// calling the next handler: 429 with {"error":"rate limit exceeded"} for a
// request over a limit, 503 with {"error":"service unavailable"} under
// FailClosed or for a Hold cut short, 403 with {"error":"forbidden"} under
// KeyErrorDeny, 500 with {"error":"internal server error"} when the key
// function cannot work where it is used (see KeyFunc); WithRefusal sets
// others. An empty ContentType sets no Content-Type header. Body is shared
// between requests: do not modify it.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

var (
	denyResponse          = jsonError(http.StatusTooManyRequests, "rate limit exceeded")
	unavailableResponse   = jsonError(http.StatusServiceUnavailable, "service unavailable")
	keyDeniedResponse     = jsonError(http.StatusForbidden, "forbidden")
	misconfiguredResponse = jsonError(http.StatusInternalServerError, "internal server error")
)

// jsonError is the default Response of status: {"error":msg} as JSON.
func jsonError(status int, msg string) Response {
	body := `{"error":"` + msg + `"}` + "\n"
	return Response{Status: status, ContentType: "application/json", Body: []byte(body)}
}

// Decision is what the Limiter decided for one request, a small value it
// does not retain. An adapter calls Stack first (the headers), then acts
// on Action and, when NeedsDone reports true, calls Done with the status
// once the handler has finished.
type Decision struct {
	// Action is what the adapter does with the request.
	Action Action
	// Outcome is why.
	Outcome Outcome
	// nowNsec and nowSec are when the decision was made, by the Limiter's
	// clock (Unix time): with the small fields, Stack's record stays in
	// a smaller size class than with a time.Time.
	nowNsec int32
	// Delay is how long to hold the request when Action is Hold.
	Delay time.Duration
	// Result is the store's result; the zero Result (Limit 0) when no
	// store decided: skipped requests, key errors under KeyErrorDeny or
	// KeyErrorAllow, a store that failed.
	Result store.Result

	l      *limiterConfig // the limits it was made with (nil: zero Decision)
	nowSec int64
	resp   *Response // what to write for Refuse, or for a Hold cut short
	after  *doneStep // what Done does (nil: nothing)
}

// Response returns what to write when Action is Refuse, or when a Hold is
// cut short (see Response); the zero Response for Serve.
func (d Decision) Response() Response {
	if d.resp == nil {
		return Response{}
	}
	return *d.resp
}

// WriteResponse writes Response to w: its Content-Type, status and body.
// Write errors are ignored: they mean the client has gone.
func (d Decision) WriteResponse(w http.ResponseWriter) {
	resp := d.resp
	if resp == nil {
		return
	}
	if resp.ContentType != "" {
		w.Header()["Content-Type"] = []string{resp.ContentType}
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// Wait holds the caller for Delay when Action is Hold, and returns nil
// once the request may be served, or ctx.Err() if ctx ends first (the
// adapter then writes Response, 503, instead of serving). For any other
// Action it returns nil at once.
func (d Decision) Wait(ctx context.Context) error {
	if d.Action != Hold || d.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Event describes one decision, for logs and metrics. Observers receive it
// synchronously, before Decide returns.
type Event struct {
	Limiter string // the Limiter's name
	Plan    string // the plan whose limits decided ("": the Limiter's own; see WithPlans)
	// Limit is the limit that bound the decision (Result.Binding, as given
	// to New, SetLimits or SetPlans), when a store decided; the zero Limit
	// otherwise.
	Limit   store.Limit
	Outcome Outcome       // why
	Action  Action        // what the adapter does
	Request *http.Request // the request decided on
	// Key is what the key function returned ("" when it failed). It may
	// identify a person (an address, a user id): log it with care.
	Key    string
	Cost   int64        // the cost charged (or that would have been)
	Result store.Result // as in Decision.Result
	// Latency is the time spent in the store's Take (Charge under
	// WithCountIf), its fallback included; 0 when no store was called.
	Latency time.Duration
	// Err is what went wrong with the store: its error (wrapping
	// context.DeadlineExceeded when its deadline passed, store.ErrBreakerOpen
	// when it did not try), or the cause its fallback decided for
	// (Result.Fallback); or a negative cost from the cost function.
	Err error
	// KeyErr is the key function's error, when it failed.
	KeyErr error
	// Shadow reports that the Limiter is in shadow mode: Action is then
	// always Serve, whatever Outcome says.
	Shadow bool
	// NearLimit is, for a request the store admitted, the limit it left
	// with less than a fifth of its capacity (more than 80% used, Envoy's
	// near_limit), the one with the least share left when several are; the
	// zero Limit otherwise. promlimit and otellimit count it, for alerts
	// before clients get refusals.
	NearLimit store.Limit
}

// nearLimit returns the limit of limits that res, an admitted decision,
// left with less than a fifth of its capacity, the least share left first;
// the zero Limit when none.
func nearLimit(limits []store.Limit, res *store.Result) store.Limit {
	near := func(r *store.Result) bool { return r.Limit > 0 && max(r.Remaining, 0)*5 < r.Limit }
	if len(res.PerLimit) != len(limits) {
		if b := res.Binding; near(res) && b >= 0 && b < len(limits) {
			return limits[b]
		}
		return store.Limit{}
	}
	best, share := -1, 2.0
	for i := range res.PerLimit {
		r := &res.PerLimit[i]
		if s := float64(max(r.Remaining, 0)) / float64(r.Limit); near(r) && s < share {
			best, share = i, s
		}
	}
	if best < 0 {
		return store.Limit{}
	}
	return limits[best]
}
