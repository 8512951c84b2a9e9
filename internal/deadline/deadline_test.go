package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Context ends at its deadline: Err says so from then on, whether or
// not Done was called, and Done closes then.
func TestDeadline(t *testing.T) {
	c := New(context.Background(), 20*time.Millisecond)
	defer c.Cancel()
	if d, ok := c.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
		t.Fatalf("Deadline %v %v, want within 20ms", d, ok)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	if Early(c) != nil {
		t.Fatal("Early of a Context of Background: want nil (only its deadline ends it)")
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5s after a 20ms deadline")
	}
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err after the deadline: %v", err)
	}

	c = New(context.Background(), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if err := c.Err(); err != context.DeadlineExceeded { // no Done, no timer
		t.Fatalf("Err after the deadline, Done never called: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of an ended Context is open")
	}
	c.Cancel()
	if err := c.Err(); err != context.DeadlineExceeded {
		t.Fatalf("Err after Cancel of an ended Context: %v, want its deadline's", err)
	}
}

// A Context ends with its parent, and takes the earlier deadline.
func TestParent(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	c := New(parent, time.Hour)
	defer c.Cancel()
	early, done := Early(c), c.Done()
	cancel()
	for _, ch := range []<-chan struct{}{early, done} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("not closed 5s after the parent's cancel")
		}
	}
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err: %v, want the parent's", err)
	}

	short, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	c = New(short, time.Hour)
	if d, _ := c.Deadline(); time.Until(d) > time.Minute {
		t.Fatalf("deadline in %v, want the parent's (a minute)", time.Until(d))
	}
	type key struct{}
	if v := New(context.WithValue(context.Background(), key{}, 7), time.Hour).Value(key{}); v != 7 {
		t.Fatalf("Value: %v, want the parent's", v)
	}
}

// Cancel ends a Context with context.Canceled and closes its Done; a
// child context of it ends with it.
func TestCancel(t *testing.T) {
	c := New(context.Background(), time.Hour)
	child, stop := context.WithCancel(c)
	defer stop()
	done := c.Done()
	c.Cancel()
	select {
	case <-done:
	default:
		t.Fatal("Done open after Cancel")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after Cancel: %v", err)
	}
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a child not ended 5s after its parent's Cancel")
	}
	c = New(context.Background(), time.Hour)
	c.Cancel() // without Done
	if err := c.Err(); err != context.Canceled {
		t.Fatalf("Err after Cancel: %v", err)
	}
}

// New, Err and Cancel without Done allocate the Context alone and start no
// timer.
func TestNoTimer(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		c := New(context.Background(), time.Second)
		_ = c.Err()
		c.Cancel()
	})
	if allocs != 1 {
		t.Fatalf("%v allocations, want 1", allocs)
	}
}
