package pushqueue

import (
	"context"
	"testing"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func TestThrottleFor(t *testing.T) {
	for _, tc := range []struct{ cores, want int }{{0, 20}, {1, 20}, {2, 25}, {16, 95}, {64, 100}} {
		if got := ThrottleFor(tc.cores); got != tc.want {
			t.Errorf("ThrottleFor(%d) = %d, want %d", tc.cores, got, tc.want)
		}
	}
}

// TestSetMaxInFlight: raising the cap hands out more at once (waking a
// blocked Dequeue); lowering it holds work back until enough are done.
func TestSetMaxInFlight(t *testing.T) {
	q := newTestQueue(1)
	for i, c := range []string{"a", "b", "c", "d"} {
		q.Enqueue(c, reqs{i})
	}
	if _, _, ok := q.TryDequeue(); !ok {
		t.Fatal("first TryDequeue got nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	got := make(chan string, 1)
	go func() {
		c, _, err := q.Dequeue(ctx)
		if err != nil {
			t.Errorf("Dequeue() = %v", err)
		}
		got <- c
	}()
	q.SetMaxInFlight(3)
	if c := <-got; c != "b" {
		t.Errorf("woken Dequeue got %q, want b", c)
	}
	if c, _, ok := q.TryDequeue(); !ok || c != "c" {
		t.Errorf("TryDequeue under the raised cap = %q, %v; want c", c, ok)
	}
	q.SetMaxInFlight(1)
	q.MarkDone("a")
	if _, _, ok := q.TryDequeue(); ok {
		t.Error("handed out work above the lowered cap")
	}
	q.MarkDone("b")
	q.MarkDone("c")
	if c, _, ok := q.TryDequeue(); !ok || c != "d" {
		t.Errorf("TryDequeue once under the lowered cap = %q, %v; want d", c, ok)
	}
}
