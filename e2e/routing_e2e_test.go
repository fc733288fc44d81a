package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
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
//   - with no VirtualService, Istio's default retry policy (2 retries,
//     on unavailable among others) turns a backend failing every other
//     call into all calls succeeding; retries: {attempts: 0} turns that
//     off (half fail), and the route's own policy back on;
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

	// With no VirtualService the default retry policy retries UNAVAILABLE:
	// every call to the flaky backend succeeds.
	flakyClient := dial("flaky")
	for i := range 200 {
		if _, err := call(flakyClient, ""); err != nil {
			t.Fatalf("call %d to the flaky backend under the default retry policy: %v", i, err)
		}
	}
	// Each call failed once and was retried once.
	if n := flaky.calls.Load(); n != 400 {
		t.Errorf("the flaky backend served %d attempts for 200 calls, want 400", n)
	}
	// Retries turned off: about half the calls fail.
	flakyVS := func(retries string) string {
		return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: flaky, namespace: default}
spec:
  hosts: [flaky]
  http:
  - retries: ` + retries + `
    route:
    - destination: {host: flaky}
`
	}
	pipelinetest.WriteFile(t, dir, "flaky-vs.yaml", flakyVS("{attempts: 0}"))
	testutil.Eventually(t, "retries turned off", func() bool {
		_, err := call(flakyClient, "")
		return status.Code(err) == codes.Unavailable
	})
	unavailable := 0
	for range 40 {
		if _, err := call(flakyClient, ""); status.Code(err) == codes.Unavailable {
			unavailable++
		}
	}
	// The backend fails exactly every other call it serves.
	if unavailable != 20 {
		t.Errorf("without retries %d of 40 calls failed, want 20", unavailable)
	}
	pipelinetest.WriteFile(t, dir, "flaky-vs.yaml", flakyVS("{attempts: 3, retryOn: unavailable}"))
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

// routerFiles is an ingress gateway router (Pod ingress-0 with
// istio=ingressgateway at 10.244.5.1, data only, behind the Service
// istio-ingressgateway) and a Service web in shop with subsets v1 and v2,
// exposed on the gateway's port 80 for shop.example.com by a
// VirtualService splitting v1/v2.
func routerFiles(t *testing.T, dir string, v1, v2 int) {
	t.Helper()
	pipelinetest.WriteFile(t, dir, "ingress.yaml", `apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.9.1
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Pod
metadata: {name: ingress-0, namespace: istio-system, labels: {istio: ingressgateway}}
status: {podIP: 10.244.5.1}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ingress-0, namespace: istio-system, labels: {kubernetes.io/service-name: istio-ingressgateway}}
addressType: IPv4
ports:
- {name: http, port: 8080}
endpoints:
- addresses: ["10.244.5.1"]
  targetRef: {kind: Pod, namespace: istio-system, name: ingress-0}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.9.2
  ports:
  - {name: http, port: 8080}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["shop/shop.example.com"]
`)
	pipelinetest.WriteFile(t, dir, "shop-vs.yaml", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: shop}
spec:
  hosts: [shop.example.com]
  gateways: [istio-system/ingress]
  http:
  - route:
    - {destination: {host: web, subset: v1}, weight: %d}
    - {destination: {host: web, subset: v2}, weight: %d}
`, v1, v2))
}

// routerState is what a raw ADS client acting as a router last received,
// by type.
type routerState map[string]*discovery.DiscoveryResponse

// follow reads responses (ACKing each, with names[type] as the
// subscription) into st until done holds.
func (st routerState) follow(ctx context.Context, t *testing.T, c *adstest.Client, names map[string][]string, done func() bool) {
	t.Helper()
	for !done() {
		resp := recvAny(ctx, t, c)
		st[resp.GetTypeUrl()] = resp
		c.ACK(resp, names[resp.GetTypeUrl()]...)
	}
}

// recvAny receives the next response of any type, failing the test when
// ctx ends first.
func recvAny(ctx context.Context, t *testing.T, c *adstest.Client) *discovery.DiscoveryResponse {
	t.Helper()
	type result struct {
		resp *discovery.DiscoveryResponse
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := c.Stream.Recv()
		ch <- result{r, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("recv: %v", r.err)
		}
		return r.resp
	case <-ctx.Done():
		t.Fatalf("no response: %v", ctx.Err())
	}
	return nil
}

// TestRouterGateway connects a raw ADS client as an ingress gateway router
// (node id router~...) through the whole pipeline: for an Istio Gateway
// selecting its workload it gets a bound listener on the target port of
// its Service's port 80 (8080, as Istio) whose routes (RDS http.8080)
// send shop.example.com to the subset clusters
// it also gets over CDS, every resource valid; editing the VirtualService
// pushes the new weights.
func TestRouterGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	routerFiles(t, dir, 90, 10)
	p := pipelinetest.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	ads := adstest.Dial(ctx, t, p.ADSAddr, "router~10.244.5.1~ingress-0.istio-system~istio-system.svc.cluster.local")

	const v1, v2 = "outbound|8080|v1|web.shop.svc.cluster.local", "outbound|8080|v2|web.shop.svc.cluster.local"
	names := map[string][]string{resource.RouteType: {"http.8080"}}
	st := routerState{}
	for _, typeURL := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		ads.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names[typeURL]})
	}
	weights := func() map[string]uint32 {
		rcs := adstest.Decode(t, st[resource.RouteType], func() *route.RouteConfiguration { return &route.RouteConfiguration{} })
		out := map[string]uint32{}
		for _, vh := range rcs["http.8080"].GetVirtualHosts() {
			if !slices.Equal(vh.GetDomains(), []string{"shop.example.com"}) {
				continue
			}
			for _, r := range vh.GetRoutes() {
				for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
					out[c.GetName()] = c.GetWeight().GetValue()
				}
			}
		}
		return out
	}
	ready := func(w1, w2 uint32) func() bool {
		return func() bool {
			if st[resource.ClusterType] == nil || st[resource.ListenerType] == nil || st[resource.RouteType] == nil {
				return false
			}
			clusters := adstest.Decode(t, st[resource.ClusterType], newCluster)
			_, ok1 := clusters[v1]
			_, ok2 := clusters[v2]
			w := weights()
			return ok1 && ok2 && w[v1] == w1 && w[v2] == w2
		}
	}
	st.follow(ctx, t, ads, names, ready(90, 10))

	listeners := adstest.Decode(t, st[resource.ListenerType], func() *listener.Listener { return &listener.Listener{} })
	l := listeners["0.0.0.0_8080"]
	if l == nil {
		t.Fatalf("no listener 0.0.0.0_8080 among %v", keys(listeners))
	}
	if l.GetBindToPort() != nil && !l.GetBindToPort().GetValue() {
		t.Error("the gateway listener does not bind its port")
	}
	if got := l.GetAddress().GetSocketAddress().GetPortValue(); got != 8080 {
		t.Errorf("listener port %d, want 8080", got)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if got := hcm.GetRds().GetRouteConfigName(); got != "http.8080" {
		t.Errorf("listener routes by %q, want http.8080", got)
	}

	// The weights follow an edit of the VirtualService.
	routerFiles(t, dir, 30, 70)
	st.follow(ctx, t, ads, names, ready(30, 70))
	if n := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); n != 0 {
		t.Errorf("rejected %v responses", n)
	}
}
