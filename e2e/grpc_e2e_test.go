package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// backend is a real gRPC server on loopback that answers with its name.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	name string
	port int
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: b.name}, nil
}

func startBackend(t *testing.T, name string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, port: lis.Addr().(*net.TCPAddr).Port}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, b)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return b
}

// echoMesh is a Service "echo" in namespace default whose clients dial port
// 8080, with one EndpointSlice holding one ready endpoint on loopback at
// backendPort (port name "grpc" matches the Service's; targetPort is only a
// hint and deliberately different), plus a not-ready endpoint that must get
// no traffic.
func echoMesh(backendPort int) (svcYAML, sliceYAML string) {
	svcYAML = `apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: default
spec:
  clusterIP: 10.96.0.20
  ports:
  - name: grpc
    port: 8080
    targetPort: 9999
`
	sliceYAML = fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: default
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: grpc
  port: %d
endpoints:
- addresses: ["127.0.0.1"]
  conditions: {ready: true}
  zone: zone-a
- addresses: ["127.0.0.2"]
  conditions: {ready: false}
  zone: zone-a
`, backendPort)
	return svcYAML, sliceYAML
}

// TestGRPCClientFollowsEndpointChange runs the whole pipeline from YAML files
// to grpc-go's real xDS client: the client calls a backend through
// xds:///echo.default.svc.cluster.local:8080, then the EndpointSlice is
// edited to point at a second backend and the calls follow it.
func TestGRPCClientFollowsEndpointChange(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	b1 := startBackend(t, "backend-1")
	b2 := startBackend(t, "backend-2")
	dir := t.TempDir()
	svcYAML, sliceYAML := echoMesh(b1.port)
	pipelinetest.WriteFile(t, dir, "echo-service.yaml", svcYAML)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", sliceYAML)
	// A malformed file next to the good ones must not stop anything.
	pipelinetest.WriteFile(t, dir, "broken.yaml", "apiVersion: v1\nkind: Service\nmetadata: [not, a, map\n")

	// Two Frontends: the client talks to the second; the first crashes
	// half-way, which must not matter to it.
	p := pipelinetest.Start(t, dir, pipelinetest.Options{Frontends: 2})

	bootstrap := fmt.Sprintf(`{
	  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
	  "node": {"id": "sidecar~127.0.0.1~client-0.default~default.svc.cluster.local",
	           "metadata": {"GENERATOR": "grpc", "NAMESPACE": "default"}}
	}`, p.ADSAddrs[1])
	resolver, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatalf("xds resolver: %v", err)
	}
	cc, err := grpc.NewClient("xds:///echo.default.svc.cluster.local:8080",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer cc.Close()
	client := testgrpc.NewTestServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	waitBackend(ctx, t, client, "backend-1")
	p.Crash(0)

	// Edit the slice to point at the second backend: calls follow, with no
	// restart of anything.
	_, sliceYAML = echoMesh(b2.port)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", sliceYAML)
	waitBackend(ctx, t, client, "backend-2")

	// Once moved, every call lands on backend-2.
	for i := range 20 {
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if err != nil {
			t.Fatalf("call %d after the move: %v", i, err)
		}
		if resp.GetHostname() != "backend-2" {
			t.Fatalf("call %d after the move reached %q, want backend-2", i, resp.GetHostname())
		}
	}
	if got := p.Metric(t, "ingest", "pilotwire_ingest_invalid_documents_total"); got < 1 {
		t.Errorf("invalid documents counted = %v, want >= 1 for broken.yaml", got)
	}
	if got := p.Metric(t, "fe-1", "pilot_total_xds_rejects"); got != 0 {
		t.Errorf("grpc client rejected %v responses, want 0", got)
	}
}

// waitBackend calls until a call reaches want, polling with a deadline.
func waitBackend(ctx context.Context, t *testing.T, c testgrpc.TestServiceClient, want string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last string
	var lastErr error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		cancel()
		if err == nil && resp.GetHostname() == want {
			return
		}
		last, lastErr = resp.GetHostname(), err
		select {
		case <-ctx.Done():
			t.Fatalf("calls never reached %s (last reached %q, err %v)", want, last, lastErr)
		case <-tick.C:
		}
	}
}
