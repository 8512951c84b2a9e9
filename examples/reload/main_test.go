package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/exampletest"
)

type fixture struct {
	t    *testing.T
	path string
	logs *exampletest.SyncBuffer
	srv  *httptest.Server
	r    *reloader
	// mtime is the modification time given to the file's next version:
	// set explicitly, so a change is seen whatever the file system's
	// timestamp granularity.
	mtime time.Time
}

func newFixture(t *testing.T, limits string) *fixture {
	t.Helper()
	f := &fixture{t: t, path: filepath.Join(t.TempDir(), "limits.txt"), logs: new(exampletest.SyncBuffer), mtime: time.Now().Add(-time.Hour)}
	f.write(limits)
	logger := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, r, err := newServer(f.path, logger)
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) write(limits string) {
	f.t.Helper()
	if err := os.WriteFile(f.path, []byte(limits), 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.mtime = f.mtime.Add(time.Second)
	if err := os.Chtimes(f.path, f.mtime, f.mtime); err != nil {
		f.t.Fatal(err)
	}
}

// get returns the status and headers of one request.
func (f *fixture) get() (int, http.Header) {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL + "/")
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// waitPolicy makes requests until the RateLimit-Policy header is want, for
// at most 10 seconds, and returns the last response's headers.
func (f *fixture) waitPolicy(want string) http.Header {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, h := f.get()
		if got := h.Get("RateLimit-Policy"); got == want {
			return h
		} else if time.Now().After(deadline) {
			f.t.Fatalf("RateLimit-Policy %q, want %q; logs:\n%s", got, want, f.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLogs waits at most 10 seconds until the logs hold every one of
// want, and returns them: the reloader sets the new limits, which a
// request may see, before it logs the change.
func (f *fixture) waitLogs(want ...string) string {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs := f.logs.String()
		if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(logs, w) }) || time.Now().After(deadline) {
			return logs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A user copies main.go and reload.go: they import nothing internal to
// sluice.
func TestImportsNothingInternal(t *testing.T) { exampletest.CheckImports(t) }

func TestReloadWhenTheFileChanges(t *testing.T) {
	f := newFixture(t, "2/m\n")
	if code, h := f.get(); code != 200 || h.Get("X-RateLimit-Limit") != "2" || h.Get("RateLimit-Policy") != `"api";q=2;w=60` {
		t.Fatalf("first request: %d %v", code, h)
	}
	f.get()
	if code, _ := f.get(); code != http.StatusTooManyRequests {
		t.Fatalf("third request of 2/m: %d", code)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.r.run(ctx, 10*time.Millisecond, nil) }()
	t.Cleanup(func() { cancel(); <-done })

	f.write("# raised\n5/m token_bucket\n\n10/h   # and an hourly cap\n")
	h := f.waitPolicy(`"api-0";q=5;w=60, "api-1";q=10;w=3600`)
	if h.Get("X-RateLimit-Limit") != "5" || h.Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("after the change: %v", h)
	}
	logs := f.waitLogs(`msg="limits changed"`, `trigger="file changed"`, `from=[2/m] to="[5/m token_bucket 10/h]"`)
	if !strings.Contains(logs, `msg="limits changed"`) || !strings.Contains(logs, `trigger="file changed"`) ||
		!strings.Contains(logs, `from=[2/m] to="[5/m token_bucket 10/h]"`) {
		t.Fatalf("the change is not logged as such:\n%s", logs)
	}
}

func TestReloadKeepsStateOfUnchangedLimits(t *testing.T) {
	f := newFixture(t, "3/m\n")
	for i := 0; i < 3; i++ {
		f.get()
	}
	f.write("3/m gcra burst 3 # the same limit, written out\n1000/h\n")
	if changed, err := f.r.poll(); !changed || err != nil {
		t.Fatalf("poll: %v %v", changed, err)
	}
	if code, h := f.get(); code != http.StatusTooManyRequests || h.Get("RateLimit-Policy") != `"api-0";q=3;w=60, "api-1";q=1000;w=3600` {
		t.Fatalf("3/m after the reload: %d %v, want still used up", code, h)
	}
	// Nothing changed since: polling does not read the file again.
	if changed, err := f.r.poll(); changed || err != nil {
		t.Fatalf("second poll: %v %v", changed, err)
	}
}

func TestReloadKeepsLimitsOnBadFile(t *testing.T) {
	f := newFixture(t, "2/m\n")
	f.write("2/m\n10/x\n")
	if changed, err := f.r.poll(); changed || err == nil || !strings.Contains(err.Error(), "limits.txt:2: sluice: limit \"10/x\": unknown period unit \"x\"") {
		t.Fatalf("poll of a bad file: %v %v", changed, err)
	}
	if changed, err := f.r.poll(); changed || err != nil {
		t.Fatalf("second poll of the same bad file: %v %v, want it reported once", changed, err)
	}
	f.write("# nothing\n\n")
	if _, err := f.r.reload("test"); err == nil || !strings.Contains(err.Error(), "no limits") {
		t.Fatalf("reload of an empty file: %v", err)
	}
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.poll(); !os.IsNotExist(err) {
		t.Fatalf("poll of a removed file: %v", err)
	}
	if code, h := f.get(); code != 200 || h.Get("RateLimit-Policy") != `"api";q=2;w=60` {
		t.Fatalf("after bad files: %d %v, want 2/m in force", code, h)
	}
	if logs := f.logs.String(); strings.Count(logs, "level=ERROR") != 3 || strings.Contains(logs, "limits changed") {
		t.Fatalf("logs:\n%s", logs)
	}
	// The file comes back: it is read again.
	f.write("4/m\n")
	if changed, err := f.r.poll(); !changed || err != nil {
		t.Fatalf("poll after the file came back: %v %v", changed, err)
	}
}

func TestReadLimits(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file, want, err string
	}{
		{"10/s burst 20\n\t# comment\n1000/h sliding_log\r\n", "[10/s burst 20 1000/h sliding_log]", ""},
		{"#only comments\n", "", "no limits"},
		{"", "", "no limits"},
		{"1/s\n1/s leaky_bucket burst 3 penalty\n", "", ":2: sluice: limit \"1/s leaky_bucket burst 3 penalty\": penalty needs a duration"},
		{"1/s fixed_window burst 2\n", "", ":1: sluice: limit \"1/s fixed_window burst 2\": fixed_window takes no burst"},
	} {
		path := filepath.Join(dir, "l")
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		ls, err := readLimits(path)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.file, err)
		} else if got := strings.Join(limitStrings(ls), " "); "["+got+"]" != tc.want {
			t.Errorf("%q: %s, want %s", tc.file, got, tc.want)
		}
	}
	if _, err := readLimits(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := serve(ctx, "127.0.0.1:0", http.NotFoundHandler()); err != nil {
		t.Errorf("serve after its context ended: %v, want nil (a graceful shutdown)", err)
	}
	if err := serve(context.Background(), "127.0.0.1:-1", http.NotFoundHandler()); err == nil {
		t.Error("serve on a bad address returned nil, want the server's error")
	}
}
