package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/exampleenv"
	"github.com/sluicehq/sluice/keyfuncs"
)

// newHandler returns the server's routes, their limiters keeping state in
// store.
func newHandler(store core.Store) (http.Handler, error) {
	// The client is the peer address. Behind a load balancer, name it with
	// keyfuncs.WithTrustedProxies, or every client shares its address.
	clientIP, err := keyfuncs.IP()
	if err != nil {
		return nil, err
	}
	// Each route gets its own limiter; the name keeps their counters apart.
	api, err := core.New(store, clientIP,
		[]core.Limit{core.PerSecond(10), core.PerHour(1000)},
		core.WithName("api"))
	if err != nil {
		return nil, err
	}
	login, err := core.New(store, clientIP,
		[]core.Limit{{Rate: 5, Period: time.Minute, Penalty: 15 * time.Minute}},
		core.WithName("login"))
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
