package runner

import (
	"context"
	"math"
	"testing"
	"time"
)

// plane is a control plane that uses one core from start until
// busyUntil, and rate cores more all along (its background: heartbeats,
// leases, keepalives).
type plane struct {
	Instance
	start, busyUntil time.Time
	rate             float64
	unmeasurable     bool
}

func (p *plane) CPU() (time.Duration, bool) {
	now := time.Now()
	busy := min(now.Sub(p.start), p.busyUntil.Sub(p.start))
	return max(busy, 0) + time.Duration(p.rate*float64(now.Sub(p.start))), !p.unmeasurable
}

func TestWaitIdle(t *testing.T) {
	ctx := context.Background()
	t.Run("waits out the busy time", func(t *testing.T) {
		now := time.Now()
		b := &plane{start: now, busyUntil: now.Add(400 * time.Millisecond)}
		waited, idle, _ := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 10*time.Second)
		if !idle {
			t.Fatalf("idle = false after %s, want true", waited)
		}
		if waited < 400*time.Millisecond {
			t.Fatalf("waited %s, want at least the 400ms of busy time", waited)
		}
	})
	t.Run("gives up on a busy plane", func(t *testing.T) {
		now := time.Now()
		b := &plane{start: now, busyUntil: now.Add(time.Hour)}
		waited, idle, _ := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 500*time.Millisecond)
		if idle {
			t.Fatal("idle = true for a plane using a whole core")
		}
		if waited < 500*time.Millisecond {
			t.Fatalf("waited %s, want the whole 500ms", waited)
		}
	})
	t.Run("an idle plane returns after one window", func(t *testing.T) {
		now := time.Now()
		b := &plane{start: now, busyUntil: now}
		waited, idle, _ := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 10*time.Second)
		if !idle || waited < 200*time.Millisecond {
			t.Fatalf("waitIdle = %s, %v; want at least one 200ms window, idle", waited, idle)
		}
	})
	t.Run("unmeasurable CPU does not wait", func(t *testing.T) {
		b := &plane{start: time.Now(), busyUntil: time.Now().Add(time.Hour), unmeasurable: true}
		if waited, idle, _ := waitIdle(ctx, b, 0.05, 200*time.Millisecond, 10*time.Second); idle || waited > time.Second {
			t.Fatalf("waitIdle = %s, %v; want at once, not idle", waited, idle)
		}
	})
}

// A plane whose background is above IdleCPU (seen on this 2-core VM in a
// slow half hour: 0.06-0.1 cores with 1,000 proxies connected) never
// falls under the absolute threshold, so each step waited IdleMax and
// counted that much background as the step's CPU. Measured first
// (idleRate), the background is added to the threshold, and the step's
// tail ends with its own work.
func TestWaitIdleAboveBackground(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	rate, ok := idleRate(ctx, &plane{start: now, busyUntil: now, rate: 0.2}, 300*time.Millisecond)
	if !ok || rate < 0.15 || rate > 0.25 {
		t.Fatalf("idleRate = %.3f, %v; want about 0.2 cores", rate, ok)
	}
	now = time.Now()
	waited, idle, _ := waitIdle(ctx, &plane{start: now, busyUntil: now.Add(400 * time.Millisecond), rate: 0.2}, 0.05+rate, 200*time.Millisecond, 5*time.Second)
	if !idle || waited < 400*time.Millisecond || waited > 3*time.Second {
		t.Fatalf("waitIdle above the measured background = %s, %v; want idle once the 400ms of work is done", waited, idle)
	}
	now = time.Now()
	if waited, idle, _ := waitIdle(ctx, &plane{start: now, busyUntil: now, rate: 0.2}, 0.05, 200*time.Millisecond, time.Second); idle {
		t.Fatalf("waitIdle at the absolute threshold = %s, %v; want it to give up on a 0.2-core background", waited, idle)
	}
}

// aboveIdle takes the background's share of the step's window off the
// step's CPU, and says nothing when the background was not measured.
func TestAboveIdle(t *testing.T) {
	rr := &RoundResult{IdleCores: 0.1, Steps: []StepResult{{Name: StepEndpoint, CPU: 0.5, Window: 2}}}
	if got := aboveIdle(StepEndpoint)(rr); math.Abs(got-0.3) > 1e-9 {
		t.Errorf("aboveIdle = %v, want 0.3", got)
	}
	rr.IdleCores = 0
	if got := aboveIdle(StepEndpoint)(rr); !math.IsNaN(got) {
		t.Errorf("aboveIdle without a measured background = %v, want NaN", got)
	}
	if got := aboveIdle(StepService)(&RoundResult{IdleCores: 0.1}); !math.IsNaN(got) {
		t.Errorf("aboveIdle of a step not run = %v, want NaN", got)
	}
}

// The initial sync's tail runs before the background is measured: once it
// is, recountTail ends that tail where the step's own work ended, as the
// later steps' tails end, and recounts its CPU to there.
func TestRecountTail(t *testing.T) {
	t0 := time.Unix(1_780_000_000, 0)
	var samples []cpuSample
	cpu := time.Duration(0)
	for i := range 60 { // every 100 ms: one core busy for 1 s, then a 0.2-core background
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		samples = append(samples, cpuSample{at, cpu})
		if i < 10 {
			cpu += 100 * time.Millisecond
		} else {
			cpu += 20 * time.Millisecond
		}
	}
	if i := firstIdle(samples, 0.05, 200*time.Millisecond); i != -1 {
		t.Fatalf("firstIdle at 0.05 cores = %d, want -1: the background is above it", i)
	}
	st := &StepResult{CPU: 99, Tail: 20, Window: 25, tail: &tailSamples{samples: samples, cpu0: 0, from: t0.Add(-time.Second), quietEnd: t0}}
	if !recountTail(st, 0.25, 200*time.Millisecond) {
		t.Fatal("recountTail found no idle point above a 0.2-core background")
	}
	// The first window wholly after the busy second ends at 1.2 s.
	if !st.TailRecounted || math.Abs(st.Tail-1.2) > 1e-9 || math.Abs(st.CPU-1.04) > 1e-9 || math.Abs(st.Window-2.2) > 1e-9 {
		t.Errorf("recounted to tail %.3f s, cpu %.3f s, window %.3f s (recounted %v); want 1.2, 1.04, 2.2", st.Tail, st.CPU, st.Window, st.TailRecounted)
	}
	if recountTail(&StepResult{CPU: 1}, 0.25, 200*time.Millisecond) {
		t.Error("recountTail recounted a step without samples")
	}
}
