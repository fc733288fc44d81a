package xdsgen

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
)

// backend is a gRPC server on loopback counting the RPCs it serves.
type backend struct {
	port  int32
	calls atomic.Int64
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{port: int32(lis.Addr().(*net.TCPAddr).Port)}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return b
}

// startADS serves the given sets to every node over ADS on loopback, with
// go-control-plane's snapshot cache standing in for pilotwire's frontend.
func startADS(t *testing.T, node string, sets ...*Set) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	byType := make(map[resource.Type][]types.Resource)
	for _, s := range sets {
		for _, r := range s.Resources {
			byType[s.TypeURL] = append(byType[s.TypeURL], r.Msg)
		}
	}
	snap, err := cache.NewSnapshot("1", byType)
	if err != nil {
		t.Fatal(err)
	}
	c := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	if err := c.SetSnapshot(ctx, node, snap); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, server.NewServer(ctx, c, nil))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		cancel()
	})
	return lis.Addr().String()
}

// TestGRPCClientAcceptsResources runs grpc-go's own xDS client against the
// generated resources: it must resolve xds:///<host>:<port> through
// LDS→RDS→CDS→EDS and spread RPCs over endpoints in two localities.
func TestGRPCClientAcceptsResources(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	b1, b2 := startBackend(t), startBackend(t)
	const svcPort = 50051
	greeter := svc("shop", "greeter", "10.0.0.1", port("grpc", svcPort,
		endpoint("127.0.0.1", b1.port, "z1", "c1"),
		endpoint("127.0.0.1", b2.port, "z2", "c2"),
	))
	// Other services in the mesh, so the client must pick by name.
	m := mesh(t, greeter, svc("shop", "other", "10.0.0.2", port("grpc", svcPort, endpoint("127.0.0.9", 1, "", "c1"))))

	var sets []*Set
	for _, typeURL := range TypeURLs() {
		sets = append(sets, generate(t, m, GRPC, typeURL))
	}
	const node = "grpc-client-1"
	ads := startADS(t, node, sets...)

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "metadata": {"GENERATOR": "grpc"}}
	}`, ads, node)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf("xds:///%s:%d", greeter.Hostname, svcPort)
	cc, err := grpc.NewClient(target, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	client := healthpb.NewHealthClient(cc)
	for b1.calls.Load() == 0 || b2.calls.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("RPCs did not reach both endpoints (%d, %d): %v", b1.calls.Load(), b2.calls.Load(), ctx.Err())
		}
		callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := client.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		callCancel()
		if err != nil {
			t.Fatalf("Check via %s: %v", target, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check: status %v", resp.GetStatus())
		}
	}
}
