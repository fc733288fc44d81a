package xdsgen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// parityCase is one generated resource of an Envoy proxy, from one of the
// manifests of testdata/routing and testdata/istio or from goldenMesh.
type parityCase struct {
	where string // manifest, proxy and resource, for messages
	msg   proto.Message
	mesh  *model.Mesh
	proxy Proxy
}

// parityResources generates every cluster, listener and route
// configuration of a sidecar (on goldenPodIP, so it has an inbound side)
// and of a gateway, for goldenMesh and each manifest the golden tests use.
func parityResources(t *testing.T) []parityCase {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join("testdata", "routing", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join("testdata", "istio", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inputs = append(inputs, more...)
	meshes := map[string]*model.Mesh{"goldenMesh": goldenMesh(t)}
	for _, in := range inputs {
		meshes[in] = manifestStore(t, in).Snapshot()
	}
	proxies := []Proxy{
		goldenProxy(),
		{Generator: Envoy, Namespace: "default", Labels: map[string]string{"app": "client"}},
		{Generator: Envoy, Type: Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}},
	}
	var out []parityCase
	for name, m := range meshes {
		for _, p := range proxies {
			for _, typeURL := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
				set, err := GenerateFor(m, p, typeURL)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, r := range set.Resources {
					out = append(out, parityCase{where: name + " " + nodeTypeName(p.Type) + " " + r.Name, msg: r.Msg, mesh: m, proxy: p})
				}
			}
		}
	}
	return out
}

// managers are the HTTP connection managers of a listener's chains.
func managers(t *testing.T, l *listenerv3.Listener) []*hcmv3.HttpConnectionManager {
	t.Helper()
	var out []*hcmv3.HttpConnectionManager
	for _, fc := range append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain()) {
		for _, f := range fc.GetFilters() {
			if f.GetName() == hcmFilterName {
				out = append(out, unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig()))
			}
		}
	}
	return out
}

// The tests below check, on every resource an Envoy sidecar or gateway
// gets (parityResources), what Istio's builders set and a differential
// check against Istio's pilot found missing (issue 37, items 2 to 6). Each
// counts what it checked, so that it cannot pass on nothing.

func atLeast(t *testing.T, what string, n, min int) {
	t.Helper()
	if n < min {
		t.Errorf("checked %d %s, want at least %d", n, what, min)
	}
}

// TestOutboundClustersDisablePanicMode: panic mode off (Istio's
// applyLoadBalancer: Envoy's 50% default sends traffic to unhealthy hosts)
// on every outbound cluster Envoy balances itself; outlier detection's
// minHealthPercent takes its place (TestPanicThresholdFollowsOutlierDetection).
func TestOutboundClustersDisablePanicMode(t *testing.T) {
	n := 0
	for _, c := range parityResources(t) {
		msg, ok := c.msg.(*clusterv3.Cluster)
		if !ok || !strings.HasPrefix(msg.GetName(), "outbound|") || msg.GetType() == clusterv3.Cluster_ORIGINAL_DST || msg.GetOutlierDetection() != nil {
			continue
		}
		n++
		if got := msg.GetCommonLbConfig().GetHealthyPanicThreshold(); got == nil || got.GetValue() != 0 {
			t.Errorf("%s: healthy_panic_threshold %v, want 0", c.where, got)
		}
	}
	atLeast(t, "clusters", n, 20)
}

// TestManagersProxy100Continue: Istio proxies 100-continue on every HTTP
// connection manager of a sidecar or gateway.
func TestManagersProxy100Continue(t *testing.T) {
	n := 0
	for _, c := range parityResources(t) {
		if l, ok := c.msg.(*listenerv3.Listener); ok {
			for _, h := range managers(t, l) {
				n++
				if !h.GetProxy_100Continue() {
					t.Errorf("%s: HCM %s without proxy_100_continue", c.where, h.GetStatPrefix())
				}
			}
		}
	}
	atLeast(t, "connection managers", n, 20)
}

// TestFaultBeforeCORS: fault injection comes before CORS, the router last
// (Istio's buildHTTPConnectionManager).
func TestFaultBeforeCORS(t *testing.T) {
	n := 0
	for _, c := range parityResources(t) {
		l, ok := c.msg.(*listenerv3.Listener)
		if !ok {
			continue
		}
		for _, h := range managers(t, l) {
			var names []string
			for _, f := range h.GetHttpFilters() {
				names = append(names, f.GetName())
			}
			fault, cors := slices.Index(names, faultFilterName), slices.Index(names, corsFilterName)
			if fault >= 0 && cors >= 0 {
				n++
				if fault > cors {
					t.Errorf("%s: HTTP filters %v: fault must come before cors", c.where, names)
				}
			}
			if len(names) == 0 || names[len(names)-1] != routerFilterName {
				t.Errorf("%s: HTTP filters %v: router must be last", c.where, names)
			}
		}
	}
	atLeast(t, "connection managers with fault and cors", n, 20)
}

// TestRoutesHonourGRPCTimeout: the grpc-timeout header is honoured up to
// the route's timeout, without limit when it has none (Istio's
// setTimeout), on every route of a sidecar or gateway.
func TestRoutesHonourGRPCTimeout(t *testing.T) {
	n := 0
	for _, c := range parityResources(t) {
		rc, ok := c.msg.(*routev3.RouteConfiguration)
		if !ok {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				a := r.GetRoute()
				if a == nil {
					continue
				}
				n++
				//lint:ignore SA1019 Istio sends the deprecated field: its replacement has regressions in Envoy.
				got := a.GetMaxGrpcTimeout()
				if got == nil || got.AsDuration() != a.GetTimeout().AsDuration() {
					t.Errorf("%s %s %s: max_grpc_timeout %v, want the route timeout %v", c.where, vh.GetName(), r.GetName(), got, a.GetTimeout())
				}
			}
		}
	}
	atLeast(t, "routes", n, 50)
}

// TestVirtualHostsAnswerAbsoluteFQDN: a sidecar's virtual host of a service
// answers the absolute FQDN too (Istio's GenerateAltVirtualHosts).
func TestVirtualHostsAnswerAbsoluteFQDN(t *testing.T) {
	n := 0
	for _, c := range parityResources(t) {
		rc, ok := c.msg.(*routev3.RouteConfiguration)
		if !ok || c.proxy.Type != Sidecar {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			host, _, ok := strings.Cut(vh.GetName(), ":")
			if !ok || c.mesh.Service(host) == nil || !slices.Contains(vh.GetDomains(), host) {
				continue
			}
			n++
			if !slices.Contains(vh.GetDomains(), host+".") {
				t.Errorf("%s: virtual host %s domains %v lack %q", c.where, vh.GetName(), vh.GetDomains(), host+".")
			}
		}
	}
	atLeast(t, "virtual hosts", n, 20)
}

// TestPanicThresholdFollowsOutlierDetection: a DestinationRule's outlier
// detection sets the threshold to its minHealthPercent (0 when unset), as
// Istio's applyOutlierDetection.
func TestPanicThresholdFollowsOutlierDetection(t *testing.T) {
	m := manifestStore(t, filepath.Join("testdata", "istio", "destinationrule.yaml")).Snapshot()
	set, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "default"}, resource.ClusterType)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, r := range set.Resources {
		c := r.Msg.(*clusterv3.Cluster)
		if c.GetOutlierDetection() == nil {
			continue
		}
		seen++
		if got := c.GetCommonLbConfig().GetHealthyPanicThreshold(); got == nil || got.GetValue() != 0 {
			t.Errorf("%s: healthy_panic_threshold %v, want 0", c.GetName(), got)
		}
	}
	if seen == 0 {
		t.Fatal("no cluster with outlier detection in testdata/istio/destinationrule.yaml")
	}
}

func nodeTypeName(t NodeType) string {
	if t == Router {
		return "router"
	}
	return "sidecar"
}
