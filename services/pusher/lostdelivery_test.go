package pusher

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestRequestLostInTransitIsHandled: a PushRequest the server delivered to
// the pusher while its connection died (a NATS node killed) comes again
// only after the consumer's 5 s ack wait, though the next request comes at
// once. Here one is lost for real, in a proxy that drops what the server
// sends until it cuts the connection; it must be handled well within the
// ack wait.
func TestRequestLostInTransitIsHandled(t *testing.T) {
	url := natstest.Start(t)
	px := natstest.NewDropProxy(t, strings.TrimPrefix(url, "nats://"))
	pnc, err := nats.Connect("nats://"+px.Addr(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pnc.Close)
	h := runPusherOn(t, url, pnc, Config{FrontendTimeout: time.Minute}, nil)
	testutil.Eventually(t, "pusher active", func() bool { return h.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c-a", 0, "outbound|80||a.ns.svc.cluster.local")
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1, FirstSeq: 1, Covered: []*pb.SeqRange{{First: 1, Last: 1}}})
	testutil.Eventually(t, "request 1 handled", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	cons, err := h.js.Consumer(ctx, names.PushesStream(), names.PusherConsumer("0"))
	if err != nil {
		t.Fatal(err)
	}
	px.Drop(true)
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2, FirstSeq: 2, Covered: []*pb.SeqRange{{First: 2, Last: 2}}})
	testutil.Eventually(t, "request 2 delivered", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.Delivered.Stream >= 2
	})
	px.Cut()
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3, FirstSeq: 3, Covered: []*pb.SeqRange{{First: 3, Last: 3}}})

	deadline := time.Now().Add(2 * time.Second)
	for h.metric("pilotwire_pusher_push_requests_total") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%v push requests handled 2 s after the third, want 3 (the lost one comes again only after the 5 s ack wait)", h.metric("pilotwire_pusher_push_requests_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := h.metric("pilotwire_pusher_push_requests_lost_total"); got != 1 {
		t.Errorf("pilotwire_pusher_push_requests_lost_total = %v, want 1", got)
	}
}

func TestDeliveryGaps(t *testing.T) {
	type step struct {
		d, s     uint64
		from, to uint64
		gap      bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in order", []step{{d: 7, s: 40}, {d: 8, s: 41}, {d: 9, s: 45}}}, // a term starts anywhere; stream gaps alone are purged requests
		{"two lost", []step{{d: 1, s: 10}, {d: 4, s: 13, from: 10, to: 13, gap: true}, {d: 5, s: 14}}},
		{"a lost redelivery", []step{{d: 1, s: 10}, {d: 2, s: 11}, {d: 4, s: 12}}},
		{"numbers going back", []step{{d: 5, s: 10}, {d: 3, s: 11}, {d: 6, s: 12}, {d: 8, s: 14, from: 12, to: 14, gap: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g deliveryGaps
			for i, st := range tc.steps {
				from, to, gap := g.next(st.d, st.s)
				if gap != st.gap || (gap && (from != st.from || to != st.to)) {
					t.Errorf("step %d (delivery %d, seq %d): gap %v (%d, %d), want %v (%d, %d)", i, st.d, st.s, gap, from, to, st.gap, st.from, st.to)
				}
			}
		})
	}
}
