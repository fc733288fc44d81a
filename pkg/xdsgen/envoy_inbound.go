package xdsgen

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// The inbound side of a sidecar, after Istio's: virtualInbound matches
// each connection on its original destination port and, by the
// PeerAuthentication that applies to the workload (mtls_inbound.go), on
// what the TLS and HTTP inspectors found: Istio mTLS (transport protocol
// tls and Istio's ALPNs), plaintext (raw_buffer), and on PERMISSIVE TCP
// ports the application's own TLS.
//   - A port the pod serves gets chains named 0.0.0.0_<targetPort>: HTTP
//     ports an HTTP connection manager routing to inbound|<port>||, TCP
//     ports a tcp_proxy to it, sniffed ports both (HTTP when the HTTP
//     inspector, or the client's ALPN over mTLS, says HTTP).
//   - Other ports pass through to InboundPassthroughCluster, HTTP
//     (virtualInbound-catchall-http) or not (virtualInbound), under the
//     workload's mode, and under a port-level mode on the ports that
//     declare one.
//   - A connection to 15006 itself is dropped (virtualInbound-blackhole).

// virtualInbound builds the listener for what in serves (nil: nothing)
// under PeerAuthentication pa, every chain but the blackhole running the
// workload's security filters sec (authz_filters.go; nil: none), as
// Istio's.
func virtualInbound(m *model.Mesh, in *inbound, pa model.PeerAuthn, sec *inboundSecurity) *listenerv3.Listener {
	chains := []*listenerv3.FilterChain{{
		Name:             VirtualInboundListener + "-blackhole",
		FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualInboundPort)},
		Filters:          []*listenerv3.Filter{toCluster(BlackHoleCluster)},
	}}
	passthrough := inboundChainConfig{
		httpName: VirtualInboundListener + "-catchall-http",
		tcpName:  VirtualInboundListener,
		http: func() *listenerv3.Filter {
			return sidecarManager(InboundPassthroughCluster, "", inboundRoute(m, InboundPassthroughCluster, 0, false), false, sec.httpFilters()...)
		},
		tcp: func() []*listenerv3.Filter { return sec.network(toCluster(InboundPassthroughCluster)) },
	}
	chains = append(chains, passthrough.chains(0, protoAuto, pa.Mode)...)
	served := make(map[uint32]bool, len(inboundPorts(in)))
	for _, ip := range inboundPorts(in) {
		served[uint32(ip.target)] = true
	}
	for _, port := range sortedPorts(pa.PortModes) {
		if !served[port] { // Istio's per-port passthrough chains
			chains = append(chains, passthrough.chains(port, protoAuto, pa.PortModes[port])...)
		}
	}
	for _, ip := range inboundPorts(in) {
		name := "0.0.0.0_" + portString(ip.target)
		cluster := inboundClusterName(ip.target)
		cc := inboundChainConfig{
			httpName: name,
			tcpName:  name,
			http: func() *listenerv3.Filter {
				return sidecarManager("inbound_"+name, "", inboundRoute(m, cluster, ip.port.Port, isGRPC(ip.port)), ip.proto == protoHTTP2, sec.httpFilters()...)
			},
			tcp: func() []*listenerv3.Filter { return sec.network(toCluster(cluster)) },
		}
		chains = append(chains, cc.chains(uint32(ip.target), ip.proto, pa.ForPort(uint32(ip.target)))...)
	}
	return &listenerv3.Listener{
		Name:                             VirtualInboundListener,
		Address:                          socketAddress("0.0.0.0", VirtualInboundPort),
		TrafficDirection:                 corev3.TrafficDirection_INBOUND,
		ContinueOnListenerFiltersTimeout: true,
		ListenerFilters:                  inboundListenerFilters(chains),
		ListenerFiltersTimeout:           protocolDetectionTimeout,
		FilterChains:                     chains,
	}
}

// portsPredicate matches connections to any of ports.
func portsPredicate(ports []int32) *listenerv3.ListenerFilterChainMatchPredicate {
	rules := make([]*listenerv3.ListenerFilterChainMatchPredicate, len(ports))
	for i, p := range ports {
		rules[i] = &listenerv3.ListenerFilterChainMatchPredicate{Rule: &listenerv3.ListenerFilterChainMatchPredicate_DestinationPortRange{
			DestinationPortRange: &typev3.Int32Range{Start: p, End: p + 1},
		}}
	}
	if len(rules) == 1 {
		return rules[0]
	}
	return &listenerv3.ListenerFilterChainMatchPredicate{Rule: &listenerv3.ListenerFilterChainMatchPredicate_OrMatch{
		OrMatch: &listenerv3.ListenerFilterChainMatchPredicate_MatchSet{Rules: rules},
	}}
}

// inboundRoute sends every request to cluster, with no timeout: the
// client's sidecar applies the route's timeout. Its virtual host is named
// inbound|http|<servicePort>, as Istio's. A request the application's
// connection reset before reading it is retried, except on gRPC ports
// (inboundRetryPolicy).
func inboundRoute(m *model.Mesh, cluster string, servicePort int32, grpc bool) *routev3.RouteConfiguration {
	r := defaultRoute(cluster, noTimeout)
	r.GetRoute().RetryPolicy = inboundRetryPolicy(m, grpc)
	r.GetRoute().MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{
		MaxStreamDuration:    durationpb.New(0),
		GrpcTimeoutHeaderMax: durationpb.New(0),
	}
	return &routev3.RouteConfiguration{
		Name: cluster,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "inbound|http|" + portString(servicePort),
			Domains: []string{"*"},
			Routes:  []*routev3.Route{r},
		}},
		ValidateClusters: wrapperspb.Bool(false),
	}
}
