package ads

import (
	"context"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestAdmissionWaitsForASlot: with one syncing slot, a second stream is
// not refused but waits until the first stream's client ACKs its first
// response, and is then served.
func TestAdmissionWaitsForASlot(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-slots", func(c *Config) { c.SyncingStreams, c.AdmissionHold = 1, time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	first := dial(ctx, t, f.addr, sidecar())
	first.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	r := first.recv()

	second := dial(ctx, t, f.addr, sidecar())
	got := make(chan error, 1)
	go func() {
		if err := second.stream.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: sidecar()}); err != nil {
			got <- err
			return
		}
		_, err := second.stream.Recv()
		got <- err
	}()
	testutil.Eventually(t, "second stream waiting", func() bool { return f.gauge("pilotwire_ads_streams_waiting") == 1 })
	short := time.NewTimer(testutil.ShortTimeout)
	defer short.Stop()
	select {
	case err := <-got:
		t.Fatalf("second stream answered (%v) while the only slot was held", err)
	case <-short.C:
	}
	first.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
	if err := <-got; err != nil {
		t.Fatalf("second stream after the first ACK: %v, want served", err)
	}
	if n := f.gauge("pilotwire_ads_streams_rejected_total"); n != 0 {
		t.Errorf("rejected streams = %v, want 0", n)
	}
}

// TestAdmissionWaitBounded: a stream that waits longer than AdmissionWait
// for a slot is refused with ResourceExhausted, and counted.
func TestAdmissionWaitBounded(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-wait", func(c *Config) {
		c.SyncingStreams, c.AdmissionHold, c.AdmissionWait = 1, time.Minute, 200*time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	first := dial(ctx, t, f.addr, sidecar())
	first.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	first.recv()
	second := dial(ctx, t, f.addr, sidecar())
	_ = second.stream.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: sidecar()})
	if _, err := second.stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted after the wait", err)
	}
	if n := f.gauge("pilotwire_ads_streams_rejected_total"); n != 1 {
		t.Errorf("rejected streams = %v, want 1", n)
	}
}
