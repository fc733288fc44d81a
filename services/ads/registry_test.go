package ads

import (
	"context"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// TestReregistersWhenTimedOut: a pusher that times a frontend out removes
// its entries; the frontend's next heartbeat notices and registers its
// connections again, so the pusher knows them once more.
func TestReregistersWhenTimedOut(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-re", func(c *Config) { c.HeartbeatInterval = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	c.recv()
	f.waitRegistered(t, 1)

	kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	// What a pusher does to a frontend it declared dead.
	lister, err := kv.ListKeysFiltered(ctx, "conn.fe-re.>")
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, bus.FrontendKey("fe-re")); err != nil {
		t.Fatal(err)
	}
	f.waitRegistered(t, 1)
	testutil.Eventually(t, "re-registration counted", func() bool { return f.gauge("pilotwire_ads_reregistrations_total") >= 1 })
	if _, err := kv.Get(ctx, bus.FrontendKey("fe-re")); err != nil {
		t.Errorf("frontend entry not written again: %v", err)
	}
}
