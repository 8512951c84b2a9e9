// Package deadline is the context of a call to a store with a timeout
// that starts no timer unless something waits for its end: the Redis
// store's queue of pipelined Takes waits for its parent's end alone
// (Early) and wakes a Take whose deadline passes by one timer of its own,
// so that a decision costs neither context.WithTimeout's timer nor its
// allocations.
package deadline

import (
	"context"
	"sync"
	"time"
)

// Context ends at its deadline, when its parent ends, or when cancelled,
// as context.WithTimeout's does; its Err reads the clock until then, and
// its Done starts the timer (and follows the parent) when first called.
type Context struct {
	parent   context.Context
	deadline time.Time

	mu   sync.Mutex
	err  error         // set when it ended
	done chan struct{} // nil until Done is called
	stop func()        // stops the timer and the parent's watch; nil until Done
}

// New returns a Context that ends after d, or at parent's deadline when
// that is earlier. Call Cancel when the call is over.
func New(parent context.Context, d time.Duration) *Context {
	c := &Context{parent: parent, deadline: time.Now().Add(d)}
	if pd, ok := parent.Deadline(); ok && pd.Before(c.deadline) {
		c.deadline = pd
	}
	return c
}

// Deadline is when c ends unless earlier.
func (c *Context) Deadline() (time.Time, bool) { return c.deadline, true }

// Value is its parent's.
func (c *Context) Value(key any) any { return c.parent.Value(key) }

// Err is context.Canceled after Cancel, the parent's error once it
// ended, context.DeadlineExceeded from the deadline on, else nil.
func (c *Context) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err = c.parent.Err(); err == nil && !time.Now().Before(c.deadline) {
		err = context.DeadlineExceeded
	}
	if err != nil {
		c.end(err)
	}
	return err
}

// Done returns a channel closed when c ends.
func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return c.done
	}
	t := time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
	stopParent := func() bool { return false }
	if c.parent.Done() != nil {
		stopParent = context.AfterFunc(c.parent, func() { c.end(c.parent.Err()) })
	}
	c.stop = func() { t.Stop(); stopParent() }
	return c.done
}

// end ends c with err unless it has ended.
func (c *Context) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
}

// Cancel ends c with context.Canceled, unless it has ended, and releases
// its timer.
func (c *Context) Cancel() {
	c.end(context.Canceled)
	c.mu.Lock()
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Early returns a channel closed when ctx ends before its deadline (nil
// when only its deadline can end it): a Context's parent's Done, which
// starts no timer, or any other context's Done. A Context's own Cancel
// does not close it: Cancel it only when nothing waits for it.
func Early(ctx context.Context) <-chan struct{} {
	if c, ok := ctx.(*Context); ok {
		return c.parent.Done()
	}
	return ctx.Done()
}
