package ads

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// bareADS is the baseline: a gRPC ADS server whose handler only receives.
type bareADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
}

func (bareADS) StreamAggregatedResources(s grpcSotW) error {
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// openIdle opens n streams to addr; each subscribes to CDS and LDS, and
// to the load assignments and routes named in subs (as Envoy does after
// CDS and LDS) and, when answered, ACKs, so that it is idle and fully set
// up.
func openIdle(ctx context.Context, tb testing.TB, addr string, n int, answered bool, subs ...subscription) []*client {
	var cs []*client
	for range n {
		cs = append(cs, dial(ctx, tb, addr, sidecar()))
	}
	all := append([]subscription{{typ: resource.ClusterType}, {typ: resource.ListenerType}}, subs...)
	for _, c := range cs {
		for _, sub := range all {
			c.send(&discovery.DiscoveryRequest{TypeUrl: sub.typ, ResourceNames: sub.names})
			if answered {
				r := c.recv()
				c.send(&discovery.DiscoveryRequest{TypeUrl: sub.typ, ResourceNames: sub.names, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
			}
		}
	}
	return cs
}

// subscription is a type and the resource names asked for.
type subscription struct {
	typ   string
	names []string
}

// countingADS is bareADS that counts requests, to know when streams are up.
type countingADS struct {
	bareADS
	got chan struct{}
}

func (c countingADS) StreamAggregatedResources(s grpcSotW) error {
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
		c.got <- struct{}{}
	}
}

// BenchmarkIdleStreamMemory reports the heap and stack held per idle
// stream (client and server ends, both in this process, after a GC) by a
// bare gRPC ADS server and by a frontend, and the frontend's extra cost per
// stream. The bare server only receives; the frontend's streams are synced
// and ACKed: on a 4-service mesh with CDS and LDS, and on a 100-service x
// 10-endpoint mesh with CDS, LDS, the 100 load assignments and the port-80
// routes (an Envoy sidecar's subscriptions).
//
//	go test ./services/ads -run '^$' -bench BenchmarkIdleStreamMemory -benchtime 1x -count 3
func BenchmarkIdleStreamMemory(b *testing.B) {
	const n, warm = 500, 20
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	// The bare baseline runs twice; the first run warms what any first
	// gRPC server in a process allocates, the second is reported.
	var bare float64
	for range 2 {
		bare = measureBare(ctx, b, n, warm)
	}

	b.Run("mesh=4x0", func(b *testing.B) {
		f := startFrontend(b, func(f *frontend) {
			for _, name := range []string{"a", "b", "c", "d"} {
				f.publish(b, pb.Op_OP_ADD, "", "Service", service("default", name, 80))
			}
		})
		reportIdle(ctx, b, f, n, warm, bare)
	})
	b.Run("mesh=100x10", func(b *testing.B) {
		const services = 100
		var clusters []string
		f := startFrontend(b, meshOf(b, services))
		for i := range services {
			clusters = append(clusters, fmt.Sprintf("outbound|80||s%03d.default.svc.cluster.local", i))
		}
		reportIdle(ctx, b, f, n, warm, bare, subscription{resource.EndpointType, clusters}, subscription{resource.RouteType, []string{"80"}})
	})
}

// reportIdle measures n idle streams on f, after warm others.
func reportIdle(ctx context.Context, b *testing.B, f *frontend, n, warm int, bare float64, subs ...subscription) {
	openIdle(ctx, b, f.addr, warm, true, subs...)
	f.waitRegistered(b, warm)
	before := heapInUse()
	openIdle(ctx, b, f.addr, n, true, subs...)
	f.waitRegistered(b, warm+n)
	ours := float64(heapInUse()-before) / float64(n)
	for range b.N {
		// The measurement above is the benchmark; b.N is irrelevant.
	}
	b.ReportMetric(bare/1024, "KiB/bare-stream")
	b.ReportMetric(ours/1024, "KiB/stream")
	b.ReportMetric((ours-bare)/1024, "KiB/extra-stream")
}

// measureBare returns the heap per idle stream of a bare gRPC ADS server.
func measureBare(ctx context.Context, b *testing.B, n, warm int) float64 {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan struct{}, 2*n)
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, countingADS{got: got})
	go func() { _ = gs.Serve(lis) }()
	// Warm gRPC's buffer pools first, then measure n more streams.
	warmed := openIdle(ctx, b, lis.Addr().String(), warm, false)
	for range 2 * warm {
		<-got
	}
	before := heapInUse()
	cs := openIdle(ctx, b, lis.Addr().String(), n, false)
	for range 2 * n {
		<-got
	}
	bare := float64(heapInUse()-before) / float64(n)
	for _, c := range append(cs, warmed...) {
		c.cc.Close()
	}
	gs.Stop()

	return bare
}
