package main

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/exampleenv"
)

// routes returns the server's routes, limited by api (10 per second and
// 1000 per hour per client IP) and login (5 per minute, then 15 minutes
// locked out); see exampleenv.Limiters.
//
// The limiters key clients themselves (keyfuncs.IP reads the peer
// address), so gin's own client-IP settings play no part.
func routes(api, login *core.Limiter) http.Handler {
	router := gin.New()
	router.Use(gin.Recovery())
	group := router.Group("/api", ginlimit.New(api)) // every route of the group
	group.GET("/items/:id", func(c *gin.Context) {
		c.String(http.StatusOK, "item %s\n", c.Param("id"))
	})
	router.POST("/login", ginlimit.New(login), func(c *gin.Context) {
		c.String(http.StatusOK, "welcome\n")
	})
	router.GET("/health", func(c *gin.Context) {
		c.String(http.StatusOK, "ok\n")
	})
	return router
}

func main() {
	gin.SetMode(gin.ReleaseMode)
	// -addr, and -redis: without it the store is memorystore.New(),
	// with it redisstore.New(redis.NewClient(opt)), opt from
	// redisstore.ParseURL. Serves until SIGINT or SIGTERM, then shuts
	// down gracefully.
	exampleenv.Run(routes)
}
