package ads

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// BenchmarkInitialSync: 500 state-of-the-world sidecars connect to one
// frontend at once, each on its own gRPC connection, and take the
// clusters, load assignments and listeners of a 300-service mesh (each
// response tens of KiB, as in a real mesh's initial sync). It reports the
// CPU of the whole process (frontend, NATS server, clients) per proxy and
// the response bytes per proxy.
func BenchmarkInitialSync(b *testing.B) {
	const proxies, services = 500, 300
	f := startFrontend(b, meshOf(b, services))
	var clusters []string
	for i := range services {
		clusters = append(clusters, fmt.Sprintf("outbound|80||s%03d.default.svc.cluster.local", i))
	}
	conns := make([]*grpc.ClientConn, proxies)
	for i := range conns {
		cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		cc.Connect()
		conns[i] = cc
	}
	var cpu time.Duration
	var bytes int64
	b.ReportAllocs()
	b.ResetTimer()
	for round := range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c0 := processCPU()
		var wg sync.WaitGroup
		errs := make(chan error, proxies)
		var mu sync.Mutex
		for i, cc := range conns {
			wg.Go(func() {
				n, err := syncOnce(ctx, cc, fmt.Sprintf("sidecar~10.1.%d.%d~p%d-%d.bench~bench.svc.cluster.local", i/250, i%250+1, i, round), clusters)
				if err != nil {
					errs <- err
				}
				mu.Lock()
				bytes += n
				mu.Unlock()
			})
		}
		wg.Wait()
		cpu += processCPU() - c0
		cancel()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N*proxies), "cpu-µs/proxy")
	b.ReportMetric(float64(bytes)/1024/float64(b.N*proxies), "KiB/proxy")
}

// syncOnce opens a stream on cc as node, takes the clusters, the load
// assignments of clusters and the listeners, ACKs each and closes the
// stream. It returns the bytes of the responses.
func syncOnce(ctx context.Context, cc *grpc.ClientConn, node string, clusters []string) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return 0, err
	}
	n := sidecar()
	n.Id = node
	for _, req := range []*discovery.DiscoveryRequest{
		{Node: n, TypeUrl: resource.ClusterType},
		{TypeUrl: resource.EndpointType, ResourceNames: clusters},
		{TypeUrl: resource.ListenerType},
	} {
		if err := st.Send(req); err != nil {
			return 0, err
		}
	}
	var bytes int64
	for want := map[string]bool{resource.ClusterType: true, resource.EndpointType: true, resource.ListenerType: true}; len(want) > 0; {
		r, err := st.Recv()
		if err != nil {
			return bytes, fmt.Errorf("%s: %w", node, err)
		}
		bytes += int64(proto.Size(r))
		delete(want, r.GetTypeUrl())
		var names []string
		if r.GetTypeUrl() == resource.EndpointType {
			names = clusters
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names}); err != nil {
			return bytes, err
		}
	}
	return bytes, st.CloseSend()
}
