package xdsgen

import (
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// TLS ports of services without an address, after Istio's sidecar outbound
// listeners: a ServiceEntry without addresses has no IP to match, so its
// TLS and HTTPS ports share the unbound listener 0.0.0.0_<port>, where the
// TLS inspector reads the SNI and a filter chain per host (server_names
// [host]) proxies to outbound|<port>||<host>. A host whose VirtualService
// has tls routes applying to the client gets their chains instead (their
// tcp routes do not apply to TLS ports, as in Istio). Connections matching
// no chain take the PassthroughFilterChain. If some service also declares
// the port HTTP, the chains join its 0.0.0.0_<port> listener, which then
// inspects both TLS and HTTP.
//
// Left out, as not yet generated for other ports either: ServiceEntries
// whose addresses are CIDRs (Istio matches the ranges), resolution NONE
// (Istio listens per endpoint when there are endpoints), and tls match
// destinationSubnets on the wildcard listener.

// isTLSPort reports whether Istio reads the port as TLS or HTTPS (its
// protocol.IsTLS): appProtocol (kubernetes.io/wss is HTTPS), else the
// port name, up to the first '-'.
func isTLSPort(p *model.Port) bool {
	name := p.Name
	if p.AppProtocol != "" {
		if p.AppProtocol == "kubernetes.io/wss" {
			return true
		}
		name = p.AppProtocol
	}
	prefix, _, _ := strings.Cut(strings.ToLower(name), "-")
	return prefix == "tls" || prefix == "https"
}

// sniMatched reports whether the service's TLS ports are told apart by SNI
// on the wildcard listener: it has no address to listen on, and its
// clients connect to the service's own endpoints (not passthrough).
func sniMatched(svc *model.Service) bool {
	return svc.ClusterIP == "" && len(svc.Addresses) == 0 && !svc.Headless && svc.ExternalName == "" &&
		svc.Resolution != model.Passthrough
}

// sniChains returns, by port, the SNI filter chains of the TLS ports of
// the services without an address, under the client's VirtualService view
// vs; Envoy rejects two chains with the same match, so the first (by
// hostname) keeps each.
func sniChains(m *model.Mesh, vs string, labels map[string]string) map[int32][]*listenerv3.FilterChain {
	out := map[int32][]*listenerv3.FilterChain{}
	seen := map[int32]map[string]bool{}
	for _, svc := range m.Services {
		if !sniMatched(svc) {
			continue
		}
		var l4 *l4Routes
		if v := m.VirtualServiceFor(vs, svc.Hostname); v != nil && len(v.Spec.GetTls()) > 0 {
			l4 = &l4Routes{m: m, vs: v, c: routeCtx{gateways: meshGateways, ns: vs, labels: labels}}
		}
		_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
			if proto != protoTCP || !isTLSPort(p) {
				return nil
			}
			chains, _ := l4.chains(p.Port, "0.0.0.0")
			if len(chains) == 0 {
				chains = []*listenerv3.FilterChain{{
					FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{svc.Hostname}},
					Filters:          []*listenerv3.Filter{toCluster(clusterName(svc, p))},
				}}
			}
			if seen[p.Port] == nil {
				seen[p.Port] = map[string]bool{}
			}
			for _, fc := range chains {
				k := fc.GetFilterChainMatch().GetTransportProtocol() + "|" + strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")
				if !seen[p.Port][k] {
					seen[p.Port][k] = true
					out[p.Port] = append(out[p.Port], fc)
				}
			}
			return nil
		})
	}
	return out
}

// sniListeners returns the wildcard listeners of the ports in chains that
// have no HTTP listener (httpPorts), sorted by port.
func sniListeners(chains map[int32][]*listenerv3.FilterChain, httpPorts []int32, mode meshconfig.Mode) ([]*Resource, error) {
	var out []*Resource
	for _, port := range slices.Sorted(maps.Keys(chains)) {
		if _, found := slices.BinarySearch(httpPorts, port); found {
			continue
		}
		name := httpListenerName(port)
		r, err := newResource(name, &listenerv3.Listener{
			Name:                             name,
			Address:                          socketAddress("0.0.0.0", port),
			BindToPort:                       wrapperspb.Bool(false),
			TrafficDirection:                 corev3.TrafficDirection_OUTBOUND,
			ContinueOnListenerFiltersTimeout: true,
			ListenerFilters:                  []*listenerv3.ListenerFilter{tlsInspectorFilter()},
			ListenerFiltersTimeout:           durationpb.New(0),
			FilterChains:                     chains[port],
			DefaultFilterChain:               passthroughFilterChain(mode),
		})
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// withSNIChains adds SNI chains to an HTTP listener of the same port: the
// TLS inspector runs before the HTTP inspector.
func withSNIChains(l *listenerv3.Listener, chains []*listenerv3.FilterChain) *listenerv3.Listener {
	if len(chains) == 0 {
		return l
	}
	l.ListenerFilters = append([]*listenerv3.ListenerFilter{tlsInspectorFilter()}, l.ListenerFilters...)
	l.FilterChains = append(l.FilterChains, chains...)
	return l
}
