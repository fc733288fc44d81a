package xdsgen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// egressProxy is the sidecar the egress cases are generated for.
var egressProxy = Proxy{Generator: Envoy, Namespace: "default"}

// egressMesh is testdata/egress/<file> applied in order.
func egressMesh(t *testing.T, file string, opts ...model.Option) *model.Mesh {
	t.Helper()
	return manifestStore(t, filepath.Join("testdata", "egress", file), opts...).Snapshot()
}

// sidecarClusters returns the sidecar's clusters by name, each checked
// with ValidateAll.
func sidecarClusters(t *testing.T, m *model.Mesh) map[string]*clusterv3.Cluster {
	t.Helper()
	set, err := GenerateFor(m, egressProxy, resource.ClusterType)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*clusterv3.Cluster{}
	for _, r := range set.Resources {
		if err := validateDeep(r.Msg); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
		out[r.Name] = r.Msg.(*clusterv3.Cluster)
	}
	return out
}

// httpOptions is the cluster's HttpProtocolOptions extension, nil when it
// has none.
func httpOptions(t *testing.T, c *clusterv3.Cluster) *httpv3.HttpProtocolOptions {
	t.Helper()
	a := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if a == nil {
		return nil
	}
	o := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(o); err != nil {
		t.Fatalf("%s: %v", c.GetName(), err)
	}
	return o
}

// upstreamKind names the upstream protocol an HttpProtocolOptions selects.
func upstreamKind(o *httpv3.HttpProtocolOptions) string {
	switch {
	case o == nil:
		return ""
	case o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil:
		return "http2"
	case o.GetExplicitHttpConfig() != nil:
		return "http1"
	case o.GetUseDownstreamProtocolConfig() != nil:
		return "downstream"
	}
	return "none"
}

// TestAutoSNI checks Istio's rule for clusters that originate TLS (SIMPLE
// or MUTUAL, certificates from files): without an explicit sni Envoy takes
// the SNI from the request's host (auto_sni), and, unless the rule names
// subjectAltNames or skips verification, checks the server certificate
// against that host (auto_san_validation). The options ride on the
// cluster's HttpProtocolOptions, whatever the port's protocol.
func TestAutoSNI(t *testing.T) {
	clusters := sidecarClusters(t, egressMesh(t, "tls-origination.yaml"))
	auto := func(san bool) *corev3.UpstreamHttpProtocolOptions {
		return &corev3.UpstreamHttpProtocolOptions{AutoSni: true, AutoSanValidation: san}
	}
	for _, tc := range []struct {
		name, cluster string
		want          *corev3.UpstreamHttpProtocolOptions
		wantKind      string // the upstream protocol the options select
		wantIdle      bool   // the connection pool's idle timeout is kept
	}{
		{name: "SIMPLE without sni, TLS port", cluster: "outbound|443||simple.example.com", want: auto(true), wantKind: "http1"},
		{name: "subjectAltNames keep SAN validation to the rule", cluster: "outbound|443||sans.example.com", want: auto(false), wantKind: "http1"},
		{name: "insecureSkipVerify validates nothing", cluster: "outbound|443||insecure.example.com", want: auto(false), wantKind: "http1"},
		{name: "explicit sni", cluster: "outbound|443||pinned.example.com", wantKind: "http1", wantIdle: true},
		{name: "subset without sni", cluster: "outbound|443|auto|pinned.example.com", want: auto(true), wantKind: "http1", wantIdle: true},
		{name: "HTTP port", cluster: "outbound|80||originate.example.com", want: auto(true), wantKind: "http1"},
		{name: "gRPC port keeps HTTP/2", cluster: "outbound|8080||originate.example.com", want: auto(true), wantKind: "http2"},
		{name: "MUTUAL with a connection pool", cluster: "outbound|9000||originate.example.com", want: auto(true), wantKind: "http1", wantIdle: true},
		{name: "credentialName (not configured yet): no TLS", cluster: "outbound|443||vip.example.com"},
		{name: "no rule", cluster: "outbound|443||*.static.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clusters[tc.cluster]
			if c == nil {
				t.Fatalf("no cluster %s", tc.cluster)
			}
			o := httpOptions(t, c)
			if diff := cmp.Diff(tc.want, o.GetUpstreamHttpProtocolOptions(), protocmp.Transform()); diff != "" {
				t.Errorf("upstream_http_protocol_options (-want +got):\n%s", diff)
			}
			if got := upstreamKind(o); got != tc.wantKind {
				t.Errorf("upstream protocol %q, want %q", got, tc.wantKind)
			}
			if got := o.GetCommonHttpProtocolOptions().GetIdleTimeout() != nil; got != tc.wantIdle {
				t.Errorf("idle timeout set %v, want %v", got, tc.wantIdle)
			}
			if tc.want != nil && c.GetTransportSocket() == nil {
				t.Error("auto_sni without a TLS transport socket")
			}
		})
	}
}

// TestGoldenEgress pins, for each manifest testdata/egress/<case>.yaml, the
// outbound clusters and the per-port outbound listeners (the virtual ones
// are pinned by the sidecar goldens) a sidecar in namespace default gets,
// and what the model ignores, in testdata/egress/<case>.json. Every
// resource passes ValidateAll. Regenerate with -update and review the diff.
func TestGoldenEgress(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "egress", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			m := manifestStore(t, in).Snapshot()
			out := map[string]any{}
			for _, typeURL := range []string{resource.ClusterType, resource.ListenerType} {
				keep := func(r *Resource) bool {
					switch {
					case typeURL == resource.ClusterType && !strings.HasPrefix(r.Name, "outbound|"):
						return false
					case r.Name == VirtualOutboundListener || r.Name == VirtualInboundListener:
						return false
					}
					return true
				}
				out[shortTypeName(typeURL)] = goldenValue(t, m, shortTypeName(typeURL), egressProxy, typeURL, keep)
			}
			out["ignored"] = m.Problems()
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
}

// TestDNSClusters checks what Istio's cluster builder gives the clusters
// Envoy resolves (STRICT_DNS, LOGICAL_DNS): the mesh config's
// dnsRefreshRate (60s by default; Envoy rejects 1ms or less, so such a
// setting is reported and the default kept), a jitter of 100ms, and the
// records' TTLs respected.
func TestDNSClusters(t *testing.T) {
	type dns struct {
		Type       clusterv3.Cluster_DiscoveryType
		Refresh    time.Duration
		Jitter     time.Duration
		RespectTTL bool
	}
	got := func(c *clusterv3.Cluster) dns {
		//lint:ignore SA1019 Istio sets the deprecated fields
		return dns{c.GetType(), c.GetDnsRefreshRate().AsDuration(), c.GetDnsJitter().AsDuration(), c.GetRespectDnsTtl()}
	}
	load := func(mc string) func(t *testing.T) *model.Mesh {
		return func(t *testing.T) *model.Mesh {
			cfg, err := meshconfig.Parse([]byte(mc))
			if err != nil {
				t.Fatal(err)
			}
			return egressMesh(t, "tls-origination.yaml", model.WithMeshConfig(cfg))
		}
	}
	for _, tc := range []struct {
		name    string
		mesh    func(t *testing.T) *model.Mesh
		cluster string
		want    dns
		problem string // a problem the mesh reports
	}{
		{name: "DNS ServiceEntry", mesh: load(""), cluster: "outbound|443||simple.example.com",
			want: dns{clusterv3.Cluster_STRICT_DNS, time.Minute, 100 * time.Millisecond, true}},
		{name: "DNS ServiceEntry subset", mesh: load(""), cluster: "outbound|443|auto|pinned.example.com",
			want: dns{clusterv3.Cluster_STRICT_DNS, time.Minute, 100 * time.Millisecond, true}},
		{name: "DNS_ROUND_ROBIN ServiceEntry", mesh: load(""), cluster: "outbound|443||insecure.example.com",
			want: dns{clusterv3.Cluster_LOGICAL_DNS, time.Minute, 100 * time.Millisecond, true}},
		{name: "ExternalName Service", mesh: func(t *testing.T) *model.Mesh { return goldenMesh(t) }, cluster: "outbound|443||ext.shop.svc.cluster.local",
			want: dns{clusterv3.Cluster_STRICT_DNS, time.Minute, 100 * time.Millisecond, true}},
		{name: "mesh config dnsRefreshRate", mesh: load("dnsRefreshRate: 5s"), cluster: "outbound|443||simple.example.com",
			want: dns{clusterv3.Cluster_STRICT_DNS, 5 * time.Second, 100 * time.Millisecond, true}},
		{name: "dnsRefreshRate Envoy rejects", mesh: load("dnsRefreshRate: 0.001s"), cluster: "outbound|443||insecure.example.com",
			want:    dns{clusterv3.Cluster_LOGICAL_DNS, time.Minute, 100 * time.Millisecond, true},
			problem: "dnsRefreshRate 1ms: must be more than 1ms: 1m0s applies"},
		{name: "EDS cluster gets none", mesh: load("dnsRefreshRate: 5s"), cluster: "outbound|443||vip.example.com",
			want: dns{Type: clusterv3.Cluster_EDS}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.mesh(t)
			c := sidecarClusters(t, m)[tc.cluster]
			if c == nil {
				t.Fatalf("no cluster %s", tc.cluster)
			}
			if diff := cmp.Diff(tc.want, got(c)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if tc.problem != "" {
				want := model.Problem{Object: model.MeshConfigObject, Reason: tc.problem}
				if !slices.Contains(m.Problems(), want) {
					t.Errorf("problems %v, want %v among them", m.Problems(), want)
				}
			}
		})
	}
}

// TestWildcardTLSListener checks Istio's outbound listener for the TLS and
// HTTPS ports of services without an address (ServiceEntries without
// addresses): they share 0.0.0.0_<port>, one filter chain per host matched
// on the SNI the TLS inspector reads, proxying to the host's cluster; a
// host whose VirtualService has tls routes gets their chains instead; what
// matches no chain passes through. An HTTP service on the same port adds
// its chain, and the listener sniffs both.
func TestWildcardTLSListener(t *testing.T) {
	type listener struct {
		Filters []string // listener filters
		Chains  []string // "<server names>/<transport> -> <cluster or hcm>"
		Default string
	}
	summary := func(l *listenerv3.Listener) listener {
		var out listener
		for _, f := range l.GetListenerFilters() {
			out.Filters = append(out.Filters, f.GetName())
		}
		chain := func(fc *listenerv3.FilterChain) string {
			to := ""
			for _, f := range fc.GetFilters() {
				tp := &tcpproxyv3.TcpProxy{}
				if f.GetTypedConfig().UnmarshalTo(tp) == nil {
					to = tp.GetCluster()
				} else {
					to = f.GetName()
				}
			}
			m := fc.GetFilterChainMatch()
			return strings.Join(m.GetServerNames(), ",") + "/" + m.GetTransportProtocol() + "/" + strings.Join(m.GetApplicationProtocols(), ",") + " -> " + to
		}
		for _, fc := range l.GetFilterChains() {
			out.Chains = append(out.Chains, chain(fc))
		}
		if d := l.GetDefaultFilterChain(); d != nil {
			out.Default = chain(d)
		}
		return out
	}
	for _, tc := range []struct {
		name, file, listener string
		want                 listener
	}{
		{
			name: "TLS hosts by SNI", file: "tls-origination.yaml", listener: "0.0.0.0_443",
			want: listener{
				Filters: []string{tlsInspectorName},
				Chains: []string{
					"*.static.example.com// -> outbound|443||*.static.example.com",
					"insecure.example.com// -> outbound|443||insecure.example.com",
					"pinned.example.com// -> outbound|443||pinned.example.com",
					"sans.example.com// -> outbound|443||sans.example.com",
					"simple.example.com// -> outbound|443||simple.example.com",
				},
				Default: "// -> " + PassthroughCluster,
			},
		},
		{
			name: "a host with an address keeps its own listener", file: "tls-origination.yaml", listener: "240.0.0.30_443",
			want: listener{Chains: []string{"// -> outbound|443||vip.example.com"}},
		},
		{
			name: "HTTP on the same port, VirtualService tls routes", file: "sni-listener.yaml", listener: "0.0.0.0_443",
			want: listener{
				Filters: []string{tlsInspectorName, httpInspectorName},
				Chains: []string{
					"/raw_buffer/http/1.1,h2c -> " + hcmFilterName,
					"a.example.com// -> outbound|443||a.example.com",
					"b.example.com// -> outbound|443||b.example.com",
					"backup.example.com// -> outbound|443||backup.example.com",
					"routed.example.com/tls/ -> outbound|443||backup.example.com",
				},
				Default: "// -> " + PassthroughCluster,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := GenerateFor(egressMesh(t, tc.file), egressProxy, resource.ListenerType)
			if err != nil {
				t.Fatal(err)
			}
			var got *listenerv3.Listener
			for _, r := range set.Resources {
				if err := validateDeep(r.Msg); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
				if r.Name == tc.listener {
					got = r.Msg.(*listenerv3.Listener)
				}
			}
			if got == nil {
				t.Fatalf("no listener %s", tc.listener)
			}
			if got.GetBindToPort().GetValue() || got.GetBindToPort() == nil {
				t.Errorf("%s binds to its port; only virtualOutbound does", tc.listener)
			}
			if diff := cmp.Diff(tc.want, summary(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.listener, diff)
			}
		})
	}
}
