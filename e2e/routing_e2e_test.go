package e2e

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// flakyBackend fails every other call with UNAVAILABLE.
type flakyBackend struct {
	testgrpc.UnimplementedTestServiceServer
	calls atomic.Int64
}

func (b *flakyBackend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if b.calls.Add(1)%2 == 1 {
		return nil, status.Error(codes.Unavailable, "flaky: every other call fails")
	}
	return &testgrpc.SimpleResponse{Hostname: "flaky"}, nil
}

func startFlaky(t *testing.T) (*flakyBackend, int) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &flakyBackend{}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, b)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return b, lis.Addr().(*net.TCPAddr).Port
}

// routedService is a Service name (port 8080, "grpc") with one Pod and
// EndpointSlice per backend, each Pod labelled version=<version>.
func routedService(t *testing.T, dir, name string, backends map[string]int) {
	t.Helper()
	pipelinetest.WriteFile(t, dir, name+"-service.yaml", fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: default}
spec:
  clusterIP: 10.96.1.%d
  ports:
  - {name: grpc, port: 8080}
`, name, len(name)))
	for version, port := range backends {
		pod := name + "-" + version
		pipelinetest.WriteFile(t, dir, pod+"-pod.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: %s, version: %s}}
status: {podIP: 127.0.0.1}
`, pod, name, version))
		pipelinetest.WriteFile(t, dir, pod+"-slice.yaml", fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s, namespace: default, labels: {kubernetes.io/service-name: %s}}
addressType: IPv4
ports:
- {name: grpc, port: %d}
endpoints:
- addresses: ["127.0.0.1"]
  zone: zone-a
  targetRef: {kind: Pod, namespace: default, name: %s}
`, pod, name, port, pod))
	}
}

const echoSubsets = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`

// echoSplit sends x-user: tester to v2 and splits everyone else v1/v2.
func echoSplit(v1, v2 int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo]
  http:
  - match:
    - headers:
        x-user: {exact: tester}
    route:
    - destination: {host: echo, subset: v2}
  - route:
    - {destination: {host: echo, subset: v1}, weight: %d}
    - {destination: {host: echo, subset: v2}, weight: %d}
`, v1, v2)
}

// TestGRPCVirtualService runs VirtualServices through the whole pipeline
// (`pilotwire up` on a YAML directory) to grpc-go's real xDS client, with
// two backends behind the subsets v1 and v2 of one Service:
//   - an 80/20 split over 1,000 calls lands within ±5 points;
//   - x-user: tester goes to v2 on every call;
//   - a fault abort of 50% with UNAVAILABLE fails between 150 and 250 of
//     400 calls (±5 standard deviations);
//   - a retry policy turns a backend failing every other call into all
//     calls succeeding (without it, half fail);
//   - editing the weights to 20/80 moves the split, without a restart.
func TestGRPCVirtualService(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	v1, v2 := startBackend(t, "backend-v1"), startBackend(t, "backend-v2")
	routedService(t, dir, "echo", map[string]int{"v1": v1.port, "v2": v2.port})
	pipelinetest.WriteFile(t, dir, "echo-rule.yaml", echoSubsets)
	pipelinetest.WriteFile(t, dir, "echo-vs.yaml", echoSplit(80, 20))
	faulty := startBackend(t, "backend-faulty")
	routedService(t, dir, "faulty", map[string]int{"v1": faulty.port})
	pipelinetest.WriteFile(t, dir, "faulty-vs.yaml", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: faulty, namespace: default}
spec:
  hosts: [faulty]
  http:
  - fault:
      abort: {grpcStatus: UNAVAILABLE, percentage: {value: 50}}
    route:
    - destination: {host: faulty}
`)
	flaky, flakyPort := startFlaky(t)
	routedService(t, dir, "flaky", map[string]int{"v1": flakyPort})

	p := pipelinetest.Start(t, dir)
	dialTarget := xdsDialer(t, p.ADSAddr)
	dial := func(host string) testgrpc.TestServiceClient {
		return dialTarget("xds:///" + host + ".default.svc.cluster.local:8080")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	call := func(c testgrpc.TestServiceClient, user string) (string, error) {
		cctx := ctx
		if user != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
		}
		resp, err := c.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		return resp.GetHostname(), err
	}
	mustCall := func(c testgrpc.TestServiceClient, user string) string {
		t.Helper()
		h, err := call(c, user)
		if err != nil {
			t.Fatalf("call (x-user %q): %v", user, err)
		}
		return h
	}
	// share of n calls without x-user that reach v2, in percent.
	v2Share := func(c testgrpc.TestServiceClient, n int) float64 {
		hits := 0
		for range n {
			if mustCall(c, "") == "backend-v2" {
				hits++
			}
		}
		return 100 * float64(hits) / float64(n)
	}

	echo := dial("echo")
	// The header route is in place once tester reaches v2 20 times in a
	// row (a round robin over both would alternate).
	testutil.Eventually(t, "x-user: tester routed to v2", func() bool {
		for range 20 {
			if mustCall(echo, "tester") != "backend-v2" {
				return false
			}
		}
		return true
	})
	for i := range 100 {
		if got := mustCall(echo, "tester"); got != "backend-v2" {
			t.Fatalf("call %d as tester reached %s, want backend-v2", i, got)
		}
	}
	share := v2Share(echo, 1000)
	t.Logf("80/20 split: %.1f%% of 1,000 calls reached v2", share)
	if share < 15 || share > 25 {
		t.Errorf("80/20 split: %.1f%% of 1,000 calls reached v2, want 20 ± 5", share)
	}
	for i := range 100 {
		if got := mustCall(echo, fmt.Sprintf("user-%d", i)); got != "backend-v1" && got != "backend-v2" {
			t.Fatalf("call as user-%d reached %s", i, got)
		}
	}

	// Fault injection: about half of 400 calls fail with UNAVAILABLE.
	faultyClient := dial("faulty")
	failed := 0
	for i := range 400 {
		_, err := call(faultyClient, "")
		switch status.Code(err) {
		case codes.OK:
		case codes.Unavailable:
			failed++
		default:
			t.Fatalf("faulty call %d: %v", i, err)
		}
	}
	t.Logf("fault abort 50%%: %d of 400 calls failed", failed)
	if failed < 150 || failed > 250 {
		t.Errorf("fault abort 50%%: %d of 400 calls failed, want 150..250", failed)
	}

	// Without a retry policy half the calls to the flaky backend fail; with
	// one, every call succeeds.
	flakyClient := dial("flaky")
	unavailable := 0
	for range 20 {
		if _, err := call(flakyClient, ""); status.Code(err) == codes.Unavailable {
			unavailable++
		}
	}
	if unavailable == 0 {
		t.Fatalf("the flaky backend never failed without retries (%d calls served)", flaky.calls.Load())
	}
	pipelinetest.WriteFile(t, dir, "flaky-vs.yaml", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: flaky, namespace: default}
spec:
  hosts: [flaky]
  http:
  - retries: {attempts: 3, retryOn: unavailable}
    route:
    - destination: {host: flaky}
`)
	testutil.Eventually(t, "retries applied", func() bool {
		for range 20 {
			if _, err := call(flakyClient, ""); err != nil {
				return false
			}
		}
		return true
	})
	for i := range 200 {
		if _, err := call(flakyClient, ""); err != nil {
			t.Fatalf("call %d to the flaky backend with retries: %v", i, err)
		}
	}

	// Editing the weights moves the split, with no restart.
	pipelinetest.WriteFile(t, dir, "echo-vs.yaml", echoSplit(20, 80))
	testutil.Eventually(t, "the 20/80 split", func() bool { return v2Share(echo, 100) >= 65 })
	share = v2Share(echo, 1000)
	t.Logf("20/80 split: %.1f%% of 1,000 calls reached v2", share)
	if share < 75 || share > 85 {
		t.Errorf("20/80 split: %.1f%% of 1,000 calls reached v2, want 80 ± 5", share)
	}
	for _, fe := range []string{"fe-0"} {
		if n := p.Metric(t, fe, "pilot_total_xds_rejects"); n != 0 {
			t.Errorf("%s: clients rejected %v responses", fe, n)
		}
	}
}

// xdsDialer returns a dialer of xds:/// targets through grpc-go's xDS
// client, bootstrapped against the ADS server at ads as the sidecar
// client-0 in namespace default.
func xdsDialer(t *testing.T, ads string) func(target string) testgrpc.TestServiceClient {
	t.Helper()
	resolver, err := xds.NewXDSResolverWithConfigForTesting(grpcBootstrap(ads, "10.244.0.9", "client-0"))
	if err != nil {
		t.Fatalf("xds resolver: %v", err)
	}
	return func(target string) testgrpc.TestServiceClient {
		cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
		if err != nil {
			t.Fatalf("dial %s: %v", target, err)
		}
		t.Cleanup(func() { cc.Close() })
		return testgrpc.NewTestServiceClient(cc)
	}
}
