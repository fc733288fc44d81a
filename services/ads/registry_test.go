package ads

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
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

// connKeys lists the registry keys of a frontend's connections.
func connKeys(t testing.TB, kv jetstream.KeyValue, fe string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	lister, err := kv.ListKeysFiltered(ctx, "conn."+fe+".>")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// TestRestartedFrontendUsesNewConnIDs: a frontend killed with SIGKILL
// leaves its connections' entries (and the pusher's in-flight orders for
// them) behind; the same frontend started again must not give its new
// connections those ids, or the pusher takes a new proxy for the dead
// one and waits out the dead one's push timeout before pushing it; and it
// must remove the dead ones' entries, or the pusher keeps them, and their
// in-flight orders hold the frontend's throttle for the push timeout
// (found by the fault matrix: 12 s, then 26 s, to converge after a
// frontend was killed).
func TestRestartedFrontendUsesNewConnIDs(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	first := runFrontend(t, url, "fe-x", nil)
	c := dial(ctx, t, first.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	c.recv()
	first.waitRegistered(t, 1)
	kv, err := first.js.KeyValue(ctx, first.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	before := connKeys(t, kv, "fe-x")
	entry, err := kv.Get(ctx, before[0])
	if err != nil {
		t.Fatal(err)
	}
	first.stop()
	// What SIGKILL leaves behind: the entry, not removed.
	testutil.Eventually(t, "first frontend deregistered", func() bool {
		_, err := kv.Get(ctx, bus.FrontendKey("fe-x")) // removed last
		return err != nil
	})
	if _, err := kv.Put(ctx, before[0], entry.Value()); err != nil {
		t.Fatal(err)
	}

	second := runFrontend(t, url, "fe-x", nil)
	c2 := dial(ctx, t, second.addr, sidecar())
	c2.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	c2.recv()
	// The dead connection's entry is removed at start (else the pusher
	// keeps pushing it, and its in-flight orders hold the frontend's
	// throttle slots until they time out), and the new one has a new id.
	testutil.Eventually(t, "the dead connection's entry removed, the new one registered", func() bool {
		after := connKeys(t, kv, "fe-x")
		return len(after) == 1 && after[0] != before[0]
	})
}

// TestStaleRemovalKeepsThisProcessConnections: the removal of an earlier
// process's connection entries runs while this one serves, so it leaves
// the entries of this process's own connections (ids with its
// incarnation) alone.
func TestStaleRemovalKeepsThisProcessConnections(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	_, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	kv, err := bus.EnsureKV(ctx, js, names.RegistryConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"fe-x-old-1", "fe-x-old-2", "fe-x-new-1"} {
		if _, err := kv.Put(ctx, bus.ConnKey("fe-x", c), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	r := &registry{kv: kv, fe: &pb.FrontendInfo{Id: "fe-x"}, ownConns: "fe-x-new-", log: slog.New(slog.DiscardHandler), metrics: newMetrics(prometheus.NewRegistry())}
	r.removeStale(ctx)
	if got, want := connKeys(t, kv, "fe-x"), []string{bus.ConnKey("fe-x", "fe-x-new-1")}; !slices.Equal(got, want) {
		t.Fatalf("entries left %v, want %v", got, want)
	}
}

// TestReconnectWritesTheHeartbeatAtOnce: when the frontend's NATS
// connection comes back, its heartbeat is written at once and counts the
// reconnect, so the pusher resyncs the orders that reached nobody while it
// was away (services/pusher TestOrdersLostWhileAFrontendWasAwayAreResent)
// without waiting for the next heartbeat, here an hour away.
func TestReconnectWritesTheHeartbeatAtOnce(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-rc", func(c *Config) { c.HeartbeatInterval = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	reconnects := func() (uint64, bool) {
		e, err := kv.Get(ctx, bus.FrontendKey("fe-rc"))
		if err != nil {
			return 0, false
		}
		info := &pb.FrontendInfo{}
		if err := proto.Unmarshal(e.Value(), info); err != nil {
			t.Fatal(err)
		}
		return info.GetNatsReconnects(), true
	}
	testutil.Eventually(t, "the first heartbeat", func() bool { _, ok := reconnects(); return ok })
	if n, _ := reconnects(); n != 0 {
		t.Fatalf("nats_reconnects = %d before any reconnect", n)
	}
	if err := f.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a heartbeat counting the reconnect", func() bool { n, _ := reconnects(); return n == 1 })
}
