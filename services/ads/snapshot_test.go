package ads

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestFrontendFromSnapshot: a frontend that starts from a snapshot of a
// compacted stream, and replays only what follows it, serves proxies
// byte-identical resources and versions to a frontend that replayed the
// whole history before compaction.
func TestFrontendFromSnapshot(t *testing.T) {
	f := startFrontend(t, nil) // a bystander: it only owns the NATS server
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	now := time.Now()
	// With compact forms, as the debouncer runs the snapshotter.
	snap := snapshot.New(snapshot.Options{JS: f.js, Names: f.names, Retention: time.Hour, Now: func() time.Time { return now }, Model: model.CompactRecord})
	defer snap.Close()

	// History before the first snapshot: services come, change and go.
	for i := range 6 {
		ns := []string{"shop", "web"}[i%2]
		name := fmt.Sprintf("svc-%d", i)
		f.publish(t, pb.Op_OP_ADD, "", "Service", service(ns, name, 80+i))
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice(ns, name, 8080, "10.1.0.1"))
		f.publish(t, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice(ns, name, 8080, "10.1.0.1", fmt.Sprintf("10.1.0.%d", 10+i)))
	}
	f.publish(t, pb.Op_OP_DELETE, "", "Service", service("shop", "svc-0", 80))
	f.publish(t, pb.Op_OP_DELETE, "discovery.k8s.io", "EndpointSlice", slice("shop", "svc-0", 8080))
	if _, err := snap.Step(ctx); err != nil {
		t.Fatal(err)
	}
	// More history, then a frontend that reads all of it.
	f.publish(t, pb.Op_OP_DELETE, "", "Service", service("web", "svc-1", 81))
	f.publish(t, pb.Op_OP_UPDATE, "", "Service", service("shop", "svc-2", 9082))
	f.publish(t, pb.Op_OP_ADD, "", "Service", service("shop", "svc-0", 80)) // back again
	f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("shop", "svc-0", 8080, "10.2.0.1"))
	// Both with their heaps readied, a ballast mapped in huge pages
	// whatever this kernel's mode: the model must come out the same.
	readyHeap := func(c *Config) {
		c.BootstrapHeap = true
		c.bootHeapOptions = func(h *bootHeap) {
			h.minBallast, h.thp, h.heapFree = 0, func() string { return "madvise" }, func() uint64 { return 0 }
		}
	}
	pct := gcPercent()
	full := runFrontend(t, f.url, "fe-full", func(c *Config) { readyHeap(c); c.fullReplay = true })

	// Past the retention window the snapshotter compacts what it covers.
	now = now.Add(2 * time.Hour)
	in, err := snap.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.js.Stream(ctx, f.names.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	st, err := info.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Msgs >= st.State.LastSeq {
		t.Fatalf("stream not compacted: %d records of %d", st.State.Msgs, st.State.LastSeq)
	}
	// The snapshot holds the compact forms the frontend starts from.
	sst, err := snapshot.Open(ctx, f.js, f.names)
	if err != nil || sst == nil {
		t.Fatalf("open snapshots: %v", err)
	}
	newest, err := sst.Latest(ctx, 0, time.Time{})
	if err != nil || newest == nil || newest.Seq != in.Seq {
		t.Fatalf("newest snapshot %v (%v), want the one at %d", newest, err, in.Seq)
	}
	forms := 0
	if err := sst.Read(ctx, *newest, func(r snapshot.Record) error {
		if r.Model != nil {
			forms++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if forms != in.Objects {
		t.Fatalf("snapshot of %d objects holds %d compact forms", in.Objects, forms)
	}
	// What follows the snapshot: the one started from it replays this only.
	f.publish(t, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("web", "svc-3", 8080, "10.3.0.1"))
	last := f.publish(t, pb.Op_OP_ADD, "", "Service", service("web", "svc-9", 99))
	fromSnap := runFrontend(t, f.url, "fe-snap", readyHeap)
	for _, fe := range []*frontend{full, fromSnap} {
		fe.waitApplied(t, last)
		if got := fe.gauge("pilotwire_ads_bootstrap_heap_ballast_bytes"); got <= 0 {
			t.Fatalf("%s: pilotwire_ads_bootstrap_heap_ballast_bytes = %v: the frontend did not ready its heap", fe.id, got)
		}
	}
	if got := gcPercent(); got != pct {
		t.Fatalf("GOGC %d once the frontend is ready, want the process's %d back", got, pct)
	}
	if got := fromSnap.gauge("pilotwire_ads_bootstrap_snapshot_seq"); got != float64(in.Seq) {
		t.Fatalf("frontend started from snapshot %v, want the one at %d", got, in.Seq)
	}
	if got := fromSnap.gauge("pilotwire_ads_bootstrap_snapshot_view"); got != 1 {
		t.Fatalf("pilotwire_ads_bootstrap_snapshot_view = %v: the frontend did not start from the snapshot's view", got)
	}
	if got := full.gauge("pilotwire_ads_bootstrap_snapshot_seq"); got != 0 {
		t.Fatalf("full-replay frontend started from snapshot %v", got)
	}
	if got := fromSnap.gauge("pilotwire_ads_snapshot_compact_forms_refused_total"); got != 0 {
		t.Fatalf("%v compact forms refused", got)
	}

	for _, node := range []*core.Node{
		{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"},
		{Id: "sidecar~10.1.0.10~b-0.shop~shop.svc.cluster.local"},
	} {
		want := fetchConfig(ctx, t, full.addr, node)
		got := fetchConfig(ctx, t, fromSnap.addr, node)
		for _, typ := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType} {
			w, g := want[typ], got[typ]
			if w.GetVersionInfo() != g.GetVersionInfo() {
				t.Errorf("%s %s: version %q from the snapshot, %q from the full replay", node.Id, typ, g.GetVersionInfo(), w.GetVersionInfo())
			}
			if len(w.GetResources()) == 0 || len(w.GetResources()) != len(g.GetResources()) {
				t.Errorf("%s %s: %d resources from the snapshot, %d from the full replay", node.Id, typ, len(g.GetResources()), len(w.GetResources()))
				continue
			}
			for i := range w.GetResources() {
				if !bytes.Equal(w.GetResources()[i].GetValue(), g.GetResources()[i].GetValue()) {
					t.Errorf("%s %s: resource %d differs", node.Id, typ, i)
				}
			}
		}
	}
}

// fetchConfig asks one ADS frontend for a node's clusters, their load
// assignments and its listeners, ACKing each (make before break).
func fetchConfig(ctx context.Context, t *testing.T, addr string, node *core.Node) map[string]*discovery.DiscoveryResponse {
	t.Helper()
	c := dial(ctx, t, addr, node)
	out := make(map[string]*discovery.DiscoveryResponse)
	ask := func(typ string, names []string) *discovery.DiscoveryResponse {
		c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names})
		r := c.recv()
		if r.GetTypeUrl() != typ {
			t.Fatalf("asked for %s, got %s", typ, r.GetTypeUrl())
		}
		c.send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		out[typ] = r
		return r
	}
	cds := ask(resource.ClusterType, nil)
	var eds []string
	for _, a := range cds.GetResources() {
		var cl cluster.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			t.Fatal(err)
		}
		if cl.GetType() == cluster.Cluster_EDS {
			eds = append(eds, cl.GetName())
		}
	}
	ask(resource.EndpointType, eds)
	ask(resource.ListenerType, nil)
	return out
}

// TestFrontendSkipsAnUnusableSnapshot: a snapshot the frontend cannot use
// is logged, counted and skipped; the frontend starts from the stream and
// serves the same model. Both cases failed before:
//   - a corrupt object under a snapshot's name: Run failed with "load
//     snapshot" and the frontend exited, on every restart, until someone
//     deleted the object;
//   - a snapshot whose sequence is past the change stream's last one (the
//     stream re-created under an old bucket): the frontend took the
//     snapshot's sequence as applied, consumed from the one after it, and
//     served an empty mesh.
func TestFrontendSkipsAnUnusableSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ahead   uint64 // the snapshot's sequence past the stream's last
		objects string
		body    string
		// behind: the snapshot is at seq 1 and the stream has lost the
		// records after it (limits removed them): the frontend cannot
		// start from it (before, it logged this but did not count it).
		behind bool
	}{
		{name: "corrupt", objects: "2", body: "not a snapshot"},
		{name: "ahead", ahead: 100, objects: "0", body: "PWSNAP1\n"},
		{name: "behind", behind: true, objects: "0", body: "PWSNAP1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFrontend(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
			defer cancel()
			if tc.behind {
				f.publish(t, pb.Op_OP_ADD, "", "Service", service("shop", "gone", 80))
				f.publish(t, pb.Op_OP_ADD, "", "Service", service("shop", "gone-too", 80))
			}
			first := f.publish(t, pb.Op_OP_ADD, "", "Service", service("shop", "cart", 80))
			last := f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("shop", "cart", 8080, "10.1.0.1"))
			if tc.behind {
				st, err := f.js.Stream(ctx, f.names.ChangesStream())
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Purge(ctx, jetstream.WithPurgeSequence(first)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := snapshot.Ensure(ctx, f.js, f.names, bus.StreamOptions{}); err != nil {
				t.Fatal(err)
			}
			os, err := f.js.ObjectStore(ctx, f.names.SnapshotBucket())
			if err != nil {
				t.Fatal(err)
			}
			seq := last + tc.ahead
			if tc.behind {
				seq = 1
			}
			if _, err := os.Put(ctx, jetstream.ObjectMeta{
				Name:     fmt.Sprintf("changes-%020d", seq),
				Metadata: map[string]string{"seq": fmt.Sprint(seq), "time": time.Now().UTC().Format(time.RFC3339Nano), "objects": tc.objects},
			}, strings.NewReader(tc.body)); err != nil {
				t.Fatal(err)
			}

			fe := runFrontend(t, f.url, "fe-"+tc.name, func(c *Config) { c.BootstrapHeap = true })
			fe.waitApplied(t, last)
			if got := fe.gauge("pilotwire_ads_bootstrap_snapshot_seq"); got != 0 {
				t.Fatalf("started from snapshot %v, want the stream", got)
			}
			if got := fe.gauge("pilotwire_ads_snapshot_unusable_total"); got != 1 {
				t.Fatalf("pilotwire_ads_snapshot_unusable_total = %v, want 1", got)
			}
			got := fetchConfig(ctx, t, fe.addr, &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"})
			if n := len(got[resource.EndpointType].GetResources()); n != 1 {
				t.Fatalf("%d load assignments, want the one of shop/cart", n)
			}
		})
	}
}
