package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/storekey"
)

// Limiter applies limits to HTTP requests: it identifies the client with a
// KeyFunc, charges the request's cost against every limit in a store, and
// turns the store's Result into a Decision that an adapter (nethttp,
// ginlimit, echolimit) carries out. Limiters of one name and limits on one
// store share their state, in one process or several; Limiters of
// different names never do. When the store cannot decide, the failure
// policy applies; a request without a key follows the key-error rule. No
// client sees an error text.
//
// Create Limiters with New. A Limiter is safe for concurrent use; SetLimits
// and SetPlans replace its limits while it serves, the rest is fixed at
// construction. It owns no goroutine: it needs no Close.
type Limiter struct {
	store         store.Store
	key           KeyFunc
	name          string
	keyPrefix     string // storekey.Prefix(name): an injective namespace
	keylessPrefix string // storekey.KeylessPrefix(name): requests without a key

	costOf  func(*http.Request) int64 // nil: 1
	skip    func(*http.Request) bool
	countIf func(status int) bool // nil: every request counts
	policy  FailurePolicy
	keyRule KeyErrorRule
	addrKey KeyFunc // the address key of KeyErrorPerAddress; nil: the peer's
	shadow  bool
	style   HeaderStyle
	clock   func() time.Time // nil: time.Now
	// policyNames names the IETF policies: "" the Limiter's own, else by plan.
	policyNames map[string]string
	refusal     func(*http.Request, Decision) Response // WithRefusal; nil: the defaults
	observers   []func(Event)

	// cfg is the limits in force for requests of no plan, plans those of
	// each plan (planOf: nil without plans). Decide loads one once per
	// request; SetLimits and SetPlans replace them under mu.
	cfg    atomic.Pointer[limiterConfig]
	planOf func(*http.Request) string
	plans  atomic.Pointer[planConfigs]
	mu     sync.Mutex

	keyErrLogged atomic.Bool // the first key error was logged
}

// ErrInvalidOption is wrapped by every error New returns for a bad
// argument or option, but an invalid Limit: that error (from New,
// SetLimits or SetPlans) wraps store.ErrInvalidLimit and says which.
var ErrInvalidOption = errors.New("sluice: invalid limiter option")

var (
	errEmptyKey     = fmt.Errorf("%w: the key function returned an empty key and no error", ErrNoKey)
	errNegativeCost = fmt.Errorf("%w: the cost function returned a negative cost; 1 was charged", store.ErrNegativeCost)
)

// New returns a Limiter named name that charges each request against
// limits, for the client key identifies, in the store s (memorystore.New()
// for one process, redisstore.New for several). The name, 1 to 128
// printable ASCII characters, namespaces the store keys and is reported
// to observers, never to clients; keep it stable across deployments. A
// nil s (or a nil pointer in it), key or limits is an error wrapping
// ErrInvalidOption; every limit is validated. Options set the rest.
func New(s store.Store, name string, key KeyFunc, limits []store.Limit, opts ...Option) (*Limiter, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: the store is nil", ErrInvalidOption)
	case isNil(s):
		return nil, fmt.Errorf("%w: the store is a nil %T", ErrInvalidOption, s)
	case key == nil:
		return nil, fmt.Errorf("%w: key function is nil", ErrInvalidOption)
	}
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	specs, err := specsOf(limits)
	if err != nil {
		return nil, err
	}
	l := &Limiter{store: s, name: name, key: key, style: HeadersLegacy,
		keyPrefix:     storekey.Prefix(name),
		keylessPrefix: storekey.KeylessPrefix(name)}
	o := &options{l: l}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(o); err != nil {
			return nil, err
		}
	}
	l.cfg.Store(l.newConfig("", limits, specs, nil))
	if l.planOf != nil {
		if err := l.SetPlans(o.plans); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// isNil reports whether v holds a typed nil (a nil *memorystore.Store,
// which would fail at every request).
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// specsOf validates limits, as New and SetLimits do.
func specsOf(limits []store.Limit) ([]store.Spec, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: %w: no limits", ErrInvalidOption, store.ErrInvalidLimit)
	}
	specs := make([]store.Spec, len(limits))
	for i, lim := range limits {
		s, err := lim.Spec()
		if err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		specs[i] = s
	}
	return specs, nil
}

// Limits returns a copy of the limits the Limiter enforces, as given to
// New or to the last SetLimits.
func (l *Limiter) Limits() []store.Limit { return append([]store.Limit(nil), l.cfg.Load().limits...) }

func (l *Limiter) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// keyErrorEffects says what each KeyErrorRule does, for the key-error log.
var keyErrorEffects = [...]string{
	KeyErrorPerAddress: "requests without a key are limited per client address",
	KeyErrorDeny:       "requests without a key are refused",
	KeyErrorAllow:      "requests without a key are served unlimited",
}

// logKeyError logs the Limiter's first key error, once, to slog.Default():
// a key function that fails for every request (a route key read outside
// the mux, a header no client sends) is otherwise silent.
func (l *Limiter) logKeyError(ctx context.Context, err error) {
	if l.keyErrLogged.Load() || !l.keyErrLogged.CompareAndSwap(false, true) {
		return
	}
	if errors.Is(err, ErrInvalidOption) {
		slog.Default().LogAttrs(ctx, slog.LevelError, "sluice: the key function cannot work where it is used: "+
			"every request it cannot key is refused with 500 (logged once per Limiter)",
			slog.String("limiter", l.name), slog.String("error", err.Error()))
		return
	}
	slog.Default().LogAttrs(ctx, slog.LevelWarn, "sluice: a request has no key (logged once per Limiter); check the key function",
		slog.String("limiter", l.name),
		slog.String("error", err.Error()),
		slog.String("key_error_rule", [...]string{"per_address", "deny", "allow"}[l.keyRule]),
		slog.String("effect", keyErrorEffects[l.keyRule]))
}
