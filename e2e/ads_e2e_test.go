package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

const meshYAML = `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports:
  - {name: grpc, port: 8080, targetPort: 9999}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.30
  ports:
  - {name: http, port: 80, targetPort: http-web}
  - {name: tcp-admin, port: 9000, targetPort: 9000}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec: {host: web.shop.svc.cluster.local}
`

func echoSlice(addrs ...string) string { return echoSliceNamed("echo-1", addrs...) }

// echoSliceNamed is an EndpointSlice of echo named name with ready addrs
// and one endpoint that is not ready.
func echoSliceNamed(name string, addrs ...string) string {
	s := `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ` + name + `
  namespace: default
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports:
- {name: grpc, port: 9080}
endpoints:
`
	for _, a := range addrs {
		s += fmt.Sprintf("- {addresses: [%q], conditions: {ready: true}, zone: zone-a}\n", a)
	}
	return s + "- {addresses: [\"10.244.0.99\"], conditions: {ready: false}, zone: zone-a}\n"
}

const webSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8081}
- {name: tcp-admin, port: 9000}
endpoints:
- {addresses: ["10.244.1.5"], zone: zone-b}
`

// adsClient is a raw ADS client speaking state-of-the-world xDS, as an
// Envoy sidecar would.
type adsClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	node   *core.Node
}

func newADSClient(ctx context.Context, t *testing.T, addr string) *adsClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &adsClient{t: t, stream: stream, node: &core.Node{Id: "sidecar~10.244.0.7~client-0.default~default.svc.cluster.local"}}
}

func (c *adsClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", req.GetTypeUrl(), err)
	}
}

func (c *adsClient) recv(typeURL string) *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.stream.Recv()
	if err != nil {
		c.t.Fatalf("recv (want %s): %v", typeURL, err)
	}
	if resp.GetTypeUrl() != typeURL {
		c.t.Fatalf("got a response of type %s, want %s", resp.GetTypeUrl(), typeURL)
	}
	return resp
}

// request sends a request for typeURL and returns the response, then ACKs it.
func (c *adsClient) request(typeURL string, names ...string) *discovery.DiscoveryResponse {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
	resp := c.recv(typeURL)
	c.ack(resp, names...)
	return resp
}

func (c *adsClient) ack(resp *discovery.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names})
}

func decode[T proto.Message](t *testing.T, resp *discovery.DiscoveryResponse, newT func() T) map[string]T {
	t.Helper()
	out := make(map[string]T)
	for _, a := range resp.GetResources() {
		m := newT()
		if err := a.UnmarshalTo(m); err != nil {
			t.Fatalf("decode %s: %v", a.GetTypeUrl(), err)
		}
		if v, ok := any(m).(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("invalid %s: %v", a.GetTypeUrl(), err)
			}
		}
		out[cache.GetResourceName(m)] = m
	}
	return out
}

func keys[T any](m map[string]T) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// endpointsOf decodes every load assignment of an EDS response.
func endpointsOf(resp *discovery.DiscoveryResponse) map[string][]string {
	out := map[string][]string{}
	for _, a := range resp.GetResources() {
		cla := &endpoint.ClusterLoadAssignment{}
		if a.UnmarshalTo(cla) == nil {
			out[cla.GetClusterName()] = lbAddrs(cla)
		}
	}
	return out
}

func lbAddrs(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	sort.Strings(out)
	return out
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
	pipelinetest.WriteFile(t, dir, "web-slice.yaml", webSlice)
	p := pipelinetest.Start(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := newADSClient(ctx, t, p.ADSAddr)

	const (
		echoCluster = "outbound|8080||echo.default.svc.cluster.local"
		webHTTP     = "outbound|80||web.shop.svc.cluster.local"
		webTCP      = "outbound|9000||web.shop.svc.cluster.local"
	)
	cds := c.request(resource.ClusterType)
	clusters := decode(t, cds, func() *cluster.Cluster { return &cluster.Cluster{} })
	for _, name := range []string{echoCluster, webHTTP, webTCP} {
		cl, ok := clusters[name]
		if !ok {
			t.Fatalf("CDS has no %s; got %v", name, keys(clusters))
		}
		if cl.GetType() != cluster.Cluster_EDS || cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			t.Errorf("%s: want an EDS cluster over ADS, got %v", name, cl)
		}
	}

	eds := c.request(resource.EndpointType, echoCluster, webHTTP, webTCP)
	clas := decode(t, eds, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
	wantEndpoints := map[string][]string{
		echoCluster: {"10.244.0.11:9080", "10.244.0.12:9080"}, // slice port by name; not-ready 10.244.0.99 left out
		webHTTP:     {"10.244.1.5:8081"},
		webTCP:      {"10.244.1.5:9000"},
	}
	gotEndpoints := map[string][]string{}
	for name, cla := range clas {
		gotEndpoints[name] = lbAddrs(cla)
		for _, l := range cla.GetEndpoints() {
			if l.GetLocality() == nil || l.GetLoadBalancingWeight().GetValue() == 0 {
				t.Errorf("%s: locality endpoints without locality or weight: %v", name, l)
			}
		}
	}
	if diff := cmp.Diff(wantEndpoints, gotEndpoints); diff != "" {
		t.Errorf("EDS endpoints (-want +got):\n%s", diff)
	}

	lds := c.request(resource.ListenerType)
	listeners := decode(t, lds, func() *listener.Listener { return &listener.Listener{} })
	for _, name := range []string{"0.0.0.0_8080", "0.0.0.0_80", "10.96.0.30_9000"} {
		if _, ok := listeners[name]; !ok {
			t.Errorf("LDS has no %s; got %v", name, keys(listeners))
		}
	}

	rds := c.request(resource.RouteType, "80", "8080")
	routes := decode(t, rds, func() *route.RouteConfiguration { return &route.RouteConfiguration{} })
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
	eds2 := c.recv(resource.EndpointType)
	if eds2.GetVersionInfo() == eds.GetVersionInfo() {
		t.Errorf("EDS version did not change: %s", eds2.GetVersionInfo())
	}
	clas2 := decode(t, eds2, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
	if diff := cmp.Diff([]string{echoCluster}, keys(clas2)); diff != "" {
		t.Errorf("an endpoint-only push carries the changed load assignment only (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.244.0.11:9080", "10.244.0.13:9080"}, lbAddrs(clas2[echoCluster])); diff != "" {
		t.Errorf("echo endpoints after the change (-want +got):\n%s", diff)
	}
	c.ack(eds2, echoCluster, webHTTP, webTCP)

	// A NACK is recorded and counted and never answered with the same
	// config; the next real change is sent as usual.
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.14"))
	eds3 := c.recv(resource.EndpointType)
	c.send(&discovery.DiscoveryRequest{
		TypeUrl: resource.EndpointType, VersionInfo: eds2.GetVersionInfo(), ResponseNonce: eds3.GetNonce(),
		ResourceNames: []string{echoCluster, webHTTP, webTCP},
		ErrorDetail:   &rpcstatus.Status{Code: 3, Message: "test rejects this"},
	})
	p.WaitFor(t, "NACK counted", func() bool { return p.Metric(t, "fe-0", "pilot_total_xds_rejects") == 1 })
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.15"))
	eds4 := c.recv(resource.EndpointType)
	clas4 := decode(t, eds4, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
	if diff := cmp.Diff([]string{"10.244.0.15:9080"}, lbAddrs(clas4[echoCluster])); diff != "" {
		t.Errorf("echo endpoints after the NACK (-want +got):\n%s", diff)
	}
	if slices.Contains([]string{eds3.GetVersionInfo()}, eds4.GetVersionInfo()) {
		t.Errorf("the NACKed version %s was sent again", eds3.GetVersionInfo())
	}
}
