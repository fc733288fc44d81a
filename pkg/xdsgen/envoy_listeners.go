package xdsgen

import (
	"maps"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// Sidecar listeners, after Istio's listener builder. Istio's iptables
// rules redirect a pod's outbound connections to 15001 and its inbound
// connections to 15006; only the two listeners there bind:
//   - virtualOutbound (0.0.0.0:15001, use_original_dst) hands each
//     connection to the listener matching its original destination, and
//     sends what matches none to PassthroughCluster (ALLOW_ANY) or
//     BlackHoleCluster (REGISTRY_ONLY);
//   - virtualInbound (0.0.0.0:15006) has a filter chain per port the pod
//     serves, matched on the original destination port, to the local
//     application (inbound|<port>||), and passes other ports through
//     (InboundPassthroughCluster).
//
// The per-port outbound listeners do not bind (bind_to_port false):
//   - 0.0.0.0_<port> for a port some service declares HTTP: the HTTP
//     inspector detects plaintext HTTP, which the route configuration
//     <port> routes by Host; other traffic on the port passes through;
//     and for TLS ports of services without an address, told apart by
//     SNI (envoy_sni.go);
//   - <clusterIP>_<port> for TCP ports (tcp_proxy to the cluster) and for
//     ports whose protocol is sniffed (HTTP to the route configuration
//     <host>:<port>, anything else tcp_proxy to the cluster);
//   - <podIP>_<port> for each endpoint of a headless service's TCP and
//     sniffed ports (headless services have no cluster IP to match).
// If two services share an IP and port (possible across clusters), the
// first by hostname keeps the listener.

// Ports of the bound listeners, Istio's.
const (
	VirtualOutboundPort = 15001
	VirtualInboundPort  = 15006
)

// Names of the listeners and filter chains, Istio's.
const (
	VirtualOutboundListener = "virtualOutbound"
	VirtualInboundListener  = "virtualInbound"
	passthroughChain        = "PassthroughFilterChain"
)

// protocolDetectionTimeout is Istio's default: wait for the client's first
// bytes as long as it takes (server-first protocols are proxied as TCP
// only when the port is declared TCP).
var protocolDetectionTimeout = durationpb.New(0)

func envoyListenerSet(m *model.Mesh, in *inbound, mode meshconfig.Mode, ns string, labels map[string]string, pa model.PeerAuthn) (*Set, error) {
	out, err := outboundListeners(m, mode, ns, labels)
	if err != nil {
		return nil, err
	}
	all := slices.Clone(out)
	headless, err := perServiceResources(m, keyHeadless, true, headlessListeners)
	if err != nil {
		return nil, err
	}
	all = append(all, headless...)
	vi, err := newResource(VirtualInboundListener, virtualInbound(m, in, pa, inboundSecurityFor(m, ns, labels)))
	if err != nil {
		return nil, err
	}
	all = append(all, virtualOutbound(mode), vi)
	return newSet(resource.ListenerType, all), nil
}

type outboundKey struct {
	mode       meshconfig.Mode
	vs, labels string // the client's VirtualService view and labels
}

type resourcesResult struct {
	rs  []*Resource
	err error
}

// outboundListeners are the listeners that read no endpoints: per HTTP port
// and per service TCP or sniffed port. Memoised per mesh config, mode and
// what the client's VirtualServices (tcp and tls routes) make of them.
func outboundListeners(m *model.Mesh, mode meshconfig.Mode, ns string, labels map[string]string) ([]*Resource, error) {
	key := outboundKey{mode: mode, vs: m.VirtualServiceView(ns), labels: labelsKey(m, labels)}
	r := m.ConfigMemo(key, func() any {
		var all []*Resource
		sni := sniChains(m, key.vs, labels)
		ports := httpPorts(m)
		for _, port := range ports {
			r, err := newResource(httpListenerName(port), withSNIChains(httpListener(port, mode), sni[port]))
			if err != nil {
				return resourcesResult{err: err}
			}
			all = append(all, r)
		}
		rs, err := sniListeners(sni, ports, mode)
		if err != nil {
			return resourcesResult{err: err}
		}
		all = append(all, rs...)
		rs, err = l4Listeners(m, key.vs, key.labels, labels)
		return resourcesResult{rs: append(all, rs...), err: err}
	}).(resourcesResult)
	return r.rs, r.err
}

// httpPorts are the ports with an HTTP listener, sorted: those some
// service declares HTTP, and the HTTP or sniffed ports of ExternalName
// services (they have no address of their own to match).
func httpPorts(m *model.Mesh) []int32 {
	return m.ConfigMemo(keyHTTPPorts, func() any {
		ports := make(map[int32]bool)
		for _, svc := range m.Services {
			_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
				if proto.isHTTP() || (svc.ExternalName != "" && proto.httpOrSniffed()) {
					ports[p.Port] = true
				}
				return nil
			})
		}
		return slices.Sorted(maps.Keys(ports))
	}).([]int32)
}

// hasHeadlessListeners reports whether some listener reads endpoints.
func hasHeadlessListeners(m *model.Mesh) bool {
	return m.ConfigMemo(keyHeadlessAny, func() any {
		for _, svc := range m.Services {
			if !svc.Headless {
				continue
			}
			for _, p := range svc.Ports {
				if proto := classify(p); proto == protoTCP || proto == protoAuto {
					return true
				}
			}
		}
		return false
	}).(bool)
}

func httpListenerName(port int32) string { return "0.0.0.0_" + portString(port) }

// egressCluster takes what matches no service: Istio's outbound traffic
// policy.
func egressCluster(mode meshconfig.Mode) string {
	if mode == meshconfig.RegistryOnly {
		return BlackHoleCluster
	}
	return PassthroughCluster
}

func httpListener(port int32, mode meshconfig.Mode) *listenerv3.Listener {
	name := httpListenerName(port)
	return &listenerv3.Listener{
		Name:                             name,
		Address:                          socketAddress("0.0.0.0", port),
		BindToPort:                       wrapperspb.Bool(false),
		TrafficDirection:                 corev3.TrafficDirection_OUTBOUND,
		ContinueOnListenerFiltersTimeout: true,
		ListenerFilters:                  []*listenerv3.ListenerFilter{httpInspectorFilter()},
		ListenerFiltersTimeout:           protocolDetectionTimeout,
		FilterChains: []*listenerv3.FilterChain{{
			FilterChainMatch: httpMatch(0),
			Filters:          []*listenerv3.Filter{sidecarManager("outbound_"+name, portString(port), nil, false, routeFilters()...)},
		}},
		DefaultFilterChain: passthroughFilterChain(mode),
	}
}

// passthroughFilterChain takes what matches no chain of a wildcard
// listener: Istio's outbound traffic policy.
func passthroughFilterChain(mode meshconfig.Mode) *listenerv3.FilterChain {
	return &listenerv3.FilterChain{
		Name:             passthroughChain,
		FilterChainMatch: &listenerv3.FilterChainMatch{},
		Filters:          []*listenerv3.Filter{toCluster(egressCluster(mode))},
	}
}

// httpMatch matches plaintext HTTP the HTTP inspector found (on port, if
// not 0).
func httpMatch(port int32) *listenerv3.FilterChainMatch {
	m := &listenerv3.FilterChainMatch{ApplicationProtocols: plaintextHTTPALPNs, TransportProtocol: rawBuffer}
	if port != 0 {
		m.DestinationPort = wrapperspb.UInt32(uint32(port))
	}
	return m
}

// addressListeners returns the listeners of a service's cluster IP: one per
// TCP or sniffed port.
func addressListeners(svc *model.Service, l4 *l4Routes) ([]*Resource, error) {
	if svc.ClusterIP == "" {
		return nil, nil
	}
	var out []*Resource
	err := meshPorts(svc, func(p *model.Port, proto protocol) error {
		if proto != protoTCP && proto != protoAuto {
			return nil
		}
		l := addressListener(svc, p, proto, svc.ClusterIP, l4)
		r, err := newResource(l.Name, l)
		out = append(out, r)
		return err
	})
	return out, err
}

// headlessListeners returns the listeners of a headless service's
// endpoints: one per endpoint address of each TCP or sniffed port.
func headlessListeners(svc *model.Service) ([]*Resource, error) {
	if !svc.Headless {
		return nil, nil
	}
	var out []*Resource
	err := meshPorts(svc, func(p *model.Port, proto protocol) error {
		if proto != protoTCP && proto != protoAuto {
			return nil
		}
		for i, ep := range p.Endpoints {
			if i > 0 && p.Endpoints[i-1].Address == ep.Address {
				continue
			}
			l := addressListener(svc, p, proto, ep.Address, nil)
			r, err := newResource(l.Name, l)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

func addressListener(svc *model.Service, p *model.Port, proto protocol, ip string, l4 *l4Routes) *listenerv3.Listener {
	name := ip + "_" + portString(p.Port)
	cluster := clusterName(svc, p)
	l := &listenerv3.Listener{
		Name:                             name,
		Address:                          socketAddress(ip, p.Port),
		BindToPort:                       wrapperspb.Bool(false),
		TrafficDirection:                 corev3.TrafficDirection_OUTBOUND,
		ContinueOnListenerFiltersTimeout: true,
	}
	tcp := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{toCluster(cluster)}}
	tlsChains, vsTCP := l4.chains(p.Port, ip)
	if vsTCP != nil {
		tcp = vsTCP
	}
	if proto == protoTCP {
		l.ListenerFiltersTimeout = durationpb.New(0)
		if len(tlsChains) > 0 {
			l.ListenerFilters = []*listenerv3.ListenerFilter{tlsInspectorFilter()}
			l.ListenerFiltersTimeout = protocolDetectionTimeout
		}
		l.FilterChains = append(tlsChains, tcp)
		return l
	}
	l.ListenerFilters = []*listenerv3.ListenerFilter{httpInspectorFilter()}
	l.ListenerFiltersTimeout = protocolDetectionTimeout
	l.FilterChains = []*listenerv3.FilterChain{{
		FilterChainMatch: httpMatch(0),
		Filters:          []*listenerv3.Filter{sidecarManager("outbound_"+name, sniffedRouteName(svc, p), nil, false, routeFilters()...)},
	}}
	l.DefaultFilterChain = tcp
	return l
}

// sniffedRouteName is the route configuration of a sniffed port:
// <host>:<port>.
func sniffedRouteName(svc *model.Service, p *model.Port) string {
	return svc.Hostname + ":" + portString(p.Port)
}

var (
	virtualOutboundAllowAny     = sync.OnceValue(func() *Resource { return mustResource(virtualOutboundListener(meshconfig.AllowAny)) })
	virtualOutboundRegistryOnly = sync.OnceValue(func() *Resource { return mustResource(virtualOutboundListener(meshconfig.RegistryOnly)) })
)

func virtualOutbound(mode meshconfig.Mode) *Resource {
	if mode == meshconfig.RegistryOnly {
		return virtualOutboundRegistryOnly()
	}
	return virtualOutboundAllowAny()
}

func mustResource(l *listenerv3.Listener) *Resource {
	r, err := newResource(l.Name, l)
	if err != nil {
		panic("xdsgen: " + err.Error())
	}
	return r
}

func virtualOutboundListener(mode meshconfig.Mode) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:             VirtualOutboundListener,
		Address:          socketAddress("0.0.0.0", VirtualOutboundPort),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerv3.FilterChain{
			{
				// A connection to 15001 itself would loop.
				Name:             VirtualOutboundListener + "-blackhole",
				FilterChainMatch: &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(VirtualOutboundPort)},
				Filters:          []*listenerv3.Filter{toCluster(BlackHoleCluster)},
			},
			{
				Name:    VirtualOutboundListener + "-catchall-tcp",
				Filters: []*listenerv3.Filter{toCluster(egressCluster(mode))},
			},
		},
	}
}
