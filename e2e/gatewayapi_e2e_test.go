package e2e

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// grpcRoute is TestGRPCVirtualService's split and header match as a
// Gateway API GRPCRoute whose parent is the Service gr (GAMMA): x-user:
// tester goes to gr-second, everyone else v1/v2 to gr-one and gr-second.
func grpcRoute(v1, v2 int) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: gr, namespace: default}
spec:
  parentRefs:
  - {group: "", kind: Service, name: gr, port: 8080}
  rules:
  - matches:
    - headers: [{name: x-user, value: tester}]
    backendRefs: [{name: gr-second, port: 8080}]
  - backendRefs:
    - {name: gr-one, port: 8080, weight: %d}
    - {name: gr-second, port: 8080, weight: %d}
`, v1, v2)
}

// TestGRPCRouteMesh runs a GRPCRoute with a Service parentRef through the
// whole pipeline (YAML directory → ingest → model's Gateway API
// conversion → frontend) to grpc-go's real xDS client: x-user: tester
// reaches the second backend on every call, an 80/20 split over 1,000
// calls lands within ±5 points, and editing the weights moves it.
func TestGRPCRouteMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	one, second := startBackend(t, "backend-one"), startBackend(t, "backend-second")
	// The parent Service has both backends: without the route, calls
	// would alternate between them.
	routedService(t, dir, "gr", map[string]int{"v1": one.port, "v2": second.port})
	routedService(t, dir, "gr-one", map[string]int{"v1": one.port})
	routedService(t, dir, "gr-second", map[string]int{"v1": second.port})
	pipelinetest.WriteFile(t, dir, "gr-route.yaml", grpcRoute(80, 20))

	p := pipelinetest.Start(t, dir)
	c := xdsDialer(t, p.ADSAddr)("xds:///gr.default.svc.cluster.local:8080")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	call := func(user string) string {
		t.Helper()
		cctx := ctx
		if user != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
		}
		resp, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("call (x-user %q): %v", user, err)
		}
		return resp.GetHostname()
	}
	secondShare := func(n int) float64 {
		hits := 0
		for range n {
			if call("") == "backend-second" {
				hits++
			}
		}
		return 100 * float64(hits) / float64(n)
	}

	testutil.Eventually(t, "x-user: tester routed to the second backend", func() bool {
		for range 20 {
			if call("tester") != "backend-second" {
				return false
			}
		}
		return true
	})
	for i := range 100 {
		if got := call("tester"); got != "backend-second" {
			t.Fatalf("call %d as tester reached %s, want backend-second", i, got)
		}
	}
	share := secondShare(1000)
	t.Logf("GRPCRoute 80/20 split: %.1f%% of 1,000 calls reached the second backend", share)
	if share < 15 || share > 25 {
		t.Errorf("80/20 split: %.1f%% of 1,000 calls reached the second backend, want 20 ± 5", share)
	}

	pipelinetest.WriteFile(t, dir, "gr-route.yaml", grpcRoute(20, 80))
	testutil.Eventually(t, "the 20/80 split", func() bool { return secondShare(100) >= 65 })
	share = secondShare(1000)
	t.Logf("GRPCRoute 20/80 split: %.1f%% of 1,000 calls reached the second backend", share)
	if share < 75 || share > 85 {
		t.Errorf("20/80 split: %.1f%% of 1,000 calls reached the second backend, want 80 ± 5", share)
	}
	if n := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); n != 0 {
		t.Errorf("clients rejected %v responses", n)
	}
}
