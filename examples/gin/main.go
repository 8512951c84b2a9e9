package main

import (
	"log"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
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

	// The limiters key clients themselves (keyfuncs.IP reads the peer
	// address), so gin's own client-IP settings play no part.
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
	return router, nil
}

func main() {
	// -addr, and -redis: without it the store is core.NewMemoryStore(),
	// with it redisstore.New(redis.NewClient(opt)), opt from
	// redisstore.ParseURL.
	env := exampleenv.Parse()
	gin.SetMode(gin.ReleaseMode)
	handler, err := newHandler(env.Store)
	if err != nil {
		log.Fatal(err)
	}
	env.Serve(handler) // until SIGINT or SIGTERM, then a graceful shutdown
}
