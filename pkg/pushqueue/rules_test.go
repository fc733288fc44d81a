package pushqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// op is one step of a single-threaded rule test.
type op struct {
	enqueue  string // Enqueue(enqueue, reqs{id}); want is "ok" or "dropped"
	id       int
	dequeue  bool   // TryDequeue; want is "conn [ids]" or "none"
	done     string // MarkDone
	remove   string // Remove
	shutdown bool   // ShutDown
	shutErr  bool   // Dequeue(ctx) must return ErrShutdown at once; want unused
	state    bool   // want is "len=N inflight=N"
	want     string
}

func enq(conn string, id int) op { return op{enqueue: conn, id: id, want: "ok"} }
func deq(want string) op         { return op{dequeue: true, want: want} }
func done(conn string) op        { return op{done: conn} }
func remove(conn string) op      { return op{remove: conn} }
func state(len, inflight int) op {
	return op{state: true, want: fmt.Sprintf("len=%d inflight=%d", len, inflight)}
}
func enqDropped(conn string, id int) op { return op{enqueue: conn, id: id, want: "dropped"} }

func TestRules(t *testing.T) {
	tests := []struct {
		name        string
		maxInFlight int
		ops         []op
	}{
		{
			name: "FIFO order",
			ops: []op{
				enq("a", 1), enq("b", 2), enq("c", 3),
				state(3, 0),
				deq("a [1]"), deq("b [2]"), deq("c [3]"), deq("none"),
				state(0, 3),
			},
		},
		{
			name: "merge into pending keeps the place in the FIFO",
			ops: []op{
				enq("a", 1), enq("b", 2), enq("a", 3), enq("a", 4),
				state(2, 0),
				deq("a [1 3 4]"), deq("b [2]"),
			},
		},
		{
			name: "merge into the processing slot, re-enqueued at the end on MarkDone",
			ops: []op{
				enq("a", 1), enq("b", 2),
				deq("a [1]"),
				enq("a", 3), enq("a", 4),
				state(1, 1), // a waits in its slot, not in the FIFO
				enq("c", 5),
				done("a"),
				state(3, 0),
				deq("b [2]"), deq("c [5]"), deq("a [3 4]"),
			},
		},
		{
			name: "MarkDone with an empty slot does not re-enqueue",
			ops: []op{
				enq("a", 1), deq("a [1]"), done("a"), state(0, 0), deq("none"),
				done("a"), done("never-seen"), state(0, 0),
			},
		},
		{
			name:        "throttle holds the N+1th connection until a MarkDone",
			maxInFlight: 2,
			ops: []op{
				enq("a", 1), enq("b", 2), enq("c", 3),
				deq("a [1]"), deq("b [2]"), deq("none"),
				state(1, 2),
				enq("a", 4), // into a's slot: a is still in flight
				done("b"),
				deq("c [3]"), deq("none"),
				done("a"), // a goes back to the FIFO; c still holds a place
				state(1, 1),
				deq("a [4]"),
			},
		},
		{
			name: "remove a pending connection",
			ops: []op{
				enq("a", 1), enq("b", 2),
				remove("a"),
				state(1, 0),
				deq("b [2]"), deq("none"),
			},
		},
		{
			name:        "remove a processing connection drops its slot and frees the throttle",
			maxInFlight: 1,
			ops: []op{
				enq("a", 1), enq("b", 2),
				deq("a [1]"), deq("none"),
				enq("a", 3),
				remove("a"),
				state(1, 0),
				done("a"), // no-op
				state(1, 0),
				deq("b [2]"), deq("none"),
			},
		},
		{
			name: "enqueue after remove adds the connection again",
			ops: []op{
				enq("a", 1), enq("b", 2),
				remove("a"),
				enq("a", 3), // joins the end, as a new connection
				deq("b [2]"), deq("a [3]"), deq("none"),
				remove("a"), remove("a"), remove("nobody"),
				enq("a", 4), deq("a [4]"),
			},
		},
		{
			name: "shutdown hands out the remaining work, then ErrShutdown",
			ops: []op{
				enq("a", 1), enq("b", 2),
				deq("a [1]"),
				enq("a", 3), // into a's slot before the shutdown
				{shutdown: true},
				enqDropped("c", 4), enqDropped("b", 5), enqDropped("a", 6),
				deq("b [2]"),
				deq("none"), // a's slot comes back on MarkDone: no ErrShutdown yet
				done("a"),
				deq("a [3]"),
				{shutErr: true},
				done("a"), done("b"),
				state(0, 0),
				{shutErr: true},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newTestQueue(tc.maxInFlight)
			for i, o := range tc.ops {
				got := ""
				switch {
				case o.enqueue != "":
					got = "dropped"
					if q.Enqueue(o.enqueue, reqs{o.id}) {
						got = "ok"
					}
				case o.dequeue:
					got = "none"
					if conn, req, ok := q.TryDequeue(); ok {
						got = fmt.Sprintf("%s %v", conn, req)
					}
				case o.done != "":
					q.MarkDone(o.done)
				case o.remove != "":
					q.Remove(o.remove)
				case o.shutdown:
					q.ShutDown()
				case o.shutErr:
					ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
					_, _, err := q.Dequeue(ctx)
					cancel()
					if !errors.Is(err, ErrShutdown) {
						t.Fatalf("op %d: Dequeue() error = %v, want ErrShutdown", i, err)
					}
				case o.state:
					got = fmt.Sprintf("len=%d inflight=%d", q.Len(), q.InFlight())
				}
				if diff := cmp.Diff(o.want, got); diff != "" {
					t.Fatalf("op %d (%+v): mismatch (-want +got):\n%s", i, o, diff)
				}
			}
		})
	}
}

// TestThrottleBlocksDequeue checks that a blocking Dequeue waits for a
// MarkDone when MaxInFlight connections are processing.
func TestThrottleBlocksDequeue(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	q := newTestQueue(2)
	for i, c := range []string{"a", "b", "c"} {
		q.Enqueue(c, reqs{i})
	}
	for range 2 {
		if _, _, err := q.Dequeue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, testutil.ShortTimeout)
	_, _, err := q.Dequeue(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Dequeue with 2 in flight: error = %v, want DeadlineExceeded", err)
	}

	type result struct {
		conn string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		conn, _, err := q.Dequeue(ctx)
		got <- result{conn, err}
	}()
	waitBlocked(t, q, 1)
	select {
	case r := <-got:
		t.Fatalf("Dequeue returned %+v before MarkDone", r)
	default:
	}
	q.MarkDone("a")
	select {
	case r := <-got:
		if r.err != nil || r.conn != "c" {
			t.Fatalf("Dequeue after MarkDone = %+v, want c", r)
		}
	case <-ctx.Done():
		t.Fatal("Dequeue still blocked after MarkDone")
	}
}

// waitBlocked polls, with a deadline, until n Dequeue calls are waiting.
func waitBlocked[R any](t *testing.T, q *Queue[R], n int) {
	t.Helper()
	deadline := time.NewTimer(testutil.DefaultTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		q.mu.Lock()
		k := len(q.waiters)
		q.mu.Unlock()
		if k >= n {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%d Dequeue calls waiting, want %d", k, n)
		}
	}
}

func TestDequeueContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	q := newTestQueue(0)

	// A blocked Dequeue returns when its context is cancelled.
	wctx, wcancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, _, err := q.Dequeue(wctx)
		errc <- err
	}()
	waitBlocked(t, q, 1)
	wcancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("Dequeue not unblocked by cancel")
	}

	// A done context wins over available work, which stays queued.
	q.Enqueue("a", reqs{1})
	if _, _, err := q.Dequeue(wctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dequeue(cancelled) error = %v, want Canceled", err)
	}
	if conn, req, err := q.Dequeue(ctx); err != nil || conn != "a" || !cmp.Equal(req, reqs{1}) {
		t.Fatalf("Dequeue() = %s, %v, %v; want a [1]", conn, req, err)
	}
}

// TestShutDownWakesWaiters checks that blocked Dequeue calls return
// ErrShutdown when the queue shuts down with no work left, and keep
// waiting while a processing slot may still bring work back.
func TestShutDownWakesWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	q := newTestQueue(0)
	q.Enqueue("a", reqs{1})
	if _, _, err := q.Dequeue(ctx); err != nil {
		t.Fatal(err)
	}
	q.Enqueue("a", reqs{2}) // into a's slot

	const n = 4
	type result struct {
		conn string
		err  error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			conn, _, err := q.Dequeue(ctx)
			results <- result{conn, err}
		}()
	}
	waitBlocked(t, q, n)
	q.ShutDown()
	short, cancelShort := context.WithTimeout(ctx, testutil.ShortTimeout)
	select {
	case r := <-results:
		t.Fatalf("Dequeue returned %+v while a's slot is pending", r)
	case <-short.Done():
	}
	cancelShort()
	q.MarkDone("a")
	var gotA, gotShutdown int
	for range n {
		select {
		case r := <-results:
			switch {
			case r.err == nil && r.conn == "a":
				gotA++
			case errors.Is(r.err, ErrShutdown):
				gotShutdown++
			default:
				t.Fatalf("unexpected result %+v", r)
			}
		case <-ctx.Done():
			t.Fatal("Dequeue calls still blocked after shutdown")
		}
	}
	if gotA != 1 || gotShutdown != n-1 {
		t.Fatalf("got a %d times and ErrShutdown %d times, want 1 and %d", gotA, gotShutdown, n-1)
	}
}

// TestShutDownHandsOutWhatIsQueued: after ShutDown, queued work is still
// handed out until it is done; only then does Dequeue say ErrShutdown.
func TestShutDownHandsOutWhatIsQueued(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	q := newTestQueue(0)
	q.Enqueue("a", reqs{1})
	q.Enqueue("b", reqs{2})
	q.Enqueue("c", reqs{3})
	if _, _, err := q.Dequeue(ctx); err != nil {
		t.Fatal(err)
	}
	q.ShutDown()
	if q.Enqueue("d", reqs{4}) {
		t.Fatal("Enqueue accepted after ShutDown")
	}
	if got := fmt.Sprintf("len=%d inflight=%d", q.Len(), q.InFlight()); got != "len=2 inflight=1" {
		t.Fatalf("after ShutDown: %s, want len=2 inflight=1", got)
	}

	// A worker finishes the rest; the queue empties, then says ErrShutdown.
	var handled []string
	q.MarkDone("a")
	for {
		conn, _, err := q.Dequeue(ctx)
		if errors.Is(err, ErrShutdown) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		handled = append(handled, conn)
		q.MarkDone(conn)
	}
	if diff := cmp.Diff([]string{"b", "c"}, handled); diff != "" {
		t.Errorf("handled mismatch (-want +got):\n%s", diff)
	}
	if q.Len() != 0 || q.InFlight() != 0 {
		t.Errorf("after the last Dequeue: Len %d, InFlight %d", q.Len(), q.InFlight())
	}
}

func TestRemoveUnblocksThrottle(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	q := newTestQueue(1)
	q.Enqueue("a", reqs{1})
	q.Enqueue("b", reqs{2})
	if _, _, err := q.Dequeue(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		conn, _, _ := q.Dequeue(ctx)
		got <- conn
	}()
	waitBlocked(t, q, 1)
	q.Remove("a")
	select {
	case conn := <-got:
		if conn != "b" {
			t.Fatalf("Dequeue() = %q, want b", conn)
		}
	case <-ctx.Done():
		t.Fatal("Dequeue still blocked after Remove freed the throttle")
	}
}

func TestDefaultThrottle(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	tests := []struct {
		name  string
		procs int
		want  int
	}{
		{name: "one proc", procs: 1, want: 20},
		{name: "two procs", procs: 2, want: 25},
		{name: "16 procs", procs: 16, want: 95},
		{name: "capped at 100", procs: 64, want: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(tc.procs)
			if got := DefaultThrottle(); got != tc.want {
				t.Errorf("DefaultThrottle() with GOMAXPROCS=%d = %d, want %d", tc.procs, got, tc.want)
			}
		})
	}
}

func TestNewPanicsWithoutMerge(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil merge) did not panic")
		}
	}()
	New[int](Config{}, nil)
}
