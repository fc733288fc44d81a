package pusher

import (
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestDrainKeepsTheLease (issue 12 row 5): a pusher that drains its queue on
// shutdown keeps renewing its lease, so no standby becomes active while it
// still dispatches; the standby takes over once it has released.
func TestDrainKeepsTheLease(t *testing.T) {
	url := natstest.Start(t)
	const ttl = 600 * time.Millisecond
	a := runPusher(t, url, Config{ID: "pa", LeaseTTL: ttl, Throttle: 1, PushTimeout: time.Minute, FrontendTimeout: time.Minute, DrainTimeout: 4 * ttl})
	testutil.Eventually(t, "a active", func() bool { return a.metric("pilotwire_pusher_leader") == 1 })
	b := runPusher(t, url, Config{ID: "pb", LeaseTTL: ttl, FrontendTimeout: time.Minute})
	fe := newFrontend(t, url, "fe-1")
	fe.setSilent(true)
	fe.register("c1", 0)
	fe.register("c2", 0)
	testutil.Eventually(t, "a knows the connections", func() bool { return a.metric("pilotwire_pusher_connections") == 2 })
	a.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	// Throttle 1 and no dones: one connection in flight, one queued, so the
	// drain lasts its whole timeout (four TTLs).
	testutil.Eventually(t, "one ordered", func() bool { return len(fe.ordersFor("c1"))+len(fe.ordersFor("c2")) == 1 })

	stopped := make(chan struct{})
	go func() { defer close(stopped); a.stop() }()
	sample := time.NewTicker(5 * time.Millisecond)
	defer sample.Stop()
	for {
		select {
		case <-stopped:
			testutil.Eventually(t, "b active after a released", func() bool { return b.metric("pilotwire_pusher_leader") == 1 })
			return
		case <-sample.C:
		}
		if a.metric("pilotwire_pusher_leader") == 1 && b.metric("pilotwire_pusher_leader") == 1 {
			testutil.Receive(t, stopped, "a's stop")
			t.Fatal("b active while a still drains")
		}
	}
}
