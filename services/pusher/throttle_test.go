package pusher

import (
	"fmt"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/pushqueue"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestThrottleFromFrontendCores (issue 12 row 14): a frontend's throttle is
// sized from the cores its heartbeat reports, as Istio sizes it from the
// cores of the process that generates; PILOT_PUSH_THROTTLE overrides it.
func TestThrottleFromFrontendCores(t *testing.T) {
	tests := []struct {
		name     string
		throttle int // the pusher's --push-throttle; 0: derived
		cores    int32
		want     int
	}{
		{name: "one-core frontend", cores: 1, want: pushqueue.ThrottleFor(1)},
		{name: "eight-core frontend", cores: 8, want: pushqueue.ThrottleFor(8)},
		{name: "override", throttle: 3, cores: 8, want: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startPusher(t, Config{Throttle: tc.throttle, PushTimeout: time.Minute, FrontendTimeout: time.Minute, DrainTimeout: 100 * time.Millisecond})
			fe := newFrontend(t, h.url, "fe-1")
			fe.heartbeatCores(tc.cores)
			fe.setSilent(true)
			const conns = 80
			for i := range conns {
				fe.register(fmt.Sprintf("c%d", i), 0)
			}
			testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == conns })
			h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
			testutil.Eventually(t, "throttle full", func() bool { return h.metric("pilotwire_pusher_in_flight") == float64(tc.want) })
			sent := func() int {
				fe.mu.Lock()
				defer fe.mu.Unlock()
				return len(fe.orders)
			}
			testutil.Eventually(t, "orders in flight sent", func() bool { return sent() == tc.want })
			short := time.NewTimer(testutil.ShortTimeout)
			defer short.Stop()
			<-short.C
			if got := sent(); got != tc.want {
				t.Errorf("orders in flight = %d, want %d", got, tc.want)
			}
		})
	}
}
