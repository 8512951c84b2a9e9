package core_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// A Limiter is usually applied by an adapter (nethttp, ginlimit,
// echolimit). This is all an adapter does with it.
func ExampleLimiter_Decide() {
	byClient := func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-Client"); k != "" {
			return k, nil
		}
		return "", core.ErrNoKey
	}
	limiter, err := core.New(memorystore.New(),

		"api", byClient,
		[]store.Limit{store.PerSecond(10), store.PerHour(2)},
		core.WithPolicyNames(map[string]string{"": "api"}), core.WithHeaders(core.HeadersIETF))
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

	serve := func(w http.ResponseWriter, r *http.Request) {
		d := limiter.Decide(r)
		r = d.Stack(r, w.Header()) // before the handler, on every response
		switch d.Action {
		case core.Serve:
			handler.ServeHTTP(w, r)
			return
		case core.Hold:
			if d.Wait(r.Context()) == nil {
				handler.ServeHTTP(w, r)
				return
			}
		}
		d.WriteResponse(w)
	}

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "alice")
		w := httptest.NewRecorder()
		serve(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "api-0";r=9;t=1, "api-1";r=1;t=1800
	// 200 "api-0";r=8;t=1, "api-1";r=0;t=1800
	// 429 "api-0";r=8;t=1, "api-1";r=0;t=1800
}
