package pusher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestRedeliveredRequestNotOrderedBelowCatchUp (the fault matrix's older
// orders after a pusher kill): a PushRequest delivered to the old holder
// and never acknowledged is redelivered to the new holder after the
// new holder's take-over catch-up, at a higher sequence, is in flight for
// the connection. It is covered by that catch-up: the connection must not
// be ordered it (an order older than one it already has), and the next,
// newer request must still reach it.
func TestRedeliveredRequestNotOrderedBelowCatchUp(t *testing.T) {
	url := natstest.Start(t)
	// The first holder creates the durable consumer, then stops.
	a := runPusher(t, url, Config{ID: "pa", FrontendTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	testutil.Eventually(t, "a's consumer", func() bool {
		_, err := a.js.Consumer(ctx, names.PushesStream(), names.PusherConsumer("0"))
		return err == nil
	})
	a.stop()

	fe := newFrontend(t, url, "fe-1")
	fe.setSilent(true) // the take-over catch-up stays in flight
	fe.register("c", 0)
	a.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	a.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})

	// A holder that dies after the consumer delivered it request 1 and
	// before it acknowledged it.
	cons, err := a.js.Consumer(ctx, names.PushesStream(), names.PusherConsumer("0"))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(testutil.DefaultTimeout))
	if err != nil {
		t.Fatal(err)
	}
	var unacked jetstream.Msg
	for m := range batch.Messages() {
		unacked = m
	}
	if unacked == nil {
		t.Fatalf("fetch: no message (%v)", batch.Error())
	}
	if pr := (&pb.PushRequest{}); proto.Unmarshal(unacked.Data(), pr) != nil || pr.GetThroughSeq() != 1 {
		t.Fatalf("fetched %v, want the request through 1", pr)
	}

	b := runPusher(t, url, Config{ID: "pb", FrontendTimeout: time.Minute})
	testutil.Eventually(t, "b active", func() bool { return b.metric("pilotwire_pusher_leader") == 1 })
	testutil.Eventually(t, "b catches c up to 2", func() bool { return equal(fe.ordersFor("c"), []uint64{2}) })
	testutil.Eventually(t, "b consumed request 2", func() bool { return b.metric("pilotwire_pusher_push_requests_total") == 1 })

	// Request 1 is redelivered (a nak stands for the ack wait running out)
	// while the catch-up through 2 is in flight.
	if err := unacked.Nak(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "b consumed request 1", func() bool { return b.metric("pilotwire_pusher_push_requests_total") == 2 })
	// The catch-up's done arrives.
	fe.setSilent(false)
	fe.mu.Lock()
	o := fe.orders[0]
	fe.mu.Unlock()
	done, _ := proto.Marshal(&pb.PushDone{ConnId: "c", PushId: o.GetPushId(), Result: pb.PushDone_SENT, SyncedSeq: 2, Frontend: "fe-1"})
	if err := fe.nc.Publish(names.DoneSubject("pb"), done); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "done handled", func() bool { return b.metric("pilotwire_pusher_done_total") >= 1 })
	testutil.Eventually(t, "request 1 ordered or found covered", func() bool {
		return len(fe.ordersFor("c")) > 1 || skippedFor(b, "ordered") >= 1
	})
	if got := fe.ordersFor("c"); !equal(got, []uint64{2}) {
		t.Fatalf("orders = %v, want [2]: request 1 is covered by the order through 2", got)
	}

	// A newer request is not lost.
	b.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "pushed 3", func() bool { o := fe.ordersFor("c"); return len(o) > 1 })
	if got := fe.ordersFor("c"); !equal(got, []uint64{2, 3}) {
		t.Errorf("orders = %v, want [2 3]", got)
	}
}

// skippedFor is pilotwire_pusher_skipped_total{reason=reason}.
func skippedFor(h *harness, reason string) float64 {
	mfs, err := h.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "pilotwire_pusher_skipped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
