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
	// Request 3 comes once the pusher is connected again: one published
	// while it reconnects may be delivered into the dead connection too,
	// and then nothing shows the loss before the ack wait.
	testutil.Eventually(t, "pusher reconnected", func() bool { return pnc.Stats().Reconnects >= 1 && pnc.IsConnected() })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3, FirstSeq: 3, Covered: []*pb.SeqRange{{First: 3, Last: 3}}})

	// The lost one comes again only after the 5 s ack wait.
	testutil.EventuallyWithin(t, 2*time.Second, "all 3 push requests handled", func() bool { return h.metric("pilotwire_pusher_push_requests_total") >= 3 })
	// The pusher read it from the stream when request 3 showed the gap.
	// In about 1 run of 200 the server delivers it again at once after
	// the reconnect (4 deliveries for 3 requests): then it was never lost
	// to the pusher, and nothing counts it.
	lost := h.metric("pilotwire_pusher_push_requests_lost_total")
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	redelivered := ci.Delivered.Consumer > ci.Delivered.Stream
	switch {
	case lost == 1:
	case lost == 0 && redelivered:
		t.Logf("request 2 delivered again at once after the reconnect (%d deliveries of %d requests): not read from the stream", ci.Delivered.Consumer, ci.Delivered.Stream)
	default:
		t.Errorf("pilotwire_pusher_push_requests_lost_total = %v with %d deliveries of %d requests, want 1 (or 0 when the server delivered it again at once)", lost, ci.Delivered.Consumer, ci.Delivered.Stream)
	}
}
