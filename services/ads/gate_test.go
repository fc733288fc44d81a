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

// TestSeqGateWakesOnlyAtAWaitedSeq: replay advances the gate once per
// record while start waits for the stream's last sequence; an advance
// below every waiter's sequence must not wake them (each wake-up is a
// context switch per record).
func TestSeqGateWakesOnlyAtAWaitedSeq(t *testing.T) {
	g := newSeqGate()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- g.wait(ctx, 100) }()
	go func() { done <- g.wait(ctx, 50) }()
	testutil.Eventually(t, "two waiters blocked", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiters == 2 })
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	for seq := uint64(1); seq < 50; seq++ {
		g.advance(seq)
	}
	g.mu.Lock()
	woken := g.ch != ch
	g.mu.Unlock()
	if woken {
		t.Error("an advance below every waited seq woke the waiters")
	}
	g.advance(50)
	if err := <-done; err != nil {
		t.Fatalf("wait(50) = %v", err)
	}
	testutil.Eventually(t, "the waiter for 100 blocked again", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiters == 1 && g.ch != ch })
	g.mu.Lock()
	ch = g.ch
	g.mu.Unlock()
	for seq := uint64(51); seq < 100; seq++ {
		g.advance(seq)
	}
	g.mu.Lock()
	woken = g.ch != ch
	g.mu.Unlock()
	if woken {
		t.Error("an advance below the remaining waited seq woke the waiter")
	}
	g.advance(120)
	if err := <-done; err != nil {
		t.Fatalf("wait(100) = %v", err)
	}
}
