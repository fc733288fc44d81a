package xdsgen

import (
	"math"
	"strconv"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Sidecar clusters, after Istio's cluster builder:
//   - outbound|<port>||<host> per service port: EDS, ORIGINAL_DST for
//     headless services (the client picks the pod), STRICT_DNS for
//     ExternalName services (Envoy resolves the name; pilotwire never does);
//   - PassthroughCluster (ORIGINAL_DST) for outbound traffic to unknown
//     destinations, BlackHoleCluster (no endpoints) for traffic to drop;
//   - inbound|<targetPort>|| per port the pod serves, and
//     InboundPassthroughCluster for the other inbound ports: ORIGINAL_DST
//     from 127.0.0.6, the source address Istio's iptables rules let through
//     without redirecting it back to the proxy (Istio's default inbound
//     traffic policy, PASSTHROUGH, sends to the pod IP, not 127.0.0.1).

// Names of the clusters every sidecar gets, as in Istio.
const (
	PassthroughCluster        = "PassthroughCluster"
	BlackHoleCluster          = "BlackHoleCluster"
	InboundPassthroughCluster = "InboundPassthroughCluster"
)

// inboundBindIP is the source address of connections to the local
// application: Istio's iptables rules do not redirect it again.
const inboundBindIP = "127.0.0.6"

func envoyClusterSet(m *model.Mesh, in *inbound, ns string) (*Set, error) {
	all, err := perServiceRuled(m, ns, keyEnvoyCDS, envoyClusters)
	if err != nil {
		return nil, err
	}
	all = append(all, staticClusters()...)
	for _, ip := range inboundPorts(in) {
		c := inboundCluster(ip)
		r, err := newResource(c.Name, c)
		if err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	return newSet(resource.ClusterType, all), nil
}

// routerClusterSet is what a gateway gets until gateways are translated:
// the outbound clusters and BlackHoleCluster (gateways have no original
// destination listeners, so no passthrough), as Istio's gateway clusters.
func routerClusterSet(m *model.Mesh, ns string) (*Set, error) {
	all, err := perServiceRuled(m, ns, keyEnvoyCDS, envoyClusters)
	if err != nil {
		return nil, err
	}
	return newSet(resource.ClusterType, append(all, staticClusters()[0])), nil
}

func inboundPorts(in *inbound) []inboundPort {
	if in == nil {
		return nil
	}
	return in.ports
}

// envoyClusters are a service's clusters under rule dr (nil: none): one per
// port, and one per port and subset of the rule, each with the rule's
// traffic policy for it.
func envoyClusters(m *model.Mesh, svc *model.Service, dr *model.DestinationRule) ([]*Resource, error) {
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, proto protocol) error {
		for _, subset := range append([]string{""}, subsetNames(dr)...) {
			name := model.OutboundClusterName(p.Port, subset, svc.Hostname)
			c := envoyCluster(m, svc, p, proto, name)
			if opts := upstreamOptions(proto); opts != nil {
				c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsKey: opts}
			}
			tp := m.TrafficPolicy(dr, p.Port, subset)
			if dr != nil || m.HasDefaultTrafficPolicy() {
				envoyTrafficPolicy(c, tp, proto)
			}
			applyMeshTLS(m, c, svc, p, subset, tp, isHTTP2Cluster(proto, tp))
			if usesEDS(svc) {
				applyLocalityLbConfig(m, c, tp)
			}
			r, err := newResource(name, c)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// envoyCluster is the cluster of one port (or subset) with Istio's
// defaults, by the service's resolution: EDS for endpoints by IP,
// ORIGINAL_DST for passthrough (headless services, resolution NONE),
// STRICT_DNS for DNS (ExternalName services, DNS ServiceEntries: Envoy
// resolves, pilotwire never does), LOGICAL_DNS for DNS_ROUND_ROBIN.
func envoyCluster(m *model.Mesh, svc *model.Service, p *model.Port, _ protocol, name string) *clusterv3.Cluster {
	var c *clusterv3.Cluster
	switch {
	case svc.ExternalName != "":
		c = dnsCluster(name, svc.ExternalName, p.Port)
		applyDNSRefresh(c, m.DNSRefreshRate())
	case svc.Headless || svc.Resolution == model.Passthrough:
		c = originalDstCluster(name)
	case svc.Resolution == model.DNSLB || svc.Resolution == model.DNSRoundRobinLB:
		c = dnsEndpointsCluster(name, p.Endpoints)
		if svc.Resolution == model.DNSRoundRobinLB {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
		}
		applyDNSRefresh(c, m.DNSRefreshRate())
	default:
		c = edsCluster(name)
		c.EdsClusterConfig.EdsConfig = adsSourceNoTimeout()
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	c.CircuitBreakers = defaultCircuitBreakers()
	c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	if c.GetType() != clusterv3.Cluster_ORIGINAL_DST {
		// Panic mode off, as Istio: with Envoy's default (50%) a service
		// with half its hosts unhealthy gets traffic sent to all of them.
		// A DestinationRule's outlier detection sets its own threshold.
		c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: 0}
	}
	return c
}

// dnsJitter is Istio's default PILOT_DNS_JITTER_DURATION: each refresh of
// a DNS cluster waits up to this much longer, so that proxies do not
// resolve all at once.
const dnsJitter = 100 * time.Millisecond

// applyDNSRefresh sets Istio's resolution settings on a cluster Envoy
// resolves: the mesh's refresh rate (used after a failed lookup), jitter,
// and the records' TTLs.
func applyDNSRefresh(c *clusterv3.Cluster, refresh time.Duration) {
	//lint:ignore SA1019 Istio sets the deprecated fields; Envoy still reads them
	c.DnsRefreshRate = durationpb.New(refresh)
	//lint:ignore SA1019 as above
	c.DnsJitter = durationpb.New(dnsJitter)
	//lint:ignore SA1019 as above
	c.RespectDnsTtl = true
}

// dnsEndpointsCluster resolves each endpoint's address (a name or an IP).
func dnsEndpointsCluster(name string, eps []model.Endpoint) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		ConnectTimeout:       durationpb.New(ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_LEAST_REQUEST,
		DnsLookupFamily:      clusterv3.Cluster_V4_ONLY,
	}
	c.LoadAssignment, _ = groupLocalities(name, eps, false)
	return c
}

func subsetNames(dr *model.DestinationRule) []string {
	if dr == nil {
		return nil
	}
	var out []string
	for _, s := range dr.Spec.GetSubsets() {
		out = append(out, s.GetName())
	}
	return out
}

// isHTTP2Cluster reports whether a cluster speaks HTTP/2 upstream: an
// HTTP/2 port, or an HTTP/1.1 port its policy upgrades (Istio's
// isHttp2Cluster, which picks the ALPN of mTLS).
func isHTTP2Cluster(proto protocol, tp *networkingv1.TrafficPolicy) bool {
	return proto == protoHTTP2 || proto == protoHTTP &&
		tp.GetConnectionPool().GetHttp().GetH2UpgradePolicy() == networkingv1.ConnectionPoolSettings_HTTPSettings_UPGRADE
}

// upstreamOptions: HTTP/2 to HTTP/2 ports; the client's protocol to sniffed
// ports (as Istio does for sidecars); nothing (HTTP/1.1 or TCP) otherwise.
func upstreamOptions(proto protocol) *anypb.Any {
	switch proto {
	case protoHTTP2:
		return http2Options()
	case protoAuto:
		return downstreamOptions()
	}
	return nil
}

func originalDstCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		ConnectTimeout:       durationpb.New(ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
	}
}

// dnsCluster sends to host:port, resolved by Envoy (IPv4, as Istio for
// IPv4 proxies).
func dnsCluster(name, host string, port int32) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		ConnectTimeout:       durationpb.New(ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_LEAST_REQUEST,
		DnsLookupFamily:      clusterv3.Cluster_V4_ONLY,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				Locality: &corev3.Locality{},
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: socketAddress(host, port),
					}},
					LoadBalancingWeight: endpointWeight,
				}},
				LoadBalancingWeight: endpointWeight,
			}},
		},
	}
}

// defaultCircuitBreakers raises Envoy's limits (1024 connections, pending
// and active requests, 3 retries) to the maximum, as Istio does: Envoy's
// defaults make busy clients fail with 503 UO.
func defaultCircuitBreakers() *clusterv3.CircuitBreakers {
	max := wrapperspb.UInt32(math.MaxUint32)
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		MaxConnections:     max,
		MaxPendingRequests: max,
		MaxRequests:        max,
		MaxRetries:         max,
		TrackRemaining:     true,
	}}}
}

// staticClusters are BlackHoleCluster, PassthroughCluster and
// InboundPassthroughCluster, in that order. Shared, read-only.
var staticClusters = sync.OnceValue(func() []*Resource {
	blackHole := &clusterv3.Cluster{
		Name:                 BlackHoleCluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
	passthrough := passthroughCluster(PassthroughCluster)
	inbound := passthroughCluster(InboundPassthroughCluster)
	inbound.UpstreamBindConfig = inboundBind()
	var out []*Resource
	for _, c := range []*clusterv3.Cluster{blackHole, passthrough, inbound} {
		r, err := newResource(c.Name, c)
		if err != nil {
			panic("xdsgen: " + err.Error())
		}
		out = append(out, r)
	}
	return out
})

func passthroughCluster(name string) *clusterv3.Cluster {
	c := originalDstCluster(name)
	c.CircuitBreakers = defaultCircuitBreakers()
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsKey: passthroughOptions()}
	return c
}

func inboundBind() *corev3.BindConfig {
	return &corev3.BindConfig{SourceAddress: &corev3.SocketAddress{
		Address:       inboundBindIP,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0},
	}}
}

// maxCleanupInterval keeps inbound original-destination hosts for good, as
// Istio (there is only ever one: the pod).
var maxCleanupInterval = &durationpb.Duration{Seconds: 315576000000}

// inboundCluster is inbound|<targetPort>||: to the application on the
// connection's original destination (the pod IP and target port).
func inboundCluster(ip inboundPort) *clusterv3.Cluster {
	c := originalDstCluster(inboundClusterName(ip.target))
	c.CleanupInterval = maxCleanupInterval
	c.UpstreamBindConfig = inboundBind()
	c.CircuitBreakers = defaultCircuitBreakers()
	c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	if opts := upstreamOptions(ip.proto); opts != nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsKey: opts}
	}
	return c
}

// http2Options makes a cluster speak HTTP/2 upstream. Shared, read-only.
var http2Options = sync.OnceValue(func() *anypb.Any {
	return mustAny(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
})

func useDownstream() *httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig {
	return &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
		UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
		},
	}
}

// downstreamOptions: upstream HTTP/1.1 or HTTP/2 as the client spoke.
var downstreamOptions = sync.OnceValue(func() *anypb.Any {
	return mustAny(&httpv3.HttpProtocolOptions{UpstreamProtocolOptions: useDownstream()})
})

// passthroughOptions: the client's protocol, and idle connections closed
// after 5 minutes, as Istio's passthrough clusters.
var passthroughOptions = sync.OnceValue(func() *anypb.Any {
	return mustAny(&httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(5 * time.Minute)},
		UpstreamProtocolOptions:   useDownstream(),
	})
})

func portString(p int32) string { return strconv.Itoa(int(p)) }

// inboundClusterName is Istio's inbound|<targetPort>||.
func inboundClusterName(target int32) string { return "inbound|" + portString(target) + "||" }
