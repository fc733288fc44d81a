package xdsgen

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gocmp "github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func generate(t testing.TB, m *model.Mesh, g Generator, typeURL string) *Set {
	t.Helper()
	set, err := Generate(m, g, typeURL)
	if err != nil {
		t.Fatalf("Generate(%v, %s): %v", g, typeURL, err)
	}
	return set
}

func names(set *Set) []string {
	var out []string
	for _, r := range set.Resources {
		out = append(out, r.Name)
	}
	return out
}

func msg[T proto.Message](t testing.TB, set *Set, name string) T {
	t.Helper()
	r := set.Get(name)
	if r == nil {
		t.Fatalf("no %s %q in %v", set.TypeURL, name, names(set))
	}
	return r.Msg.(T)
}

func grpcListenerMsg(t testing.TB, m *model.Mesh, name string) *listenerv3.Listener {
	return msg[*listenerv3.Listener](t, generate(t, m, GRPC, resource.ListenerType), name)
}

func unpack[T proto.Message](t testing.TB, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return m.(T)
}

func TestResourceNames(t *testing.T) {
	outbound := []string{
		"outbound|27017||v6.shop.svc.cluster.local",
		"outbound|5432||db.shop.svc.cluster.local",
		"outbound|53||dns.kube-system.svc.cluster.local",
		"outbound|6379||api.shop.svc.cluster.local",
		"outbound|80||web.other.svc.cluster.local",
		"outbound|80||web.shop.svc.cluster.local",
		"outbound|8000||empty.shop.svc.cluster.local",
		"outbound|8080||api.shop.svc.cluster.local",
		"outbound|9090||web.shop.svc.cluster.local",
	}
	grpcTargets := []string{
		"api.shop.svc.cluster.local:6379",
		"api.shop.svc.cluster.local:8080",
		"db.shop.svc.cluster.local:5432",
		"dns.kube-system.svc.cluster.local:53",
		"empty.shop.svc.cluster.local:8000",
		"v6.shop.svc.cluster.local:27017",
		"web.other.svc.cluster.local:80",
		"web.shop.svc.cluster.local:80",
		"web.shop.svc.cluster.local:9090",
	}
	tests := []struct {
		name    string
		gen     Generator
		typeURL string
		want    []string
	}{
		{name: "envoy EDS", gen: Envoy, typeURL: resource.EndpointType, want: outbound},
		{name: "grpc CDS", gen: GRPC, typeURL: resource.ClusterType, want: outbound},
		{name: "grpc EDS", gen: GRPC, typeURL: resource.EndpointType, want: outbound},
		{name: "grpc LDS", gen: GRPC, typeURL: resource.ListenerType, want: grpcTargets},
		{name: "grpc RDS", gen: GRPC, typeURL: resource.RouteType, want: grpcTargets},
	}
	m := variedMesh(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := generate(t, m, tc.gen, tc.typeURL)
			want := slices.Sorted(slices.Values(tc.want))
			if diff := gocmp.Diff(want, names(set)); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			for _, r := range set.Resources {
				if set.Get(r.Name) != r {
					t.Errorf("Get(%q) does not return the resource", r.Name)
				}
			}
			if set.Get("nope") != nil {
				t.Error("Get of an unknown name returned a resource")
			}
		})
	}
}

func adsSourceWant() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func edsClusterWant(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSourceWant(), ServiceName: name},
		ConnectTimeout:       durationpb.New(ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
}

func TestClusters(t *testing.T) {
	tests := []struct {
		name    string
		gen     Generator
		cluster string
		want    *clusterv3.Cluster
	}{
		{name: "grpc: plain EDS cluster", gen: GRPC, cluster: "outbound|9090||web.shop.svc.cluster.local", want: edsClusterWant("outbound|9090||web.shop.svc.cluster.local")},
	}
	m := variedMesh(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := msg[*clusterv3.Cluster](t, generate(t, m, tc.gen, resource.ClusterType), tc.cluster)
			if diff := gocmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("cluster (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadAssignment(t *testing.T) {
	lbEndpoint := func(addr string, port uint32) *endpointv3.LbEndpoint {
		return &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Protocol: corev3.SocketAddress_TCP, Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
				}}},
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
	}
	tests := []struct {
		name string
		want *endpointv3.ClusterLoadAssignment
	}{
		{
			name: "outbound|80||web.shop.svc.cluster.local",
			want: &endpointv3.ClusterLoadAssignment{
				ClusterName: "outbound|80||web.shop.svc.cluster.local",
				Endpoints: []*endpointv3.LocalityLbEndpoints{
					{Locality: &corev3.Locality{}, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.1.0.4", 8080)}},
					// One locality per zone, across clusters c1 and c2.
					{Locality: &corev3.Locality{Zone: "z1"}, LoadBalancingWeight: wrapperspb.UInt32(2), LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.1.0.1", 8080), lbEndpoint("10.1.0.3", 8080)}},
					{Locality: &corev3.Locality{Zone: "z2"}, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.1.0.2", 8080)}},
				},
			},
		},
		{
			name: "outbound|27017||v6.shop.svc.cluster.local",
			want: &endpointv3.ClusterLoadAssignment{
				ClusterName: "outbound|27017||v6.shop.svc.cluster.local",
				Endpoints: []*endpointv3.LocalityLbEndpoints{
					{Locality: &corev3.Locality{Zone: "z1"}, LoadBalancingWeight: wrapperspb.UInt32(1), LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("fd00:1::1", 27017)}},
				},
			},
		},
		{
			name: "outbound|8000||empty.shop.svc.cluster.local",
			want: &endpointv3.ClusterLoadAssignment{ClusterName: "outbound|8000||empty.shop.svc.cluster.local"},
		},
	}
	m := variedMesh(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, g := range []Generator{Envoy, GRPC} {
				got := msg[*endpointv3.ClusterLoadAssignment](t, generate(t, m, g, resource.EndpointType), tc.name)
				if diff := gocmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
					t.Errorf("%v: load assignment (-want +got):\n%s", g, diff)
				}
			}
		})
	}
}

// TestLoadAssignmentsSuitGRPC checks, over a mesh with many zones and
// clusters, the rules grpc-go's EDS parser enforces: every locality has an
// id and a non-zero weight and is unique; every endpoint has a non-zero
// weight and a unique address.
func TestLoadAssignmentsSuitGRPC(t *testing.T) {
	for _, m := range []*model.Mesh{variedMesh(t), bigMesh(t, 50, 10)} {
		for _, r := range generate(t, m, GRPC, resource.EndpointType).Resources {
			cla := r.Msg.(*endpointv3.ClusterLoadAssignment)
			localities := make(map[string]bool)
			addrs := make(map[string]bool)
			for _, loc := range cla.Endpoints {
				if loc.Locality == nil {
					t.Fatalf("%s: locality without id", r.Name)
				}
				id := loc.Locality.Region + "/" + loc.Locality.Zone + "/" + loc.Locality.SubZone
				if localities[id] {
					t.Errorf("%s: duplicate locality %q", r.Name, id)
				}
				localities[id] = true
				var sum uint32
				for _, lb := range loc.LbEndpoints {
					if lb.GetLoadBalancingWeight().GetValue() != 1 || lb.HealthStatus != corev3.HealthStatus_HEALTHY {
						t.Errorf("%s: endpoint weight %v health %v", r.Name, lb.GetLoadBalancingWeight(), lb.HealthStatus)
					}
					sum += lb.GetLoadBalancingWeight().GetValue()
					sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
					a := sa.GetAddress() + ":" + strconv.Itoa(int(sa.GetPortValue()))
					if addrs[a] {
						t.Errorf("%s: duplicate endpoint %s", r.Name, a)
					}
					addrs[a] = true
				}
				if w := loc.GetLoadBalancingWeight().GetValue(); w == 0 || w != sum {
					t.Errorf("%s: locality %q weight %d, want %d (its endpoints)", r.Name, id, w, sum)
				}
			}
		}
	}
}

func routerWant(t testing.TB) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAnyTest(t, &routerv3.Router{})}}
}

func mustAnyTest(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestEnvoyTCPListenerAddressClash(t *testing.T) {
	// Across clusters two services can share a clusterIP; the first by
	// hostname keeps the listener.
	m := mesh(t,
		svc("b", "db", "10.0.0.5", port("tcp", 3306)),
		svc("a", "db", "10.0.0.5", port("tcp", 3306)),
	)
	l := msg[*listenerv3.Listener](t, generate(t, m, Envoy, resource.ListenerType), "10.0.0.5_3306")
	tp := unpack[*tcpproxyv3.TcpProxy](t, l.FilterChains[0].Filters[0].GetTypedConfig())
	if want := "outbound|3306||db.a.svc.cluster.local"; tp.GetCluster() != want {
		t.Errorf("listener goes to %q, want %q", tp.GetCluster(), want)
	}
}

func TestGRPCResources(t *testing.T) {
	m := variedMesh(t)
	const target = "web.shop.svc.cluster.local:9090"
	const cluster = "outbound|9090||web.shop.svc.cluster.local"

	l := grpcListenerMsg(t, m, target)
	if l.GetAddress() != nil || len(l.FilterChains) != 0 {
		t.Errorf("API listener has an address or filter chains: %v", l)
	}
	hcm := unpack[*hcmv3.HttpConnectionManager](t, l.GetApiListener().GetApiListener())
	wantHCM := &hcmv3.HttpConnectionManager{
		StatPrefix:     target,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: adsSourceWant(), RouteConfigName: target}},
		// Fault injection before the router, as Istio's gRPC listeners.
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.fault",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAnyTest(t, &faultv3.HTTPFault{})},
		}, routerWant(t)},
	}
	if diff := gocmp.Diff(wantHCM, hcm, protocmp.Transform()); diff != "" {
		t.Errorf("API listener connection manager (-want +got):\n%s", diff)
	}

	rc := msg[*routev3.RouteConfiguration](t, generate(t, m, GRPC, resource.RouteType), target)
	wantRC := &routev3.RouteConfiguration{
		Name: target,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    target,
			Domains: []string{target, "web.shop.svc.cluster.local"},
			Routes: []*routev3.Route{{
				Name:  "default",
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
					// Istio's default retries, as far as grpc-go reads them.
					RetryPolicy: &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"},
				}},
			}},
		}},
	}
	if diff := gocmp.Diff(wantRC, rc, protocmp.Transform()); diff != "" {
		t.Errorf("route configuration (-want +got):\n%s", diff)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name, portName, appProtocol string
		l4                          string
		number                      int32
		want                        protocol
	}{
		{name: "unnamed: sniffed", want: protoAuto},
		{name: "unknown name: sniffed", portName: "metrics", want: protoAuto},
		{name: "unknown name on a well-known TCP port", portName: "dns-tcp", number: 53, want: protoTCP},
		{name: "unnamed on a well-known TCP port", number: 3306, want: protoTCP},
		{name: "h2c is not a protocol name", portName: "h2c", want: protoAuto},
		{name: "http", portName: "http", want: protoHTTP},
		{name: "http- prefix", portName: "http-web", want: protoHTTP},
		{name: "case-insensitive", portName: "HTTP2-x", want: protoHTTP2},
		{name: "httpfoo is not http-", portName: "httpfoo", want: protoAuto},
		{name: "grpc", portName: "grpc", want: protoHTTP2},
		{name: "grpc-web", portName: "grpc-web", want: protoHTTP2},
		{name: "grpc-web- prefix", portName: "grpc-web-x", want: protoHTTP2},
		{name: "http2", portName: "http2-api", want: protoHTTP2},
		{name: "tcp", portName: "tcp-db", want: protoTCP},
		{name: "tls", portName: "tls", want: protoTCP},
		{name: "https", portName: "https", want: protoTCP},
		{name: "mongo", portName: "mongo", want: protoTCP},
		{name: "mysql", portName: "mysql-primary", want: protoTCP},
		{name: "redis", portName: "redis", want: protoTCP},
		{name: "appProtocol wins over name", portName: "http", appProtocol: "tcp", want: protoTCP},
		{name: "appProtocol grpc", portName: "tcp", appProtocol: "grpc", want: protoHTTP2},
		{name: "appProtocol http2", appProtocol: "http2", want: protoHTTP2},
		{name: "appProtocol h2c", appProtocol: "kubernetes.io/h2c", want: protoHTTP2},
		{name: "appProtocol ws", appProtocol: "kubernetes.io/ws", want: protoHTTP},
		{name: "appProtocol wss", appProtocol: "kubernetes.io/wss", want: protoTCP},
		{name: "UDP", portName: "dns", l4: "UDP", want: protoUnsupported},
		{name: "SCTP", portName: "http", l4: "SCTP", want: protoUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := appPort(tc.portName, tc.appProtocol, cmp.Or(tc.number, int32(80)))
			if tc.l4 != "" {
				p.Protocol = corev1Protocol(tc.l4)
			}
			if got := classify(p); got != tc.want {
				t.Errorf("classify(name %q, appProtocol %q, %s) = %v, want %v", tc.portName, tc.appProtocol, p.Protocol, got, tc.want)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	m := variedMesh(t)
	tests := []struct {
		name    string
		mesh    *model.Mesh
		gen     Generator
		typeURL string
	}{
		{name: "nil mesh", gen: Envoy, typeURL: resource.ClusterType},
		{name: "unknown generator", mesh: m, gen: 9, typeURL: resource.ClusterType},
		{name: "unsupported type", mesh: m, gen: Envoy, typeURL: resource.SecretType},
		{name: "grpc unsupported type", mesh: m, gen: GRPC, typeURL: "type.googleapis.com/nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if set, err := Generate(tc.mesh, tc.gen, tc.typeURL); err == nil {
				t.Errorf("Generate = %v, want an error", set)
			}
		})
	}
}

func TestGeneratorFor(t *testing.T) {
	meta := func(kv map[string]any) *corev3.Node {
		s, err := structpb.NewStruct(kv)
		if err != nil {
			t.Fatal(err)
		}
		return &corev3.Node{Id: "n", Metadata: s}
	}
	tests := []struct {
		name string
		node *corev3.Node
		want Generator
	}{
		{name: "nil node", want: Envoy},
		{name: "no metadata", node: &corev3.Node{Id: "sidecar~1.2.3.4~a.b~b.svc.cluster.local"}, want: Envoy},
		{name: "grpc", node: meta(map[string]any{"GENERATOR": "grpc"}), want: GRPC},
		{name: "other generator", node: meta(map[string]any{"GENERATOR": "api"}), want: Envoy},
		{name: "not a string", node: meta(map[string]any{"GENERATOR": true}), want: Envoy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := GeneratorFor(tc.node); got != tc.want {
				t.Errorf("GeneratorFor = %v, want %v", got, tc.want)
			}
		})
	}
	if !strings.Contains(Generator(7).String(), "7") {
		t.Error("unknown generator has no useful String")
	}
}
