package ads

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func TestSeqGate(t *testing.T) {
	g := newSeqGate()
	g.advance(3)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if err := g.wait(ctx, 3); err != nil {
		t.Fatalf("wait for an applied seq: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- g.wait(ctx, 5) }()
	testutil.Eventually(t, "a waiter blocked", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiters == 1 })
	g.advance(4)
	select {
	case err := <-done:
		t.Fatalf("wait(5) returned %v at 4", err)
	default:
	}
	g.advance(5)
	if err := <-done; err != nil {
		t.Fatalf("wait(5) = %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if err := g.wait(short, 9); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past deadline = %v", err)
	}
	if g.waiters != 0 {
		t.Errorf("%d waiters left", g.waiters)
	}
}
