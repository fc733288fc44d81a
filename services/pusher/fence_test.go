package pusher

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// pausableKV is a lease bucket whose renewals hang while paused, as they
// would for a process stopped by SIGSTOP or a long GC pause.
type pausableKV struct {
	jetstream.KeyValue
	paused *atomic.Bool
}

func (kv pausableKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if kv.paused.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return kv.KeyValue.Update(ctx, key, value, last)
}

// TestPausedHolderIsFenced (issue 12 row 5): the active pusher is paused
// past its lease TTL in the middle of a send (its renewals hang, its
// dispatcher sits just before the publish); a standby takes over and
// pushes; then the paused one wakes and publishes what it held. The
// frontend must get each push once and in order: the late batch carries
// the older lease revision and is dropped.
func TestPausedHolderIsFenced(t *testing.T) {
	url := natstest.Start(t)
	var paused atomic.Bool
	var hold atomic.Bool
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	aCfg := Config{ID: "pa", LeaseTTL: 600 * time.Millisecond, FrontendTimeout: time.Minute, beforeSend: func(*pb.PushOrderBatch) {
		if hold.Load() {
			once.Do(func() { close(held) })
			<-release
		}
	}}
	a := runPusherFault(t, url, aCfg, names.LeaseConfig(bus.StreamOptions{}).Bucket, func(kv jetstream.KeyValue) jetstream.KeyValue {
		return pausableKV{KeyValue: kv, paused: &paused}
	})
	// A failing test must not leave a's dispatcher held: its stop (an
	// earlier cleanup, so run after this one) waits for it.
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhold)
	testutil.Eventually(t, "a active", func() bool { return a.metric("pilotwire_pusher_leader") == 1 })
	b := runPusher(t, url, Config{ID: "pb", LeaseTTL: 600 * time.Millisecond, FrontendTimeout: time.Minute})
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "a knows the connection", func() bool { return a.metric("pilotwire_pusher_connections") == 1 })
	a.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Eventually(t, "pushed by a", func() bool { return equal(fe.ordersFor("c"), []uint64{1}) })

	// Pause a in the middle of its next send.
	hold.Store(true)
	paused.Store(true)
	a.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	heldTimer := time.NewTimer(testutil.DefaultTimeout)
	defer heldTimer.Stop()
	select {
	case <-held:
	case <-heldTimer.C:
		t.Fatal("a never reached its send of the second push")
	}
	testutil.Eventually(t, "b active", func() bool { return b.metric("pilotwire_pusher_leader") == 1 })
	testutil.Eventually(t, "pushed by b", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 2}) })
	b.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "pushed by b again", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 2, 3}) })

	// a wakes up and sends the order it held (through 2, after 3).
	unhold()
	paused.Store(false)
	testutil.Eventually(t, "late batch dropped", func() bool {
		fe.mu.Lock()
		defer fe.mu.Unlock()
		return fe.dropped == 1 || len(fe.orders) > 3
	})
	if got := fe.ordersFor("c"); !equal(got, []uint64{1, 2, 3}) {
		t.Errorf("orders = %v, want [1 2 3]: each push once, in order", got)
	}
}
