package xdsgen

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// stoppableBackend is a health server on loopback counting its RPCs.
type stoppableBackend struct {
	port  int32
	calls atomic.Int64
	srv   *grpc.Server
}

func startStoppable(t *testing.T) *stoppableBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &stoppableBackend{port: int32(lis.Addr().(*net.TCPAddr).Port)}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		b.calls.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(b.srv, health.NewServer())
	go func() { _ = b.srv.Serve(lis) }()
	t.Cleanup(b.srv.Stop)
	return b
}

// TestGRPCLocalityFailover runs grpc-go's xDS client in locality
// us-east/us-east-a against a service with endpoints in its zone, its
// region and another region (Node topology labels) and a DestinationRule
// with outlier detection: every RPC goes to its zone's endpoint; once that
// one is gone, to its region's, never to the other region's.
func TestGRPCLocalityFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	zone, region, far := startStoppable(t), startStoppable(t), startStoppable(t)
	const svcPort = 50051
	var recs []*pb.ChangeRecord
	for _, n := range []struct{ name, region, zone string }{{"n-a", "us-east", "us-east-a"}, {"n-b", "us-east", "us-east-b"}, {"n-eu", "eu-west", "eu-west-a"}} {
		recs = append(recs, objRecord(t, "", model.KindNode, "", n.name, map[string]any{
			"metadata": map[string]any{"labels": map[string]any{model.LabelRegion: n.region, model.LabelZone: n.zone}},
		}))
	}
	recs = append(recs, objRecord(t, "", model.KindService, "shop", "greeter", map[string]any{
		"spec": map[string]any{"clusterIP": "10.0.0.1", "ports": []any{map[string]any{"name": "grpc", "port": svcPort}}},
	}))
	// One slice per backend: they share an address, not a port.
	for i, e := range []struct {
		b    *stoppableBackend
		node string
	}{{zone, "n-a"}, {region, "n-b"}, {far, "n-eu"}} {
		eps := []any{map[string]any{"addresses": []any{"127.0.0.1"}, "nodeName": e.node}}
		recs = append(recs, objRecord(t, "discovery.k8s.io", model.KindEndpointSlice, "shop", fmt.Sprintf("greeter-%d", i), map[string]any{
			"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": "greeter"}},
			"addressType": "IPv4", "ports": []any{map[string]any{"name": "grpc", "port": e.b.port}}, "endpoints": eps,
		}))
	}
	recs = append(recs, objRecord(t, "networking.istio.io", model.KindDestinationRule, "shop", "greeter", map[string]any{
		"spec": map[string]any{"host": "greeter", "trafficPolicy": map[string]any{"outlierDetection": map[string]any{"consecutive5xxErrors": 5}}},
	}))
	m := storeWith(t, recs).Snapshot()
	proxy := Proxy{Generator: GRPC, Namespace: "shop", Locality: model.Locality{Region: "us-east", Zone: "us-east-a"}}
	var sets []*Set
	for _, typeURL := range TypeURLs() {
		set, err := GenerateFor(m, proxy, typeURL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range set.Resources {
			if err := validateDeep(r.Msg); err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
		}
		sets = append(sets, set)
	}
	const node = "grpc-east-a"
	ads := startADS(t, node, sets...)
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "locality": {"region": "us-east", "zone": "us-east-a"}, "metadata": {"GENERATOR": "grpc"}}
	}`, ads, node)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf("xds:///greeter.shop.svc.cluster.local:%d", svcPort)
	cc, err := grpc.NewClient(target, grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	check := func() error {
		callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
		defer callCancel()
		_, err := client.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	for range 50 {
		if err := check(); err != nil {
			t.Fatalf("Check via %s: %v", target, err)
		}
	}
	if zone.calls.Load() != 50 || region.calls.Load() != 0 || far.calls.Load() != 0 {
		t.Fatalf("calls (zone, region, far) = (%d, %d, %d), want all 50 in the client's zone", zone.calls.Load(), region.calls.Load(), far.calls.Load())
	}
	zone.srv.Stop()
	// RPCs picked before the client saw the connection close fail with
	// Unavailable (gRPC does not retry them); the client then fails over.
	lost := 0
	for region.calls.Load() < 50 {
		if ctx.Err() != nil {
			t.Fatalf("no failover to the region's endpoint: calls (zone, region, far) = (%d, %d, %d)", zone.calls.Load(), region.calls.Load(), far.calls.Load())
		}
		if err := check(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Check via %s after the zone's endpoint stopped: %v", target, err)
			}
			lost++
		}
	}
	t.Logf("%d RPCs failed while the client moved to the next priority", lost)
	if far.calls.Load() != 0 {
		t.Errorf("%d calls went to the other region while the client's region served", far.calls.Load())
	}
}
