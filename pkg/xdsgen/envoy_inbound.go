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

// The inbound side of a sidecar, after Istio's without mTLS (pilotwire
// issues no certificates, so every chain is plaintext): virtualInbound
// matches each connection on its original destination port.
//   - A port the pod serves gets chains named 0.0.0.0_<targetPort>: HTTP
//     ports an HTTP connection manager routing to inbound|<port>||, TCP
//     ports a tcp_proxy to it, sniffed ports both (HTTP when the HTTP
//     inspector finds it).
//   - Other ports pass through to InboundPassthroughCluster, HTTP
//     (virtualInbound-catchall-http) or not (virtualInbound).
//   - A connection to 15006 itself is dropped (virtualInbound-blackhole).

// virtualInbound builds the listener for what in serves (nil: nothing).
func virtualInbound(m *model.Mesh, in *inbound) *listenerv3.Listener {
	chains := []*listenerv3.FilterChain{
		{
			Name:             VirtualInboundListener + "-blackhole",
			FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualInboundPort)},
			Filters:          []*listenerv3.Filter{toCluster(BlackHoleCluster)},
		},
		{
			Name:             VirtualInboundListener + "-catchall-http",
			FilterChainMatch: httpMatch(0),
			Filters:          []*listenerv3.Filter{sidecarManager(InboundPassthroughCluster, "", inboundRoute(m, InboundPassthroughCluster, 0, false), false)},
		},
		{
			Name:             VirtualInboundListener,
			FilterChainMatch: &listenerv3.FilterChainMatch{TransportProtocol: rawBuffer},
			Filters:          []*listenerv3.Filter{toCluster(InboundPassthroughCluster)},
		},
	}
	var noSniffing []int32 // ports the HTTP inspector need not look at
	for _, ip := range inboundPorts(in) {
		name := "0.0.0.0_" + portString(ip.target)
		cluster := inboundClusterName(ip.target)
		httpChain := &listenerv3.FilterChain{
			Name:             name,
			FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(uint32(ip.target)), TransportProtocol: rawBuffer},
			Filters:          []*listenerv3.Filter{sidecarManager("inbound_"+name, "", inboundRoute(m, cluster, ip.port.Port, isGRPC(ip.port)), ip.proto == protoHTTP2)},
		}
		tcpChain := &listenerv3.FilterChain{
			Name:             name,
			FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(uint32(ip.target)), TransportProtocol: rawBuffer},
			Filters:          []*listenerv3.Filter{toCluster(cluster)},
		}
		switch ip.proto {
		case protoHTTP, protoHTTP2:
			chains = append(chains, httpChain)
			noSniffing = append(noSniffing, ip.target)
		case protoTCP:
			chains = append(chains, tcpChain)
			noSniffing = append(noSniffing, ip.target)
		default:
			httpChain.FilterChainMatch = httpMatch(ip.target)
			chains = append(chains, httpChain, tcpChain)
		}
	}
	inspector := httpInspectorFilter()
	if len(noSniffing) > 0 {
		inspector = &listenerv3.ListenerFilter{
			Name:           inspector.Name,
			ConfigType:     inspector.ConfigType,
			FilterDisabled: portsPredicate(noSniffing),
		}
	}
	return &listenerv3.Listener{
		Name:                             VirtualInboundListener,
		Address:                          socketAddress("0.0.0.0", VirtualInboundPort),
		TrafficDirection:                 corev3.TrafficDirection_INBOUND,
		ContinueOnListenerFiltersTimeout: true,
		ListenerFilters:                  []*listenerv3.ListenerFilter{originalDstFilter(), inspector},
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
