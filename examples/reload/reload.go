package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
)

// maxLimitsFile bounds the size of a limits file.
const maxLimitsFile = 1 << 20

// readLimits reads a limits file: one store.ParseLimit string per line, #
// comments and blank lines ignored. It fails on the first bad line, naming
// it, and on a file without limits.
func readLimits(path string) ([]store.Limit, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > maxLimitsFile {
		return nil, fmt.Errorf("%s: %d bytes, at most %d", path, len(data), maxLimitsFile)
	}
	var limits []store.Limit
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxLimitsFile)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		l, err := store.ParseLimit(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		limits = append(limits, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("%s: no limits (one per line, like \"10/s burst 20\")", path)
	}
	return limits, nil
}

// reloader keeps a Limiter's limits in step with a file. Its methods are
// called from one goroutine (run), or from a test.
type reloader struct {
	path    string
	limiter *core.Limiter
	log     *slog.Logger
	seen    os.FileInfo // the file as last read; nil before the first read
}

// newReloader reads path and returns a reloader for a Limiter created from
// it by newLimiter.
func newReloader(path string, log *slog.Logger, newLimiter func([]store.Limit) (*core.Limiter, error)) (*reloader, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	limits, err := readLimits(path)
	if err != nil {
		return nil, err
	}
	l, err := newLimiter(limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	log.Info("limits loaded", "file", path, "limits", limitStrings(limits))
	return &reloader{path: path, limiter: l, log: log, seen: info}, nil
}

func limitStrings(ls []store.Limit) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.String()
	}
	return out
}

// reload reads the file and swaps its limits in. It reports whether the
// limits changed. On error the limits in force stay, and the error is
// logged and returned.
func (r *reloader) reload(why string) (bool, error) {
	info, statErr := os.Stat(r.path)
	limits, err := readLimits(r.path)
	if err == nil {
		err = statErr
	}
	if err != nil {
		r.log.Error("limits not reloaded; the limits in force stay", "file", r.path, "trigger", why, "err", err)
		return false, err
	}
	r.seen = info
	old := r.limiter.Limits()
	if slices.Equal(old, limits) {
		r.log.Debug("limits unchanged", "file", r.path, "trigger", why)
		return false, nil
	}
	if err := r.limiter.SetLimits(limits); err != nil { // readLimits validated them; kept for safety
		r.log.Error("limits not reloaded; the limits in force stay", "file", r.path, "trigger", why, "err", err)
		return false, err
	}
	r.log.Info("limits changed", "file", r.path, "trigger", why,
		"from", limitStrings(old), "to", limitStrings(limits))
	return true, nil
}

// poll reloads the file when its modification time or size changed, or it
// was replaced, since it was last read. A file that cannot be read is
// reported once per change.
func (r *reloader) poll() (bool, error) {
	info, err := os.Stat(r.path)
	if err != nil {
		if r.seen != nil {
			r.log.Error("limits file unreadable; the limits in force stay", "file", r.path, "err", err)
			r.seen = nil
		}
		return false, err
	}
	if r.seen != nil && info.ModTime().Equal(r.seen.ModTime()) && info.Size() == r.seen.Size() && os.SameFile(info, r.seen) {
		return false, nil
	}
	changed, err := r.reload("file changed")
	if err != nil {
		r.seen = info // report a bad file once, not every poll
	}
	return changed, err
}

// run reloads on every value from signals and polls the file every
// interval, until ctx ends.
func (r *reloader) run(ctx context.Context, interval time.Duration, signals <-chan os.Signal) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-signals:
			_, _ = r.reload(sig.String())
		case <-tick.C:
			_, _ = r.poll()
		}
	}
}
