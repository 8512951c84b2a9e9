package main

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/internal/exampleenv"
)

// routes returns the server's routes, limited by api (10 per second and
// 1000 per hour per client IP) and login (5 per minute, then 15 minutes
// locked out); see exampleenv.Limiters.
func routes(api, login *core.Limiter) http.Handler {
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
	return e
}

func main() {
	// -addr, and -redis: without it the store is memorystore.New(),
	// with it redisstore.New(redis.NewClient(opt)), opt from
	// redisstore.ParseURL. Serves until SIGINT or SIGTERM, then shuts
	// down gracefully.
	exampleenv.Run(routes)
}
