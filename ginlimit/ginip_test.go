package ginlimit

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// ginlimit does not use gin's client-IP settings, and says so (issue 29,
// item 5: it ignored Engine.SetTrustedProxies silently, only an example
// comment telling): when gin resolves a request's client through a proxy
// its configuration trusts, or a TrustedPlatform header, the middleware
// logs once. Gin's default, trusting every peer, is not followed and not
// reported; nor is SetTrustedProxies(nil).
func TestGinClientIPSettingsReported(t *testing.T) {
	byHeader := func(r *http.Request) (string, error) { return "k", nil }
	for _, tt := range []struct {
		name   string
		setup  func(*gin.Engine)
		peer   string
		header [2]string
		warns  bool
	}{
		{"trusted proxies", func(e *gin.Engine) { _ = e.SetTrustedProxies([]string{"10.0.0.0/8"}) }, "10.0.0.1:1", [2]string{"X-Forwarded-For", "203.0.113.7"}, true},
		{"X-Real-IP from a trusted proxy", func(e *gin.Engine) { _ = e.SetTrustedProxies([]string{"10.0.0.0/8"}) }, "10.0.0.1:1", [2]string{"X-Real-IP", "203.0.113.7"}, true},
		{"a platform", func(e *gin.Engine) { _ = e.SetTrustedProxies(nil); e.TrustedPlatform = gin.PlatformCloudflare }, "173.245.48.1:1", [2]string{"CF-Connecting-IP", "203.0.113.7"}, true},
		{"a custom platform header", func(e *gin.Engine) { _ = e.SetTrustedProxies(nil); e.TrustedPlatform = "X-Client" }, "10.0.0.1:1", [2]string{"X-Client", "203.0.113.7"}, true},
		{"trusted proxy, untrusted peer", func(e *gin.Engine) { _ = e.SetTrustedProxies([]string{"10.0.0.0/8"}) }, "198.51.100.2:1", [2]string{"X-Forwarded-For", "203.0.113.7"}, false},
		{"gin's default (trusts everyone)", func(e *gin.Engine) {}, "10.0.0.1:1", [2]string{"X-Forwarded-For", "203.0.113.7"}, false},
		{"nothing trusted", func(e *gin.Engine) { _ = e.SetTrustedProxies(nil) }, "10.0.0.1:1", [2]string{"X-Forwarded-For", "203.0.113.7"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			old := slog.Default()
			slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
			ginWarned.Store(false)
			t.Cleanup(func() { slog.SetDefault(old); ginWarned.Store(false) })

			l, err := core.New(memorystore.New(), "gin", byHeader, []store.Limit{store.PerMinute(100)})
			if err != nil {
				t.Fatal(err)
			}
			gin.SetMode(gin.ReleaseMode)
			e := gin.New()
			tt.setup(e)
			e.Use(New(l))
			e.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })
			for range 3 {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = tt.peer
				r.Header.Set(tt.header[0], tt.header[1])
				w := httptest.NewRecorder()
				e.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					t.Fatalf("status %d", w.Code)
				}
			}
			n := strings.Count(buf.String(), "level=WARN")
			if tt.warns && (n != 1 || !strings.Contains(buf.String(), "keyfuncs.WithTrustedProxies") ||
				!strings.Contains(buf.String(), "gin_client_ip=203.0.113.7")) {
				t.Errorf("%d warnings, want one naming the option and the client: %s", n, buf.String())
			}
			if !tt.warns && n != 0 {
				t.Errorf("warned: %s", buf.String())
			}
		})
	}
}
