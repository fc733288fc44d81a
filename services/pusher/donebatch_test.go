package pusher

import (
	"fmt"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// registerN registers connections c0..c<n-1> on fe and waits until the
// pusher knows them.
func registerN(t *testing.T, h *harness, fe *fakeFrontend, n int) []string {
	t.Helper()
	var conns []string
	for i := range n {
		c := fmt.Sprintf("c%d", i)
		conns = append(conns, c)
		fe.register(c, 0)
	}
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == float64(n) })
	return conns
}

// TestBatchedDonesDeliverLatestOnce: every order names the pusher's
// done-batch subject; the frontend answers a whole fan-out with one
// PushDoneBatch. Requests that arrive while the fan-out is in flight merge
// into each connection's processing slot: once the batch done comes, each
// connection gets exactly one follow-up, for the latest sequence, and
// nothing more.
func TestBatchedDonesDeliverLatestOnce(t *testing.T) {
	const n = 200
	h := startPusher(t, Config{Throttle: 1000, PushTimeout: time.Minute, FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.mu.Lock()
	fe.hold = true
	fe.mu.Unlock()
	conns := registerN(t, h, fe, n)

	reached := fe.expect(n)
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Receive(t, reached, "the fan-out's orders")
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "requests consumed", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == 3 })
	fe.mu.Lock()
	held := fe.held
	fe.held, fe.hold = nil, false
	fe.mu.Unlock()
	reached = fe.expect(2 * n)
	fe.sendBatch(doneBatchSubject(names, "p1"), held)
	testutil.Receive(t, reached, "the follow-up orders")
	testutil.Eventually(t, "nothing in flight", func() bool { return h.metric("pilotwire_pusher_in_flight") == 0 })
	short := time.NewTimer(testutil.ShortTimeout)
	defer short.Stop()
	<-short.C
	for _, c := range conns {
		if got := fe.ordersFor(c); !equal(got, []uint64{1, 3}) {
			t.Fatalf("orders for %s = %v, want [1 3]: the fan-out, then one merged follow-up", c, got)
		}
	}
	if got := h.metric("pilotwire_pusher_done_total"); got != 2*n {
		t.Errorf("dones counted = %v, want %d", got, 2*n)
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	// One batch answers each PushOrderBatch the frontend got: the fan-out
	// is one, its follow-ups one or, when the pusher's dispatch runs while
	// the dones are still being applied, a few. Never one per connection.
	if fe.batches < 2 || fe.batches > 10 {
		t.Errorf("PushDoneBatch messages = %d, want 2 to 10 for %d connections (one per order batch)", fe.batches, 2*n)
	}
}

// TestLostDoneBatchFreesSlots: the done batch for a whole throttle's worth
// of orders is lost. Every one of those orders times out on its own: its
// slot is freed (the rest of the fan-out goes out) and its connection is
// resynced, each loss counted.
func TestLostDoneBatchFreesSlots(t *testing.T) {
	const n, throttle = 30, 10
	h := startPusher(t, Config{Throttle: throttle, PushTimeout: 200 * time.Millisecond, FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.setSilent(true) // every done batch is lost
	conns := registerN(t, h, fe, n)
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Eventually(t, "every connection ordered despite lost done batches", func() bool {
		for _, c := range conns {
			if len(fe.ordersFor(c)) == 0 {
				return false
			}
		}
		return true
	})
	if got := h.metric("pilotwire_pusher_done_timeouts_total"); got < n-throttle {
		t.Errorf("done timeouts = %v, want at least %d (each lost order's slot freed by its own timeout)", got, n-throttle)
	}
	// Once the frontend answers again, the resyncs complete and the queue
	// empties.
	fe.setSilent(false)
	testutil.Eventually(t, "every connection synced", func() bool {
		return h.metric("pilotwire_pusher_in_flight") == 0 && h.metric("pilotwire_pusher_done_total") >= n
	})
}

// TestLegacyFrontendSingleDones: a frontend that predates PushDoneBatch
// ignores done_batch_subject and answers one PushDone per order on the
// reply subject; the pusher still takes those.
func TestLegacyFrontendSingleDones(t *testing.T) {
	const n = 50
	h := startPusher(t, Config{PushTimeout: time.Minute, FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.mu.Lock()
	fe.legacy = true
	fe.mu.Unlock()
	conns := registerN(t, h, fe, n)
	for seq := uint64(1); seq <= 2; seq++ {
		reached := fe.expect(int(seq) * n)
		h.push(t, &pb.PushRequest{Full: true, ThroughSeq: seq})
		testutil.Receive(t, reached, fmt.Sprintf("the orders through %d", seq))
	}
	testutil.Eventually(t, "nothing in flight", func() bool { return h.metric("pilotwire_pusher_in_flight") == 0 })
	for _, c := range conns {
		if got := fe.ordersFor(c); !equal(got, []uint64{1, 2}) {
			t.Fatalf("orders for %s = %v, want [1 2]", c, got)
		}
	}
	if got := h.metric("pilotwire_pusher_done_total"); got != 2*n {
		t.Errorf("dones counted = %v, want %d", got, 2*n)
	}
}
