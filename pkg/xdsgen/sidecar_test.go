package xdsgen

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

func goldenFor(t testing.TB, p Proxy, typeURL string) *Set {
	t.Helper()
	set, err := GenerateFor(goldenMesh(t), p, typeURL)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func vhostDomains(t testing.TB, set *Set, route, vhost string) []string {
	t.Helper()
	for _, vh := range msg[*routev3.RouteConfiguration](t, set, route).VirtualHosts {
		if vh.Name == vhost {
			return vh.Domains
		}
	}
	t.Fatalf("route %s has no virtual host %s", route, vhost)
	return nil
}

func TestShortNamesResolveInTheClientNamespace(t *testing.T) {
	tests := []struct {
		name, ns, vhost string
		want            []string
	}{
		{name: "own namespace: bare name", ns: "shop", vhost: "web.shop.svc.cluster.local:80",
			want: []string{"web.shop.svc.cluster.local", "web.shop.svc.cluster.local.", "web", "web.shop.svc", "web.shop", "10.0.0.1"}},
		{name: "other namespace: name.ns only", ns: "other", vhost: "web.shop.svc.cluster.local:80",
			want: []string{"web.shop.svc.cluster.local", "web.shop.svc.cluster.local.", "web.shop", "web.shop.svc", "10.0.0.1"}},
		{name: "the other web from its namespace", ns: "other", vhost: "web.other.svc.cluster.local:80",
			want: []string{"web.other.svc.cluster.local", "web.other.svc.cluster.local.", "web", "web.other.svc", "web.other", "10.0.0.2"}},
		{name: "a namespace without services", ns: "empty", vhost: "web.other.svc.cluster.local:80",
			want: []string{"web.other.svc.cluster.local", "web.other.svc.cluster.local.", "web.other", "web.other.svc", "10.0.0.2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := goldenFor(t, Proxy{Generator: Envoy, Namespace: tc.ns}, resource.RouteType)
			if got := vhostDomains(t, set, "80", tc.vhost); !slices.Equal(got, tc.want) {
				t.Errorf("domains %v, want %v", got, tc.want)
			}
		})
	}
	// Namespaces without services on a port share its route configuration.
	m := goldenMesh(t)
	a, _ := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "x"}, resource.RouteType)
	b, _ := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "y"}, resource.RouteType)
	if a.Get("80") != b.Get("80") {
		t.Error("route 80 not shared by two namespaces without services")
	}
}

func TestOutboundTrafficPolicy(t *testing.T) {
	for _, tc := range []struct {
		mode        meshconfig.Mode
		wantCluster string
		wantHost    string
	}{
		{mode: "", wantCluster: PassthroughCluster, wantHost: "allow_any"},
		{mode: meshconfig.RegistryOnly, wantCluster: BlackHoleCluster, wantHost: "block_all"},
	} {
		t.Run(tc.wantHost, func(t *testing.T) {
			p := goldenProxy()
			mc, err := meshconfig.Parse([]byte("outboundTrafficPolicy: {mode: " + string(cmpOr(tc.mode, meshconfig.AllowAny)) + "}"))
			if err != nil {
				t.Fatal(err)
			}
			p.Mesh = mc
			lds := goldenFor(t, p, resource.ListenerType)
			vo := msg[*listenerv3.Listener](t, lds, VirtualOutboundListener)
			if !vo.GetUseOriginalDst().GetValue() || vo.GetBindToPort() != nil {
				t.Errorf("virtualOutbound must bind and use the original destination: %v", vo)
			}
			catchAll := vo.FilterChains[len(vo.FilterChains)-1]
			if got := unpack[*tcpproxyv3.TcpProxy](t, catchAll.Filters[0].GetTypedConfig()).GetCluster(); got != tc.wantCluster {
				t.Errorf("virtualOutbound catch-all goes to %s, want %s", got, tc.wantCluster)
			}
			http := msg[*listenerv3.Listener](t, lds, "0.0.0.0_80")
			if got := unpack[*tcpproxyv3.TcpProxy](t, http.DefaultFilterChain.Filters[0].GetTypedConfig()).GetCluster(); got != tc.wantCluster {
				t.Errorf("0.0.0.0_80 default chain goes to %s, want %s", got, tc.wantCluster)
			}
			rc := msg[*routev3.RouteConfiguration](t, goldenFor(t, p, resource.RouteType), "80")
			if last := rc.VirtualHosts[len(rc.VirtualHosts)-1]; last.Name != tc.wantHost || !slices.Equal(last.Domains, []string{"*"}) {
				t.Errorf("last virtual host %s %v, want %s [*]", last.Name, last.Domains, tc.wantHost)
			}
		})
	}
}

func TestInboundIsSharedByPodsOfOneService(t *testing.T) {
	m := mesh(t, svc("shop", "web", "10.0.0.1", port("http", 80, endpoint("10.1.0.1", 8080, "", "c1"), endpoint("10.1.0.2", 8080, "", "c1"))))
	for _, typeURL := range []string{resource.ClusterType, resource.ListenerType} {
		a, _ := GenerateFor(m, Proxy{Generator: Envoy, IP: "10.1.0.1"}, typeURL)
		b, _ := GenerateFor(m, Proxy{Generator: Envoy, IP: "10.1.0.2"}, typeURL)
		none, _ := GenerateFor(m, Proxy{Generator: Envoy, IP: "10.9.9.9"}, typeURL)
		if a != b {
			t.Errorf("%s: two pods of web get different sets", typeURL)
		}
		if a == none {
			t.Errorf("%s: a pod of web gets the set of a pod backing nothing", typeURL)
		}
	}
	cds, _ := GenerateFor(m, Proxy{Generator: Envoy, IP: "10.1.0.1"}, resource.ClusterType)
	if cds.Get("inbound|8080||") == nil {
		t.Errorf("no inbound cluster for the target port: %v", names(cds))
	}
}

func TestRouterGetsOnlyClusters(t *testing.T) {
	p := Proxy{Generator: Envoy, Type: Router, IP: goldenPodIP, Namespace: "shop"}
	for _, typeURL := range []string{resource.ListenerType, resource.RouteType} {
		if set := goldenFor(t, p, typeURL); len(set.Resources) != 0 {
			t.Errorf("router %s: %v, want none", typeURL, names(set))
		}
	}
	cds := goldenFor(t, p, resource.ClusterType)
	if cds.Get(BlackHoleCluster) == nil || cds.Get(PassthroughCluster) != nil || cds.Get("inbound|8080||") != nil {
		t.Errorf("router clusters %v: want outbound and BlackHoleCluster only", names(cds))
	}
	if cds.Get("outbound|80||web.shop.svc.cluster.local") == nil {
		t.Errorf("router clusters %v lack the outbound ones", names(cds))
	}
}

func TestGRPCServerListeners(t *testing.T) {
	set := goldenFor(t, Proxy{Generator: GRPC, IP: goldenPodIP}, resource.ListenerType)
	for _, addr := range []string{"0.0.0.0:8080", "[::]:9091", goldenPodIP + ":8081"} {
		l := msg[*listenerv3.Listener](t, set, GRPCServerListenerPrefix+addr)
		if len(l.FilterChains) != 1 || l.FilterChains[0].TransportSocket != nil {
			t.Errorf("%s: want one plaintext filter chain, got %v", l.Name, l.FilterChains)
		}
	}
	if set.Get(GRPCServerListenerPrefix+"0.0.0.0:9999") != nil {
		t.Error("a listener for a port the pod does not serve")
	}
	if set.Get("web.shop.svc.cluster.local:80") == nil {
		t.Error("client listeners missing next to the server ones")
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// TestServiceEntryHostNames: a ServiceEntry's hostname takes shorter names
// only when it has the form <name>.<ns>.svc.cluster.local, and then from
// the namespace in the hostname, as Istio's; other hostnames take none.
// Before, a client in the entry's namespace got the hostname twice in one
// virtual host (its "bare name"), which Envoy rejects with the whole route
// configuration, and made-up names such as api.example.com.default.svc.
func TestServiceEntryHostNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "entries.yaml")
	manifest := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external, namespace: default}
spec:
  hosts: [api.example.com]
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: kube-style, namespace: default}
spec:
  hosts: [legacy.billing.svc.cluster.local]
  addresses: [240.0.0.7]
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 10.9.0.1}]
`
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	m := manifestStore(t, path).Snapshot()
	for _, tc := range []struct {
		ns, vhost string
		want      []string
	}{
		{"default", "api.example.com:80", []string{"api.example.com", "api.example.com."}},
		{"billing", "api.example.com:80", []string{"api.example.com", "api.example.com."}},
		{"default", "legacy.billing.svc.cluster.local:80",
			[]string{"legacy.billing.svc.cluster.local", "legacy.billing.svc.cluster.local.", "legacy.billing", "legacy.billing.svc", "240.0.0.7"}},
		{"billing", "legacy.billing.svc.cluster.local:80",
			[]string{"legacy.billing.svc.cluster.local", "legacy.billing.svc.cluster.local.", "legacy", "legacy.billing.svc", "legacy.billing", "240.0.0.7"}},
	} {
		set, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: tc.ns}, resource.RouteType)
		if err != nil {
			t.Fatal(err)
		}
		if got := vhostDomains(t, set, "80", tc.vhost); !slices.Equal(got, tc.want) {
			t.Errorf("client in %s, %s: domains %q, want %q", tc.ns, tc.vhost, got, tc.want)
		}
	}
}
