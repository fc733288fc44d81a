package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// grpcBootstrap is a proxyless gRPC bootstrap as Istio's agent writes it,
// for a pod at ip.
func grpcBootstrap(ads, ip, pod string) []byte {
	return fmt.Appendf(nil, `{
	  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
	  "node": {"id": "sidecar~%s~%s.default~default.svc.cluster.local",
	           "metadata": {"GENERATOR": "grpc", "NAMESPACE": "default"}},
	  "server_listener_resource_name_template": "xds.istio.io/grpc/lds/inbound/%%s"
	}`, ads, ip, pod)
}

// TestGRPCXDSServerServes runs grpc-go's xDS server (xds.NewGRPCServer)
// bootstrapped against pilotwire: it asks for the listener of its address,
// turns serving, and a grpc-go xDS client calls it through xds:///.
func TestGRPCXDSServerServes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "svc.yaml", `apiVersion: v1
kind: Service
metadata:
  name: echo-server
  namespace: default
spec:
  clusterIP: 10.96.0.30
  ports:
  - name: grpc
    port: 8080
`)
	pipelinetest.WriteFile(t, dir, "slice.yaml", fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-server-1
  namespace: default
  labels:
    kubernetes.io/service-name: echo-server
addressType: IPv4
ports:
- name: grpc
  port: %d
endpoints:
- addresses: ["127.0.0.1"]
  conditions: {ready: true}
  zone: zone-a
`, port))
	p := pipelinetest.Start(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	serving := make(chan error, 8)
	srv, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		xds.BootstrapContentsForTesting(grpcBootstrap(p.ADSAddr, "127.0.0.1", "echo-server-0")),
		xds.ServingModeCallback(func(addr net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				serving <- nil
			} else if args.Err != nil {
				serving <- args.Err
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(srv, &backend{name: "xds-server"})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	for served := false; !served; {
		select {
		case err := <-serving:
			if err != nil {
				t.Logf("not serving yet: %v", err)
				continue
			}
			served = true
		case <-ctx.Done():
			t.Fatal("the xDS server never became serving")
		}
	}

	resolver, err := xds.NewXDSResolverWithConfigForTesting(grpcBootstrap(p.ADSAddr, "127.0.0.2", "client-0"))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///echo-server.default.svc.cluster.local:8080",
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	waitBackend(ctx, t, testgrpc.NewTestServiceClient(cc), "xds-server")
	if got := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); got != 0 {
		t.Errorf("grpc clients rejected %v responses, want 0", got)
	}
}
