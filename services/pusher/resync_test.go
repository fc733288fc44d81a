package pusher

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestBehindConnectionResyncedAfterLostDones (issue 12 row 9): after its
// dones are lost twice, a connection behind is still resynced later.
func TestBehindConnectionResyncedAfterLostDones(t *testing.T) {
	h := startPusher(t, Config{PushTimeout: 200 * time.Millisecond, FrontendTimeout: 10 * time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.setSilent(true)
	fe.register("c", 0)
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 4})
	testutil.Eventually(t, "two lost dones", func() bool { return h.metric("pilotwire_pusher_done_timeouts_total") >= 2 })
	fe.setSilent(false)
	n := len(fe.ordersFor("c"))
	testutil.Eventually(t, "resynced", func() bool { return len(fe.ordersFor("c")) > n })
	testutil.Eventually(t, "synced", func() bool { return h.metric("pilotwire_pusher_connections_behind") == 0 })
}

// TestLostDoneFreesThrottleSlot (issue 12 row 9): a frontend that pushed a
// connection but whose done was lost says so in the registry (the
// connection's synced_seq); that frees the throttle slot at once, not after
// the push timeout.
func TestLostDoneFreesThrottleSlot(t *testing.T) {
	_, fe, first, second := oneOfTwoOrdered(t, Config{Throttle: 1, PushTimeout: 10 * time.Minute, FrontendTimeout: 10 * time.Minute}, 5)
	// The frontend pushed it and wrote the connection's entry; the done
	// never came.
	fe.register(first, 5)
	testutil.Eventually(t, second+" ordered", func() bool { return len(fe.ordersFor(second)) == 1 })
}

// TestFailedPushBacksOff (issue 12 row 9): a frontend that keeps failing a
// connection's push is retried forever, with growing waits.
func TestFailedPushBacksOff(t *testing.T) {
	h := startPusher(t, Config{ResyncInterval: 50 * time.Millisecond, FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.setSilent(true)
	fe.register("c", 0)
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	// Answer every order with FAILED.
	sub, err := fe.nc.Subscribe(names.OrdersSubject("fe-1"), func(m *nats.Msg) {
		batch := &pb.PushOrderBatch{}
		_ = proto.Unmarshal(m.Data, batch)
		for _, o := range batch.GetOrders() {
			b, _ := proto.Marshal(&pb.PushDone{ConnId: o.GetConnId(), PushId: o.GetPushId(), Result: pb.PushDone_FAILED, Error: "test", Frontend: "fe-1"})
			_ = fe.nc.Publish(m.Reply, b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "retried past the old limit", func() bool { return len(fe.ordersFor("c")) >= 5 })
	if got := h.metric("pilotwire_pusher_resyncs_total"); got < 3 {
		t.Errorf("resyncs = %v, want at least 3", got)
	}
}

// TestQueuedConnectionsLostPushResyncsAfterTheInterval: a connection
// waiting in its frontend's queue behind the throttle is not "behind with
// nothing scheduled": its push is queued. The sweep took it for one and
// gave it the behind grace's doubled backoff (30 s by default), so when
// that first push was lost its resync waited the doubled grace, not
// ResyncInterval. Here the grace is an hour: before the fix c2's resync
// was an hour away and the test timed out.
func TestQueuedConnectionsLostPushResyncsAfterTheInterval(t *testing.T) {
	_, fe, _, second := oneOfTwoOrdered(t, Config{
		Throttle: 1, PushTimeout: 1500 * time.Millisecond, FrontendTimeout: 10 * time.Minute,
		ResyncInterval: 100 * time.Millisecond, ResyncMax: time.Hour, BehindGrace: time.Hour,
	}, 1)
	// The first order is in flight for a push timeout, longer than a
	// sweep, so a sweep finds the second connection queued. Its own
	// order is then lost too, and it is resynced after the interval.
	testutil.Eventually(t, second+" resynced after its lost push", func() bool { return len(fe.ordersFor(second)) >= 2 })
}

// oneOfTwoOrdered runs a pusher with cfg (a throttle of 1) and a frontend
// that answers nothing, with connections c1 and c2; it pushes a full
// request through seq and returns once one connection is ordered: first,
// with second still queued behind the throttle.
func oneOfTwoOrdered(t *testing.T, cfg Config, seq uint64) (h *harness, fe *fakeFrontend, first, second string) {
	t.Helper()
	h = startPusher(t, cfg)
	fe = newFrontend(t, h.url, "fe-1")
	fe.setSilent(true) // every done is lost
	fe.register("c1", 0)
	fe.register("c2", 0)
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == 2 })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: seq})
	testutil.Eventually(t, "one connection ordered", func() bool { return len(fe.ordersFor("c1"))+len(fe.ordersFor("c2")) == 1 })
	if len(fe.ordersFor("c2")) == 1 {
		return h, fe, "c2", "c1"
	}
	return h, fe, "c1", "c2"
}
