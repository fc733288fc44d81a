package xdsgen

import (
	"net/netip"
	"slices"
	"sync"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// VirtualService tcp and tls routes on a sidecar's TCP ports, after
// Istio's: the listener <clusterIP>_<port> of a service gets a filter
// chain per tls route, matched on the SNI the TLS inspector reads
// (server_names), in order, and its plain chain proxies to the first tcp
// route that applies (weighted clusters), else to the service's cluster.
// Sniffed ports take tcp routes on their non-HTTP chain. Headless
// services' per-endpoint listeners do not read VirtualServices yet.

const tlsInspectorName = "envoy.filters.listener.tls_inspector"

var tlsInspectorFilter = sync.OnceValue(func() *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{
		Name:       tlsInspectorName,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&tlsinspectorv3.TlsInspector{})},
	}
})

// l4Routes is the VirtualService a service's TCP listeners read, and for
// whom; a nil *l4Routes has no routes.
type l4Routes struct {
	m  *model.Mesh
	vs *model.VirtualService
	c  routeCtx
}

type l4Key struct {
	vs     *model.VirtualService
	ns     string
	labels string
}

// l4Listeners are the cluster-IP listeners of every service, under the
// VirtualService (with tcp or tls routes) the client's view gives each.
func l4Listeners(m *model.Mesh, ns, labelsKey string, labels map[string]string) ([]*Resource, error) {
	var all []*Resource
	for _, svc := range m.Services {
		vs := m.VirtualServiceFor(ns, svc.Hostname)
		if vs != nil && len(vs.Spec.GetTcp())+len(vs.Spec.GetTls()) == 0 {
			vs = nil
		}
		if vs == nil {
			rs, err := serviceResources(svc, keyEnvoyTCP, false, func(svc *model.Service) ([]*Resource, error) { return addressListeners(svc, nil) })
			if err != nil {
				return nil, err
			}
			all = append(all, rs...)
			continue
		}
		l4 := &l4Routes{m: m, vs: vs, c: routeCtx{gateways: meshGateways, ns: ns, labels: labels}}
		rs, err := serviceResources(svc, l4Key{vs, ns, labelsKey}, false, func(svc *model.Service) ([]*Resource, error) { return addressListeners(svc, l4) })
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	return all, nil
}

// chains returns the filter chains of the tls routes applying to port on
// address ip, and the chain of the first tcp route (nil: none applies).
func (l *l4Routes) chains(port int32, ip string) ([]*listenerv3.FilterChain, *listenerv3.FilterChain) {
	if l == nil {
		return nil, nil
	}
	c := l.c
	c.port = port
	var tlsChains []*listenerv3.FilterChain
	seen := map[string]bool{}
	for _, t := range l.vs.Spec.GetTls() {
		for _, mt := range t.GetMatch() {
			if !c.appliesL4(mt.GetPort(), mt.GetGateways(), mt.GetSourceLabels(), mt.GetSourceNamespace()) ||
				!inSubnets(mt.GetDestinationSubnets(), ip) {
				continue
			}
			// Envoy rejects two chains with the same match: the first keeps
			// each SNI.
			sni := claimSNI(seen, mt.GetSniHosts())
			if len(sni) == 0 {
				continue
			}
			tlsChains = append(tlsChains, &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: sni, TransportProtocol: "tls"},
				Filters:          []*listenerv3.Filter{l4Proxy(l.m, "outbound_tls_"+ip+"_"+portString(port), t.GetRoute(), port)},
			})
		}
	}
	for _, t := range l.vs.Spec.GetTcp() {
		applies := len(t.GetMatch()) == 0
		for _, mt := range t.GetMatch() {
			if c.appliesL4(mt.GetPort(), mt.GetGateways(), mt.GetSourceLabels(), mt.GetSourceNamespace()) && inSubnets(mt.GetDestinationSubnets(), ip) {
				applies = true
				break
			}
		}
		if applies {
			return tlsChains, &listenerv3.FilterChain{Filters: []*listenerv3.Filter{l4Proxy(l.m, "outbound_tcp_"+ip+"_"+portString(port), t.GetRoute(), port)}}
		}
	}
	return tlsChains, nil
}

// appliesL4 is [routeCtx.applies] for tcp and tls matches.
func (c routeCtx) appliesL4(port uint32, gateways []string, sourceLabels map[string]string, sourceNS string) bool {
	return c.applies(&networkingv1.HTTPMatchRequest{Port: port, Gateways: gateways, SourceLabels: sourceLabels, SourceNamespace: sourceNS})
}

// inSubnets reports whether ip is in one of the subnets (IPs or CIDRs);
// no subnets is every address.
func inSubnets(subnets []string, ip string) bool {
	if len(subnets) == 0 {
		return true
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, s := range subnets {
		if p, err := netip.ParsePrefix(s); err == nil && p.Contains(addr) {
			return true
		}
		if a, err := netip.ParseAddr(s); err == nil && a == addr {
			return true
		}
	}
	return false
}

// l4Proxy proxies to the route's destinations: one cluster, or weighted.
func l4Proxy(m *model.Mesh, statPrefix string, dests []*networkingv1.RouteDestination, port int32) *listenerv3.Filter {
	tp := &tcpproxyv3.TcpProxy{StatPrefix: statPrefix}
	if len(dests) == 1 {
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: destinationCluster(m, dests[0].GetDestination(), port)}
	} else {
		wc := &tcpproxyv3.TcpProxy_WeightedCluster{}
		for _, d := range dests {
			if d.GetWeight() == 0 {
				continue
			}
			wc.Clusters = append(wc.Clusters, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{
				Name: destinationCluster(m, d.GetDestination(), port), Weight: uint32(d.GetWeight()),
			})
		}
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	return &listenerv3.Filter{Name: tcpProxyName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)}}
}

// claimSNI returns the hosts not in seen and adds them: Envoy rejects two
// chains with the same match, so the first route keeps each SNI.
func claimSNI(seen map[string]bool, hosts []string) []string {
	out := slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { return seen[h] })
	for _, h := range out {
		seen[h] = true
	}
	return out
}
