package pusher

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// endpointRequest is an endpoint-only request naming service ns/a and n
// other services, numbered from offset.
func endpointRequest(through uint64, n, offset int) *pb.PushRequest {
	pr := &pb.PushRequest{ThroughSeq: through, FirstSeq: through, Covered: []*pb.SeqRange{{First: through, Last: through}},
		Reasons: map[string]int32{"endpoint": int32(n + 1)}, ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a", Cluster: "c1"}}}
	for i := range n {
		pr.ConfigKeys = append(pr.ConfigKeys, &pb.ConfigKey{Kind: "Service", Namespace: "ns", Name: fmt.Sprintf("svc-%07d", offset+i), Cluster: "c1"})
	}
	return pr
}

// (f *fakeFrontend) lastOrder returns the last order a connection got.
func (f *fakeFrontend) lastOrder(conn string) *pb.PushOrder {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.orders) - 1; i >= 0; i-- {
		if f.orders[i].GetConnId() == conn {
			return f.orders[i]
		}
	}
	return nil
}

// TestBatchesSplitByBytes (issue 12 row 2): orders that together exceed the
// server's max payload go out in several messages, not in one that fails.
func TestBatchesSplitByBytes(t *testing.T) {
	const conns = 30
	h := startPusher(t, Config{Throttle: conns, PushTimeout: time.Minute, FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	for i := range conns {
		fe.register(fmt.Sprintf("c%d", i), 0, "outbound|80||a.ns.svc.cluster.local")
	}
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == conns })
	// ~340 KB of keys per order: 30 orders are past the 8 MiB max payload.
	reached := fe.expect(conns)
	h.push(t, endpointRequest(1, 11000, 0))
	testutil.Eventually(t, "every connection ordered", func() bool {
		select {
		case <-reached:
			return true
		default:
			return false
		}
	})
	if n := h.metric("pilotwire_pusher_send_errors_total"); n != 0 {
		t.Errorf("send errors = %v, want 0", n)
	}
	// The keys survive the split. (Under load the request's consumer may
	// stall past its ack wait, and the catch-up then marks a connection's
	// pending push full; the keys it carries must still be all there.)
	for i := range conns {
		if o := fe.lastOrder(fmt.Sprintf("c%d", i)); len(o.GetConfigKeys()) != 11001 {
			t.Errorf("c%d: full %v with %d keys, want every key", i, o.GetFull(), len(o.GetConfigKeys()))
		}
	}
}

// TestOversizedOrderBecomesFull (issue 12 row 2): an order whose keys alone
// are past the bound drops them and goes out as a full push. The bound is
// set to 64 KiB (the server's max payload always caps it too) so that the
// test needs thousands of keys, not hundreds of thousands.
func TestOversizedOrderBecomesFull(t *testing.T) {
	h := startPusher(t, Config{PushTimeout: time.Minute, FrontendTimeout: time.Minute, MaxBatchBytes: 64 << 10})
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("c", 0, "outbound|80||a.ns.svc.cluster.local")
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	fe.setSilent(true)
	h.push(t, endpointRequest(1, 1, 0))
	testutil.Eventually(t, "first order", func() bool { return len(fe.ordersFor("c")) == 1 })
	// While the first push is in flight, two requests of ~47 KB each merge
	// into one follow-up of ~93 KB: past the bound.
	const n = 2
	for i := range n {
		h.push(t, endpointRequest(uint64(2+i), 1500, i*1500))
	}
	testutil.Eventually(t, "requests consumed", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == n+1 })
	fe.setSilent(false)
	reached := fe.expect(2)
	b, _ := proto.Marshal(&pb.PushDone{ConnId: "c", PushId: 1, Result: pb.PushDone_SENT, SyncedSeq: 1})
	if err := fe.nc.Publish(names.DoneSubject("p1"), b); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "follow-up order", func() bool {
		select {
		case <-reached:
			return true
		default:
			return false
		}
	})
	o := fe.lastOrder("c")
	if !o.GetFull() || len(o.GetConfigKeys()) != 0 || o.GetThroughSeq() != n+1 {
		t.Errorf("follow-up: full %v, %d keys, through %d; want a full order without keys through %d", o.GetFull(), len(o.GetConfigKeys()), o.GetThroughSeq(), n+1)
	}
	if got := h.metric("pilotwire_pusher_oversized_orders_total"); got != 1 {
		t.Errorf("oversized orders = %v, want 1", got)
	}
}

// TestInFlightGaugeCountsOrdersBeforeTheyAreSent: the in-flight gauge was
// set only after a dispatch round's batches were published, so a
// frontend (or a test) that had already been handed an order and had
// answered it could read a gauge that never counted it: TestLegacyFrontendSingleDones
// saw nothing in flight with 25 of its 100 dones still to come. The
// gauge now counts a batch's orders before the batch is published.
func TestInFlightGaugeCountsOrdersBeforeTheyAreSent(t *testing.T) {
	const conns = 5
	var h atomic.Pointer[harness]
	var mu sync.Mutex
	var gauge float64 // the gauge, and the orders of the first batch, as it was about to go
	var orders int
	cfg := Config{Throttle: 100, PushTimeout: time.Minute, FrontendTimeout: time.Minute, beforeSend: func(b *pb.PushOrderBatch) {
		if hh := h.Load(); hh != nil {
			mu.Lock()
			defer mu.Unlock()
			if orders == 0 {
				gauge, orders = hh.metric("pilotwire_pusher_in_flight"), len(b.GetOrders())
			}
		}
	}}
	hh := startPusher(t, cfg)
	fe := newFrontend(t, hh.url, "fe-1")
	fe.setSilent(true)
	registerN(t, hh, fe, conns)
	h.Store(hh)
	reached := fe.expect(conns)
	hh.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Receive(t, reached, "every connection ordered")
	// The hook ran before the first batch was published, and the orders
	// were received after that.
	mu.Lock()
	defer mu.Unlock()
	if gauge < float64(orders) || orders == 0 {
		t.Errorf("in-flight gauge just before the first batch was published = %v, want at least its %d orders", gauge, orders)
	}
}
