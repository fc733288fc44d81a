package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

const hashHost = "echo.default.svc.cluster.local"

// hashPod is a Pod named name with label version=version; hashSlice is an
// EndpointSlice of the echo Service with one endpoint, on loopback at
// port, naming that Pod.
func hashPod(name, version string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: echo, version: %s}}
status: {podIP: 127.0.0.1}
`, name, version)
}

func hashSlice(name string, port int) string {
	return fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-%s, namespace: default, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports:
- {name: grpc, port: %d}
endpoints:
- addresses: ["127.0.0.1"]
  zone: zone-a
  targetRef: {kind: Pod, namespace: default, name: %s}
`, name, port, name)
}

const hashService = `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports:
  - {name: grpc, port: 8080}
`

const hashRule = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
`

// TestGRPCDestinationRule runs YAML files through the whole pipeline to
// grpc-go's real xDS client: four labelled Pods behind a Service, and a
// DestinationRule with subsets v1 and v2 and a consistent hash by header.
// Calls with one header value stick to one backend, different values
// spread; relabelling a Pod moves its endpoint between the subsets' load
// assignments, pushed to a watching client with no restart. A ServiceEntry
// with STATIC endpoints is callable the same way.
func TestGRPCDestinationRule(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pods := []struct{ name, version string }{{"a", "v1"}, {"b", "v1"}, {"c", "v2"}, {"d", "v2"}}
	ports := map[string]int{}
	for _, p := range pods {
		b := startBackend(t, "backend-"+p.name)
		ports[p.name] = b.port
		pipelinetest.WriteFile(t, dir, "pod-"+p.name+".yaml", hashPod(p.name, p.version))
		pipelinetest.WriteFile(t, dir, "slice-"+p.name+".yaml", hashSlice(p.name, b.port))
	}
	pipelinetest.WriteFile(t, dir, "service.yaml", hashService)
	pipelinetest.WriteFile(t, dir, "rule.yaml", hashRule)
	static := startBackend(t, "static-backend")
	pipelinetest.WriteFile(t, dir, "serviceentry.yaml", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: static, namespace: default}
spec:
  hosts: [static.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 8080, name: grpc, protocol: GRPC}
  endpoints:
  - {address: 127.0.0.1, ports: {grpc: %d}, locality: r1/zone-a}
`, static.port))

	p := pipelinetest.Start(t, dir)
	dial := xdsDialer(t, p.ADSAddr)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	// The ServiceEntry's static endpoint answers through xds:///.
	waitBackend(ctx, t, dial("xds:///static.example.com:8080"), "static-backend")

	client := dial("xds:///" + hashHost + ":8080")
	call := func(user string) string {
		t.Helper()
		cctx := metadata.AppendToOutgoingContext(ctx, "x-user", user)
		resp, err := client.UnaryCall(cctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("call as %s: %v", user, err)
		}
		return resp.GetHostname()
	}
	// Wait until all four endpoints are known: then hashing is stable.
	seen := map[string]bool{}
	for i := 0; len(seen) < 4; i++ {
		if ctx.Err() != nil {
			t.Fatalf("reached only %v", seen)
		}
		seen[call(fmt.Sprintf("probe-%d", i))] = true
	}
	first := call("alice")
	for i := range 200 {
		if got := call("alice"); got != first {
			t.Fatalf("call %d with x-user=alice reached %s, the first reached %s", i, got, first)
		}
	}
	spread := map[string]bool{}
	for i := range 40 {
		spread[call(fmt.Sprintf("user-%d", i))] = true
	}
	if len(spread) < 2 {
		t.Errorf("40 different users all reached %v", spread)
	}

	// A client watching the subsets' load assignments sees a Pod move from
	// v1 to v2 when only its label changes.
	ads := adstest.Dial(ctx, t, p.ADSAddr, adstest.ClientNode)
	v1, v2 := "outbound|8080|v1|"+hashHost, "outbound|8080|v2|"+hashHost
	cds := ads.Request(resource.ClusterType)
	if names := keys(adstest.Decode(t, cds, newCluster)); !slices.Contains(names, v1) || !slices.Contains(names, v2) {
		t.Fatalf("clusters %v lack the subsets", names)
	}
	resp := ads.Request(resource.EndpointType, v1, v2)
	addr := func(pod string) string { return fmt.Sprintf("127.0.0.1:%d", ports[pod]) }
	want := map[string][]string{v1: sorted(addr("a"), addr("b")), v2: sorted(addr("c"), addr("d"))}
	if got := adstest.EndpointsOf(resp); !equalEndpoints(got, want) {
		t.Fatalf("subset endpoints %v, want %v", got, want)
	}
	pipelinetest.WriteFile(t, dir, "pod-a.yaml", hashPod("a", "v2"))
	want = map[string][]string{v1: {addr("b")}, v2: sorted(addr("a"), addr("c"), addr("d"))}
	got := map[string][]string{}
	for !equalEndpoints(got, want) {
		resp := waitResponse(ctx, t, ads, resource.EndpointType)
		for name, eps := range adstest.EndpointsOf(resp) {
			got[name] = eps
		}
		ads.ACK(resp, v1, v2)
	}
	if n := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); n != 0 {
		t.Errorf("clients rejected %v responses", n)
	}
}

func newCluster() *cluster.Cluster { return &cluster.Cluster{} }

func sorted(s ...string) []string { slices.Sort(s); return s }

func equalEndpoints(got, want map[string][]string) bool {
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			return false
		}
	}
	return true
}

// waitResponse receives the next response of typeURL, failing when ctx ends.
func waitResponse(ctx context.Context, t *testing.T, c *adstest.Client, typeURL string) *discovery.DiscoveryResponse {
	t.Helper()
	resp := recvAny(ctx, t, c)
	if resp.GetTypeUrl() != typeURL {
		t.Fatalf("got %s, want %s", resp.GetTypeUrl(), typeURL)
	}
	return resp
}
