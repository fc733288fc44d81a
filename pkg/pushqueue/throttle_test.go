package pushqueue

import (
	"context"
	"math"
	"testing"
	"time"

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

func TestThrottleForRate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cores  int
		rate   float64
		window time.Duration
		want   int
	}{
		{name: "not measured: Istio's default", cores: 2, want: 25},
		{name: "slow frontend: never below Istio's default", cores: 2, rate: 100, window: 100 * time.Millisecond, want: 25},
		{name: "a tenth of a second of work", cores: 2, rate: 8000, window: 100 * time.Millisecond, want: 800},
		{name: "rounded up", cores: 2, rate: 2501, window: 100 * time.Millisecond, want: 251},
		{name: "capped", cores: 64, rate: 1e9, window: time.Second, want: MaxAdaptiveThrottle},
		{name: "no window: Istio's default", cores: 16, rate: 8000, want: 95},
		{name: "garbage rate", cores: 2, rate: math.Inf(1), window: time.Second, want: 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ThrottleForRate(tc.cores, tc.rate, tc.window); got != tc.want {
				t.Errorf("ThrottleForRate(%d, %v, %v) = %d, want %d", tc.cores, tc.rate, tc.window, got, tc.want)
			}
		})
	}
}
