package pusher

import (
	"context"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestPeriodicCheckWaitsForTheConsumer (issue 12 row 13): the periodic
// check of the newest PushRequest must not beat the consumer's delivery and
// turn a scoped endpoint push into a full catch-up for every connection.
// The consumer is paused for less than its ack wait: the request then comes
// through the consumer and is scoped.
func TestPeriodicCheckWaitsForTheConsumer(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("c-b", 0, "outbound|80||b.ns.svc.cluster.local")
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1, FirstSeq: 1, Covered: []*pb.SeqRange{{First: 1, Last: 1}}})
	testutil.Eventually(t, "c-b pushed", func() bool { return equal(fe.ordersFor("c-b"), []uint64{1}) })

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const stall = 3 * time.Second // two or three periodic checks, under the 5s ack wait
	if _, err := h.js.PauseConsumer(ctx, names.PushesStream(), names.PusherConsumer("0"), time.Now().Add(stall)); err != nil {
		t.Fatal(err)
	}
	h.push(t, &pb.PushRequest{ThroughSeq: 2, FirstSeq: 2, Covered: []*pb.SeqRange{{First: 2, Last: 2}},
		Reasons: map[string]int32{"endpoint": 1}, ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a"}}})
	testutil.Eventually(t, "request delivered after the pause", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == 2 })
	testutil.Eventually(t, "scoped out", func() bool { return h.metric("pilotwire_pusher_skipped_total") == 1 })
	if got := fe.ordersFor("c-b"); !equal(got, []uint64{1}) {
		t.Errorf("c-b orders = %v, want only [1]: the endpoint push does not concern it", got)
	}
}
