package main

import (
	"log"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/internal/exampleenv"
)

// newHandler returns the server's routes, their limiters keeping state in
// store.
func newHandler(store core.Store) (http.Handler, error) {
	// api: 10 per second and 1000 per hour per client IP; login: 5 per
	// minute, then 15 minutes locked out. See exampleenv.Limiters.
	api, login, err := exampleenv.Limiters(store)
	if err != nil {
		return nil, err
	}

	e := echo.New()
	group := e.Group("/api", echolimit.New(api)) // every route of the group
	group.GET("/items/:id", func(c echo.Context) error {
		return c.String(http.StatusOK, "item "+c.Param("id")+"\n")
	})
	e.POST("/login", func(c echo.Context) error {
		return c.String(http.StatusOK, "welcome\n")
	}, echolimit.New(login))
	e.GET("/health", func(c echo.Context) error {
		return c.String(http.StatusOK, "ok\n")
	})
	return e, nil
}

func main() {
	// -addr, and -redis: without it the store is core.NewMemoryStore(),
	// with it redisstore.New(redis.NewClient(opt)), opt from
	// redisstore.ParseURL.
	env := exampleenv.Parse()
	handler, err := newHandler(env.Store)
	if err != nil {
		log.Fatal(err)
	}
	env.Serve(handler) // until SIGINT or SIGTERM, then a graceful shutdown
}
