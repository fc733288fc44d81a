package runner

import (
	"context"
	"testing"
	"time"
)

// busyUntil is a control plane that uses one core until a moment, then
// nothing.
type busyUntil struct {
	Instance
	start, until time.Time
	measurable   bool
}

func (b *busyUntil) CPU() (time.Duration, bool) {
	end := time.Now()
	if end.After(b.until) {
		end = b.until
	}
	if end.Before(b.start) {
		return 0, b.measurable
	}
	return end.Sub(b.start), b.measurable
}

func TestWaitIdle(t *testing.T) {
	ctx := context.Background()
	t.Run("waits out the busy time", func(t *testing.T) {
		now := time.Now()
		b := &busyUntil{start: now, until: now.Add(400 * time.Millisecond), measurable: true}
		waited, idle := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 10*time.Second)
		if !idle {
			t.Fatalf("idle = false after %s, want true", waited)
		}
		if waited < 400*time.Millisecond {
			t.Fatalf("waited %s, want at least the 400ms of busy time", waited)
		}
	})
	t.Run("gives up on a busy plane", func(t *testing.T) {
		now := time.Now()
		b := &busyUntil{start: now, until: now.Add(time.Hour), measurable: true}
		waited, idle := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 500*time.Millisecond)
		if idle {
			t.Fatal("idle = true for a plane using a whole core")
		}
		if waited < 500*time.Millisecond {
			t.Fatalf("waited %s, want the whole 500ms", waited)
		}
	})
	t.Run("an idle plane returns after one window", func(t *testing.T) {
		now := time.Now()
		b := &busyUntil{start: now, until: now, measurable: true}
		waited, idle := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 10*time.Second)
		if !idle || waited < 200*time.Millisecond {
			t.Fatalf("waitIdle = %s, %v; want at least one 200ms window, idle", waited, idle)
		}
	})
	t.Run("unmeasurable CPU does not wait", func(t *testing.T) {
		b := &busyUntil{start: time.Now(), until: time.Now().Add(time.Hour)}
		if waited, idle := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 10*time.Second); idle || waited > time.Second {
			t.Fatalf("waitIdle = %s, %v; want at once, not idle", waited, idle)
		}
	})
}
