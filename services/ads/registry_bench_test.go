package ads

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/startupstream"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// BenchmarkRegistryFlush: one flush of 5,000 new connections' entries
// into the registry bucket on an embedded NATS server, as after 5,000
// proxies connected at once. The server's CPU is this process's.
func BenchmarkRegistryFlush(b *testing.B) {
	const conns = 5000
	url := natstest.Start(b)
	_, js := natstest.Connect(b, url)
	names := bus.Names{Prefix: "pw"}
	kv, err := bus.EnsureKV(b.Context(), js, names.RegistryConfig(bus.StreamOptions{}))
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := &registry{kv: kv, js: js, fe: &pb.FrontendInfo{Id: "fe"}, log: slog.New(slog.DiscardHandler), metrics: newMetrics(reg)}
	infos := make([]*pb.ConnectionInfo, conns)
	for i := range infos {
		ci := &pb.ConnectionInfo{ConnId: fmt.Sprintf("fe-mx5ddmeb-%d", i), Frontend: "fe", NodeId: fmt.Sprintf("sidecar~10.0.%d.%d~p%d.ns~ns.svc.cluster.local", i/256, i%256, i)}
		for _, typ := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
			ci.Watches = append(ci.Watches, &pb.Watch{TypeUrl: typ, SentVersion: "9da3e7ff2da4bf738dda33b06a6e8195", AckedVersion: "9da3e7ff2da4bf738dda33b06a6e8195"})
		}
		infos[i] = ci
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		r.dirty = make(map[string]*pb.ConnectionInfo, conns)
		for _, ci := range infos {
			r.dirty[ci.GetConnId()] = ci
		}
		b.StartTimer()
		c0 := startupstream.CPUTime()
		r.flush(b.Context())
		cpu += startupstream.CPUTime() - c0
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*conns)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(b.N*conns)/cpu.Seconds(), "entries/cpu-s")
	if e := testutil.Metric(reg, "pilotwire_ads_registry_errors_total"); e != 0 {
		b.Fatalf("%v registry errors", e)
	}
}
