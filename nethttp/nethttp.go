package nethttp

import (
	"net/http"

	"github.com/sluicehq/sluice/core"
)

// Middleware returns middleware that limits the requests of the handler it
// wraps with l. It panics if l is nil: that is a programming error, and
// serving unlimited instead would hide it.
//
// The returned middleware and the handlers it makes are safe for
// concurrent use; per request, it allocates nothing beyond what l.Decide
// and core.Decision.Stack (the headers, and the request's record of its
// binding Decision for core.FromContext) need.
func Middleware(l *core.Limiter) func(http.Handler) http.Handler {
	if l == nil {
		panic("nethttp.Middleware: the *core.Limiter is nil")
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("nethttp.Middleware: the next http.Handler is nil")
		}
		return &handler{l: l, next: next}
	}
}

type handler struct {
	l    *core.Limiter
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := h.l.Decide(r)
	r = d.Stack(r, w.Header())
	switch d.Action {
	case core.Serve:
		h.serve(w, r, &d)
		return
	case core.Hold:
		if d.Wait(r.Context()) == nil {
			h.serve(w, r, &d)
			return
		}
		d.Done(http.StatusServiceUnavailable) // not served: see Decision.Done
	}
	d.WriteResponse(w)
}

// serve calls the next handler and, when d needs it, tells d the status
// the handler wrote (see core.Decision.Done): 200 when it wrote none, 500
// when it panicked (the panic goes on).
func (h *handler) serve(w http.ResponseWriter, r *http.Request, d *core.Decision) {
	if !d.NeedsDone() {
		h.next.ServeHTTP(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	finished := false
	defer func() {
		if !finished {
			d.Done(http.StatusInternalServerError)
		}
	}()
	h.next.ServeHTTP(sw, r)
	finished = true
	d.Done(sw.status())
}

// statusWriter remembers the status a handler writes. Unwrap gives
// http.ResponseController the ResponseWriter it wraps, so that flushing,
// hijacking and deadlines keep working.
type statusWriter struct {
	http.ResponseWriter
	code int // 0: none written yet
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the wrapped ResponseWriter, if it can (a response flushed
// before any status is a 200).
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the status written, 200 when none was.
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
