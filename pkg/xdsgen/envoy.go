package xdsgen

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/pilotwire/pilotwire/pkg/model"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The Envoy sidecar generator, after Istio's outbound configuration.
//
// A sidecar's virtualOutbound listener (not generated here) hands each
// connection to the listener matching its original destination, so these
// listeners do not bind: bind_to_port is false.
//   - HTTP ports (and unnamed or unknown ones) share one listener per port,
//     0.0.0.0_<port>, whose connection manager routes with the route
//     configuration <port>: one virtual host per service with that port.
//   - TCP ports get a listener per service, <clusterIP>_<port>, proxying to
//     the service's cluster. Headless services have no address to match and
//     get none. If two services share an IP and port (possible across
//     clusters), the first by hostname keeps the listener.

func envoyClusterSet(m *model.Mesh) (*Set, error) {
	return perService(m, resource.ClusterType, keyEnvoyCDS, false, envoyClusters)
}

func envoyClusters(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, proto protocol) error {
		name := clusterName(svc, p)
		c := edsCluster(name)
		if proto == protoHTTP2 {
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsKey: http2Options()}
		}
		r, err := newResource(name, c)
		out = append(out, r)
		return err
	})
	return out, err
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

func envoyListenerSet(m *model.Mesh) (*Set, error) {
	var all []*Resource
	httpPorts := make(map[int32]bool)
	for _, svc := range m.Services {
		_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
			if proto.isHTTP() {
				httpPorts[p.Port] = true
			}
			return nil
		})
		rs, err := serviceResources(svc, keyEnvoyTCP, false, tcpListeners)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	for _, port := range slices.Sorted(maps.Keys(httpPorts)) {
		r, err := newResource(httpListenerName(port), httpListener(port))
		if err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	return newSet(resource.ListenerType, all), nil
}

func httpListenerName(port int32) string { return "0.0.0.0_" + strconv.Itoa(int(port)) }

func httpListener(port int32) *listenerv3.Listener {
	name := httpListenerName(port)
	return &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress("0.0.0.0", port),
		BindToPort:       wrapperspb.Bool(false),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       hcmFilterName,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(rdsManager("outbound_"+name, strconv.Itoa(int(port))))},
			}},
		}},
	}
}

// tcpListeners returns the TCP-proxy listeners of one service.
func tcpListeners(svc *model.Service) ([]*Resource, error) {
	if svc.ClusterIP == "" {
		return nil, nil
	}
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, proto protocol) error {
		if proto != protoTCP {
			return nil
		}
		name := svc.ClusterIP + "_" + strconv.Itoa(int(p.Port))
		cluster := clusterName(svc, p)
		l := &listenerv3.Listener{
			Name:             name,
			Address:          socketAddress(svc.ClusterIP, p.Port),
			BindToPort:       wrapperspb.Bool(false),
			TrafficDirection: corev3.TrafficDirection_OUTBOUND,
			FilterChains: []*listenerv3.FilterChain{{
				Filters: []*listenerv3.Filter{{
					Name: tcpProxyName,
					ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&tcpproxyv3.TcpProxy{
						StatPrefix:       cluster,
						ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster},
					})},
				}},
			}},
		}
		r, err := newResource(name, l)
		out = append(out, r)
		return err
	})
	return out, err
}

// envoyRouteSet builds one route configuration per HTTP port.
func envoyRouteSet(m *model.Mesh) (*Set, error) {
	type vhostSvc struct {
		svc  *model.Service
		port *model.Port
	}
	byPort := make(map[int32][]vhostSvc)
	for _, svc := range m.Services {
		_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
			if proto.isHTTP() {
				byPort[p.Port] = append(byPort[p.Port], vhostSvc{svc, p})
			}
			return nil
		})
	}
	var all []*Resource
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		svcs := byPort[port]
		domains := make([][]string, len(svcs))
		claims := make(map[string]int)
		for i, v := range svcs {
			domains[i] = serviceDomains(v.svc, port)
			for _, d := range domains[i] {
				claims[d]++
			}
		}
		rc := &routev3.RouteConfiguration{Name: strconv.Itoa(int(port))}
		for i, v := range svcs {
			// A domain claimed by several services (a short name such as
			// "web" shared by web.a and web.b) is ambiguous without knowing
			// the client's namespace: it is left out rather than guessed.
			ds := slices.DeleteFunc(domains[i], func(d string) bool { return claims[d] > 1 })
			rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
				Name:    v.svc.Hostname + ":" + strconv.Itoa(int(port)),
				Domains: ds,
				Routes:  []*routev3.Route{defaultRoute(clusterName(v.svc, v.port), noTimeout)},
			})
		}
		// Services come sorted by hostname, so virtual hosts are too.
		r, err := newResource(rc.Name, rc)
		if err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	return newSet(resource.RouteType, all), nil
}

// noTimeout disables Envoy's default 15s route timeout, as Istio does.
var noTimeout = durationpb.New(0)

// serviceDomains returns the names a client may use for a service, each with
// and without the port: the hostname and Istio's short forms.
func serviceDomains(svc *model.Service, port int32) []string {
	p := ":" + strconv.Itoa(int(port))
	names := []string{
		svc.Hostname,
		svc.Name + "." + svc.Namespace + ".svc",
		svc.Name + "." + svc.Namespace,
		svc.Name,
	}
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, n, n+p)
	}
	return out
}
