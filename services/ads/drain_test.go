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

// TestDrainOnShutdown: a stopping frontend keeps serving its streams for
// the drain duration, then ends them with Unavailable so clients reconnect
// elsewhere, and removes itself from the registry.
func TestDrainOnShutdown(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-drain", func(c *Config) { c.DrainDuration = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	c.recv()
	f.waitRegistered(t, 1)

	start := time.Now()
	f.stop()
	_, err := c.stream.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stream ended with %v, want Unavailable", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stream ended %v after shutdown began, before the 300ms drain", d)
	}
	testutil.Eventually(t, "frontend deregistered", func() bool {
		kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
		if err != nil {
			return false
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return true // no keys at all
		}
		for range lister.Keys() {
			return false
		}
		return true
	})
}
