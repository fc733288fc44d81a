package pushqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestConcurrentProducersConsumers runs many producers and consumers (run
// it with -race) and checks that a connection is never processed by two
// consumers at once, that no more than MaxInFlight are processed at once,
// and that every request is delivered exactly once (at most once for
// removed connections), with the drain at the end.
func TestConcurrentProducersConsumers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInFlight int
		remove      bool
	}{
		{name: "unthrottled", maxInFlight: 0},
		{name: "throttled", maxInFlight: 3},
		{name: "throttled with removals", maxInFlight: 3, remove: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runConcurrent(t, tc.maxInFlight, tc.remove)
		})
	}
}

func runConcurrent(t *testing.T, maxInFlight int, remove bool) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	const (
		producers   = 8
		consumers   = 8
		perProducer = 2000
		conns       = 50
	)
	q := newTestQueue(maxInFlight)

	var (
		busy      [conns]atomic.Int32 // consumers processing each connection
		inFlight  atomic.Int32
		peak      atomic.Int32
		delivered [producers * perProducer]atomic.Int32
		removed   [conns]atomic.Bool
		failure   atomic.Pointer[string]
	)
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		failure.CompareAndSwap(nil, &msg)
	}
	connIndex := func(conn string) int {
		var i int
		fmt.Sscanf(conn, "c%d", &i)
		return i
	}

	var consumersWG sync.WaitGroup
	for c := range consumers {
		consumersWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for {
				// Some calls use contexts that are cancelled at random, to
				// exercise the hand-over of wake-ups by cancelled waiters.
				dctx, dcancel := ctx, context.CancelFunc(func() {})
				if rng.IntN(4) == 0 {
					dctx, dcancel = context.WithCancel(ctx)
					go dcancel()
				}
				conn, req, err := q.Dequeue(dctx)
				dcancel()
				switch {
				case errors.Is(err, ErrShutdown):
					return
				case errors.Is(err, context.Canceled) && ctx.Err() == nil:
					continue
				case err != nil:
					fail("Dequeue: %v", err)
					return
				}
				i := connIndex(conn)
				if n := busy[i].Add(1); n != 1 {
					fail("%s processed by %d consumers at once", conn, n)
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				// Hold the connection a little so others overlap with it
				// and requests land in its processing slot.
				for range rng.IntN(4) {
					runtime.Gosched()
				}
				for _, id := range req {
					if delivered[id].Add(1) != 1 {
						fail("request %d delivered twice", id)
					}
				}
				if remove && rng.IntN(50) == 0 {
					removed[i].Store(true)
					busy[i].Add(-1)
					inFlight.Add(-1)
					q.Remove(conn)
					q.MarkDone(conn) // no-op after Remove
					continue
				}
				busy[i].Add(-1)
				inFlight.Add(-1)
				q.MarkDone(conn)
			}
		})
	}

	var producersWG sync.WaitGroup
	for p := range producers {
		producersWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 2))
			for k := range perProducer {
				conn := fmt.Sprintf("c%d", rng.IntN(conns))
				if !q.Enqueue(conn, reqs{p*perProducer + k}) {
					fail("Enqueue refused before shutdown")
				}
			}
		})
	}
	producersWG.Wait()
	q.ShutDown() // consumers hand out the rest, then see ErrShutdown
	consumersWG.Wait()
	if f := failure.Load(); f != nil {
		t.Fatal(*f)
	}
	if maxInFlight > 0 && int(peak.Load()) > maxInFlight {
		t.Errorf("peak in flight %d > MaxInFlight %d", peak.Load(), maxInFlight)
	}
	missing := 0
	for id := range delivered {
		if delivered[id].Load() == 0 {
			missing++
		}
	}
	if !remove && missing > 0 {
		t.Errorf("%d requests never delivered", missing)
	}
	if q.Len() != 0 || q.InFlight() != 0 {
		t.Errorf("after shutdown: Len %d, InFlight %d", q.Len(), q.InFlight())
	}
	t.Logf("peak in flight %d, %d requests dropped with removed connections", peak.Load(), missing)
}

// TestCancelledWaitersPassWakeUps cancels half of the blocked Dequeue
// calls while work arrives: a wake-up taken by a cancelled call must reach
// a live one, or a live call would block with work in the queue.
func TestCancelledWaitersPassWakeUps(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	for round := range 200 {
		q := newTestQueue(0)
		const n = 6
		got := make(chan string, n)
		cancelCtx, cancelHalf := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range n {
			dctx := ctx
			if i%2 == 0 {
				dctx = cancelCtx
			}
			wg.Go(func() {
				conn, _, err := q.Dequeue(dctx)
				if err == nil {
					got <- conn
				}
			})
		}
		waitBlocked(t, q, n)
		var enqueuers sync.WaitGroup
		enqueuers.Go(cancelHalf)
		for i := range n / 2 {
			enqueuers.Go(func() { q.Enqueue(fmt.Sprint(i), reqs{i}) })
		}
		enqueuers.Wait()
		for range n / 2 {
			select {
			case <-got:
			case <-ctx.Done():
				t.Fatalf("round %d: work left in the queue (Len %d) with live Dequeue calls waiting", round, q.Len())
			}
		}
		q.ShutDown() // release the calls left without work
		wg.Wait()
	}
}
