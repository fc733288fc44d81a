package e2e

import (
	"context"
	"slices"
	"sort"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// meshYAML is adstest's mesh with a DestinationRule for web.
const meshYAML = adstest.MeshYAML + `---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec: {host: web.shop.svc.cluster.local}
`

func echoSlice(addrs ...string) string { return echoSliceNamed("echo-1", addrs...) }

// echoSliceNamed is an EndpointSlice of echo named name with ready addrs
// and one endpoint that is not ready.
func echoSliceNamed(name string, addrs ...string) string {
	return adstest.EchoSlice(name, addrs, "10.244.0.99")
}

func keys[T any](m map[string]T) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// TestRawADSClient requests CDS, EDS, LDS and RDS as an Envoy sidecar would,
// ACKs each, checks the contents, then checks that an endpoint change sends
// only the changed load assignment type.
func TestRawADSClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", meshYAML)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.11", "10.244.0.12"))
	pipelinetest.WriteFile(t, dir, "web-slice.yaml", adstest.WebSlice)
	p := pipelinetest.Start(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := adstest.Dial(ctx, t, p.ADSAddr, adstest.ClientNode)

	const (
		echoCluster = "outbound|8080||echo.default.svc.cluster.local"
		webHTTP     = "outbound|80||web.shop.svc.cluster.local"
		webTCP      = "outbound|9000||web.shop.svc.cluster.local"
	)
	cds := c.Request(resource.ClusterType)
	clusters := adstest.Decode(t, cds, func() *cluster.Cluster { return &cluster.Cluster{} })
	for _, name := range []string{echoCluster, webHTTP, webTCP} {
		cl, ok := clusters[name]
		if !ok {
			t.Fatalf("CDS has no %s; got %v", name, keys(clusters))
		}
		if cl.GetType() != cluster.Cluster_EDS || cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("%s: want an EDS cluster over ADS, got %v", name, cl)
		}
	}

	eds := c.Request(resource.EndpointType, echoCluster, webHTTP, webTCP)
	clas := adstest.Decode(t, eds, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
	wantEndpoints := map[string][]string{
		echoCluster: {"10.244.0.11:9080", "10.244.0.12:9080"}, // slice port by name; not-ready 10.244.0.99 left out
		webHTTP:     {"10.244.1.5:8081"},
		webTCP:      {"10.244.1.5:9000"},
	}
	gotEndpoints := map[string][]string{}
	for name, cla := range clas {
		gotEndpoints[name] = adstest.LBAddrs(cla)
		for _, l := range cla.GetEndpoints() {
			if l.GetLocality() == nil || l.GetLoadBalancingWeight().GetValue() == 0 {
				t.Errorf("%s: locality endpoints without locality or weight: %v", name, l)
			}
		}
	}
	if diff := cmp.Diff(wantEndpoints, gotEndpoints); diff != "" {
		t.Errorf("EDS endpoints (-want +got):\n%s", diff)
	}

	lds := c.Request(resource.ListenerType)
	listeners := adstest.Decode(t, lds, func() *listener.Listener { return &listener.Listener{} })
	for _, name := range []string{"0.0.0.0_8080", "0.0.0.0_80", "10.96.0.30_9000"} {
		if _, ok := listeners[name]; !ok {
			t.Errorf("LDS has no %s; got %v", name, keys(listeners))
		}
	}

	rds := c.Request(resource.RouteType, "80", "8080")
	routes := adstest.Decode(t, rds, func() *route.RouteConfiguration { return &route.RouteConfiguration{} })
	if diff := cmp.Diff([]string{"80", "8080"}, keys(routes)); diff != "" {
		t.Fatalf("RDS names (-want +got):\n%s", diff)
	}
	routeTo := map[string]string{} // domain -> cluster
	for _, vh := range routes["80"].GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			routeTo[d] = vh.GetRoutes()[0].GetRoute().GetCluster()
		}
	}
	// Istio's shape: domains without ports, which Envoy ignores in Host
	// headers (ignore_port_in_host_matching), so web...:80 matches too.
	for _, d := range []string{"web.shop.svc.cluster.local", "web.shop"} {
		if routeTo[d] != webHTTP {
			t.Errorf("route config 80: domain %s routes to %q, want %s", d, routeTo[d], webHTTP)
		}
	}
	if !routes["80"].GetIgnorePortInHostMatching() {
		t.Error("route config 80 does not ignore ports in Host headers")
	}

	// One endpoint changes: the next response is EDS (CDS, LDS and RDS did
	// not change and are not resent), with the new endpoint set of the one
	// load assignment that changed: the client keeps the others (state of
	// the world EDS is a named subscription).
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.11", "10.244.0.13"))
	eds2 := c.RecvType(resource.EndpointType)
	if eds2.GetVersionInfo() == eds.GetVersionInfo() {
		t.Errorf("EDS version did not change: %s", eds2.GetVersionInfo())
	}
	clas2 := adstest.Decode(t, eds2, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
	if diff := cmp.Diff([]string{echoCluster}, keys(clas2)); diff != "" {
		t.Errorf("an endpoint-only push carries the changed load assignment only (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.244.0.11:9080", "10.244.0.13:9080"}, adstest.LBAddrs(clas2[echoCluster])); diff != "" {
		t.Errorf("echo endpoints after the change (-want +got):\n%s", diff)
	}
	c.ACK(eds2, echoCluster, webHTTP, webTCP)

	// A NACK is recorded and counted and never answered with the same
	// config; the next real change is sent as usual.
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.14"))
	eds3 := c.RecvType(resource.EndpointType)
	c.NACK(eds3, eds2.GetVersionInfo(), "test rejects this", echoCluster, webHTTP, webTCP)
	p.WaitFor(t, "NACK counted", func() bool { return p.Metric(t, "fe-0", "pilot_total_xds_rejects") == 1 })
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.15"))
	eds4 := c.RecvType(resource.EndpointType)
	clas4 := adstest.Decode(t, eds4, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
	if diff := cmp.Diff([]string{"10.244.0.15:9080"}, adstest.LBAddrs(clas4[echoCluster])); diff != "" {
		t.Errorf("echo endpoints after the NACK (-want +got):\n%s", diff)
	}
	if slices.Contains([]string{eds3.GetVersionInfo()}, eds4.GetVersionInfo()) {
		t.Errorf("the NACKed version %s was sent again", eds3.GetVersionInfo())
	}
}
