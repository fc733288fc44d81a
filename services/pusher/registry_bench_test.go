package pusher

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// entry is a registry entry as the KV watcher hands it over.
type entry struct {
	jetstream.KeyValueEntry
	key   string
	value []byte
	rev   uint64
}

func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// bareRegistryPusher is a Pusher with what applying registry entries uses.
func bareRegistryPusher() *Pusher {
	return &Pusher{
		log:       slog.New(slog.DiscardHandler),
		m:         newMetrics(prometheus.NewRegistry()),
		now:       time.Now,
		frontends: make(map[string]time.Time),
		conns:     make(map[string]*connState),
		inflight:  make(map[uint64]*inflight),
	}
}

// sidecarEntries are the registry entries of n Envoy sidecars on one
// frontend, as a frontend writes them: CDS and LDS wildcard, EDS for the
// mesh's 100 clusters, RDS for one route.
func sidecarEntries(tb testing.TB, n int) []entry {
	eds := make([]string, 100)
	for i := range eds {
		eds[i] = fmt.Sprintf("outbound|80||svc-%03d.ns-%d.svc.cluster.local", i, i%10)
	}
	out := make([]entry, n)
	for i := range out {
		id := fmt.Sprintf("conn-%05d", i)
		info := &pb.ConnectionInfo{
			ConnId: id, Frontend: "fe-1", NodeId: fmt.Sprintf("sidecar~10.0.%d.%d~pod-%d.ns-1~ns-1.svc.cluster.local", i/250, i%250, i),
			Namespace: "ns-1", ClusterId: "c1", ProxyType: "sidecar", Generator: "envoy", SyncedSeq: 10,
			Watches: []*pb.Watch{
				{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Wildcard: true, AckedVersion: "v10", SentVersion: "v10", Nonce: "n1"},
				{TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", Names: eds, AckedVersion: "v10", SentVersion: "v10", Nonce: "n2"},
				{TypeUrl: "type.googleapis.com/envoy.config.listener.v3.Listener", Wildcard: true, AckedVersion: "v10", SentVersion: "v10", Nonce: "n3"},
				{TypeUrl: "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", Names: []string{"80"}, AckedVersion: "v10", SentVersion: "v10", Nonce: "n4"},
			},
			Scope: &pb.Scope{Seq: 10, All: true, RootNamespace: "istio-system"},
		}
		b, err := proto.Marshal(info)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = entry{key: bus.ConnKey("fe-1", id), value: b, rev: uint64(i + 1)}
	}
	return out
}

// BenchmarkApplyRegistryEntry is the pusher taking in the registry
// entries of a 5,000-sidecar frontend (each a new connection), as during
// its initial sync: the time per entry, and the heap each connection holds
// afterwards, once a push has also indexed its watches for scoping.
//
//	go test ./services/pusher -run '^$' -bench BenchmarkApplyRegistryEntry -count 5
func BenchmarkApplyRegistryEntry(b *testing.B) {
	const conns = 5000
	entries := sidecarEntries(b, conns)
	b.ReportAllocs()
	var kept uint64
	for b.Loop() {
		b.StopTimer()
		p := bareRegistryPusher()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for _, e := range entries {
			p.applyEntry(e)
		}
		b.StopTimer()
		// A push scopes every connection by the load assignments it
		// watches: that index is built once per entry and kept.
		for _, c := range p.conns {
			c.watchedEDS()
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		kept = after.HeapAlloc - before.HeapAlloc
		if len(p.conns) != conns {
			b.Fatalf("pusher knows %d connections, want %d", len(p.conns), conns)
		}
		runtime.KeepAlive(p)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*conns), "ns/entry")
	b.ReportMetric(float64(kept)/conns, "heap-B/conn")
}
