package ads

import (
	"context"
	"errors"
	"fmt"
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
	ctx, _, _, kv := registryBucket(t)
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

// TestRegistryFlushWritesKVOperations: the flush publishes to the bucket
// itself, asynchronously, so its writes must be what jetstream.KeyValue
// writes: a put is the entry, a removal a purge that a watcher sees as
// one, with a marker the server deletes after bus.RegistryMarkerTTL.
func TestRegistryFlushWritesKVOperations(t *testing.T) {
	ctx, js, names, kv := registryBucket(t)
	reg := prometheus.NewRegistry()
	r := &registry{kv: kv, js: js, fe: &pb.FrontendInfo{Id: "fe-x"}, log: slog.New(slog.DiscardHandler), metrics: newMetrics(reg),
		notify: make(chan struct{}, 1), dirty: map[string]*pb.ConnectionInfo{}}
	const conns = 600 // more than one window
	for i := range conns {
		r.put(&pb.ConnectionInfo{ConnId: fmt.Sprintf("c%d", i), Frontend: "fe-x"})
	}
	r.flush(ctx)
	if got := len(connKeys(t, kv, "fe-x")); got != conns {
		t.Fatalf("%d entries after the flush, want %d", got, conns)
	}
	e, err := kv.Get(ctx, bus.ConnKey("fe-x", "c7"))
	if err != nil {
		t.Fatal(err)
	}
	ci := &pb.ConnectionInfo{}
	if err := proto.Unmarshal(e.Value(), ci); err != nil || ci.GetConnId() != "c7" {
		t.Fatalf("entry c7 = %v (%v), want connection c7", ci, err)
	}

	w, err := kv.Watch(ctx, bus.ConnKey("fe-x", "c7"), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r.remove("c7")
	r.flush(ctx)
	select {
	case u := <-w.Updates():
		if u == nil || u.Operation() != jetstream.KeyValuePurge {
			t.Fatalf("watcher saw %v, want a purge of c7", u)
		}
	case <-ctx.Done():
		t.Fatal("the watcher saw no removal of c7")
	}
	if _, err := kv.Get(ctx, bus.ConnKey("fe-x", "c7")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("Get(c7) after the removal: %v, want ErrKeyNotFound", err)
	}
	stream, err := js.Stream(ctx, "KV_"+names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	marker, err := stream.GetLastMsgForSubject(ctx, bus.KVKeySubject(names.RegistryBucket(), bus.ConnKey("fe-x", "c7")))
	if err != nil {
		t.Fatal(err)
	}
	if got := marker.Header.Get(jetstream.MsgTTLHeader); got != bus.RegistryMarkerTTL.String() {
		t.Errorf("the removal marker's %s = %q, want %q", jetstream.MsgTTLHeader, got, bus.RegistryMarkerTTL)
	}
	if got := testutil.Metric(reg, "pilotwire_ads_registry_errors_total"); got != 0 {
		t.Errorf("pilotwire_ads_registry_errors_total = %v, want 0", got)
	}
	if got := testutil.Metric(reg, "pilotwire_ads_registry_writes_total"); got != conns+1 {
		t.Errorf("pilotwire_ads_registry_writes_total = %v, want %d entries and a removal", got, conns+1)
	}
}

// TestRegistryFlushKeepsFailedWrites: writes the stream does not take are
// counted, logged and kept for the next flush, unless newer state came.
func TestRegistryFlushKeepsFailedWrites(t *testing.T) {
	ctx, js, names, kv := registryBucket(t)
	// The bucket's stream is gone: no write gets an ack.
	if err := js.DeleteKeyValue(ctx, names.RegistryBucket()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := &registry{kv: kv, js: js, fe: &pb.FrontendInfo{Id: "fe-x"}, log: slog.New(slog.DiscardHandler), metrics: newMetrics(reg),
		notify: make(chan struct{}, 1), dirty: map[string]*pb.ConnectionInfo{}}
	r.put(&pb.ConnectionInfo{ConnId: "c1"})
	r.remove("c2")
	r.flush(ctx)
	if got := testutil.Metric(reg, "pilotwire_ads_registry_errors_total"); got != 2 {
		t.Errorf("pilotwire_ads_registry_errors_total = %v, want 2", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ci, ok := r.dirty["c1"]; !ok || ci.GetConnId() != "c1" {
		t.Errorf("c1's entry not kept for the next flush: %v", r.dirty)
	}
	if ci, ok := r.dirty["c2"]; !ok || ci != nil {
		t.Errorf("c2's removal not kept for the next flush: %v", r.dirty)
	}
}

// TestReregistrationFollowsTheHeartbeat (fault matrix, a frontend cut from
// NATS): a frontend whose entry was removed (a pusher timed it out)
// re-registered its connections before it wrote its heartbeat again. With
// the connections' entries written asynchronously they reached the pusher
// first, the pusher ordered pushes to them, and the heartbeat that came
// next, counting the NATS reconnect, made it resync those 70 orders as
// lost although they were sent after the reconnect. The heartbeat is now
// written first: when the connections are gathered for re-registration
// the frontend's entry is already back.
func TestReregistrationFollowsTheHeartbeat(t *testing.T) {
	ctx, js, _, kv := registryBucket(t)
	entryBack := make(chan bool, 1)
	r := &registry{kv: kv, js: js, fe: &pb.FrontendInfo{Id: "fe-x"}, log: slog.New(slog.DiscardHandler), metrics: newMetrics(prometheus.NewRegistry()),
		notify: make(chan struct{}, 1), dirty: map[string]*pb.ConnectionInfo{},
		connCount: func() int { return 1 }, applied: func() uint64 { return 0 },
		all: func() []*pb.ConnectionInfo {
			_, err := kv.Get(ctx, bus.FrontendKey("fe-x"))
			entryBack <- err == nil
			return []*pb.ConnectionInfo{{ConnId: "c1", Frontend: "fe-x"}}
		}}
	rev := r.heartbeat(ctx, 0)
	if rev == 0 {
		t.Fatal("the first heartbeat was not written")
	}
	// A pusher timed the frontend out and removed its entry.
	if err := bus.RemoveKey(ctx, kv, bus.FrontendKey("fe-x"), bus.RegistryMarkerTTL); err != nil {
		t.Fatal(err)
	}
	if r.heartbeat(ctx, rev) == 0 {
		t.Fatal("the heartbeat after the removal was not written")
	}
	select {
	case back := <-entryBack:
		if !back {
			t.Fatal("the connections were gathered for re-registration before the frontend's entry was written again")
		}
	default:
		t.Fatal("no re-registration after the entry was removed")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.dirty["c1"]; !ok {
		t.Fatalf("connection c1 not marked for re-registration: %v", r.dirty)
	}
}

// registryBucket starts a NATS server with the registry bucket and returns
// a context bounded by the test timeout, a JetStream context, the names
// and the bucket.
func registryBucket(t *testing.T) (context.Context, jetstream.JetStream, bus.Names, jetstream.KeyValue) {
	t.Helper()
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	_, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	kv, err := bus.EnsureKV(ctx, js, names.RegistryConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, names, kv
}
