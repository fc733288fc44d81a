package pusher

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// failingConsumerStream is a PUSHES stream whose consumer creation fails
// while fails is above zero, as it does while the stream or the meta
// leader is being elected after a NATS node is lost.
type failingConsumerStream struct {
	jetstream.Stream
	fails *atomic.Int32
}

func (s failingConsumerStream) CreateOrUpdateConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return s.Stream.CreateOrUpdateConsumer(ctx, cfg)
}

// TestActiveWorkFailureStartsAgain (CI fault matrix, stop 21): a failure
// of the active pusher's work (its consumer could not be created in time
// while the cluster elected leaders) ends the term, not the process. It is
// logged and counted, the lease is given up, and the pusher campaigns
// again and pushes. Before the fix Run returned the error and the service
// exited, so with every pusher gone no proxy was ever pushed again.
func TestActiveWorkFailureStartsAgain(t *testing.T) {
	url := natstest.Start(t)
	var fails atomic.Int32
	fails.Store(2 * consumerAttempts) // each term tries consumerAttempts times
	p := runPusherHooks(t, url, Config{ID: "pa", LeaseTTL: 600 * time.Millisecond, FrontendTimeout: time.Minute}, &natstest.Hooks{
		Stream: func(s jetstream.Stream) jetstream.Stream {
			if s.CachedInfo().Config.Name != names.PushesStream() {
				return s
			}
			return failingConsumerStream{Stream: s, fails: &fails}
		},
	})
	// The leader gauge is 1 for each term, failed ones too: wait for the
	// two failures, then for a term that works.
	testutil.Eventually(t, "two failed terms counted", func() bool { return p.metric("pilotwire_pusher_restarts_total") == 2 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "the connection known", func() bool { return p.metric("pilotwire_pusher_connections") == 1 })
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 4})
	testutil.Eventually(t, "pushed", func() bool { return equal(fe.ordersFor("c"), []uint64{4}) })
	if got := p.metric("pilotwire_pusher_restarts_total"); got != 2 {
		t.Errorf("pilotwire_pusher_restarts_total = %v, want 2 (one per failed term)", got)
	}
}

// TestConsumerRetriedWithinTheTerm: one consumer creation that fails (a
// request lost while the meta leader changed) is retried at once within
// the term, after a short timeout, rather than ending the term, which
// costs a campaign and, with nats.go's 5 s request timeout, seconds
// without pushes after a NATS node loss. Before, the term ended
// (pilotwire_pusher_restarts_total 1).
func TestConsumerRetriedWithinTheTerm(t *testing.T) {
	url := natstest.Start(t)
	var fails atomic.Int32
	fails.Store(1)
	p := runPusherHooks(t, url, Config{ID: "pa", LeaseTTL: 600 * time.Millisecond, FrontendTimeout: time.Minute}, &natstest.Hooks{
		Stream: func(s jetstream.Stream) jetstream.Stream {
			if s.CachedInfo().Config.Name != names.PushesStream() {
				return s
			}
			return failingConsumerStream{Stream: s, fails: &fails}
		},
	})
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "the connection known", func() bool { return p.metric("pilotwire_pusher_connections") == 1 })
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 4})
	testutil.Eventually(t, "pushed", func() bool { return equal(fe.ordersFor("c"), []uint64{4}) })
	if got := p.metric("pilotwire_pusher_restarts_total"); got != 0 {
		t.Errorf("pilotwire_pusher_restarts_total = %v, want 0 (retried within the term)", got)
	}
	if got := p.metric("pilotwire_pusher_consumer_retries_total"); got != 1 {
		t.Errorf("pilotwire_pusher_consumer_retries_total = %v, want 1", got)
	}
}
