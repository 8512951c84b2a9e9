package echolimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
)

// With WithCountIf, the middleware reads the status of the response, or of
// the error the handler returns (an *echo.HTTPError's code, else 500), and
// a panic counts as a 500 (the panic goes on).
func TestCountIfStatus(t *testing.T) {
	for _, tc := range []struct {
		do      string
		counted bool
	}{
		{"nothing", false}, {"ok", false}, {"404", true}, {"error", true}, {"panic", true},
	} {
		l := newLimiter(t, byHeader, []store.Limit{{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute}},
			core.WithCountIf(func(s int) bool { return s >= 400 }))
		e := echo.New()
		e.GET("/", func(c echo.Context) error {
			switch c.Request().Header.Get("X-Do") {
			case "ok":
				return c.NoContent(http.StatusOK)
			case "404":
				return echo.NewHTTPError(http.StatusNotFound)
			case "error":
				return errors.New("handler failed")
			case "panic":
				panic("handler failed")
			}
			return nil
		}, echolimit.New(l))
		serve := func(do string) (code int, panicked bool) {
			defer func() { panicked = recover() != nil }()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("X-Client", "a")
			req.Header.Set("X-Do", do)
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			return w.Code, false
		}
		if _, panicked := serve(tc.do); panicked != (tc.do == "panic") {
			t.Errorf("%s: panicked %v", tc.do, panicked)
		}
		code, _ := serve("ok")
		if want := map[bool]int{false: 200, true: 429}[tc.counted]; code != want {
			t.Errorf("after %q: status %d, want %d (counted: %v)", tc.do, code, want, tc.counted)
		}
	}
}
