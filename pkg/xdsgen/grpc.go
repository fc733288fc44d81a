package xdsgen

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// The proxyless gRPC generator. A client dialling xds:///<host>:<port> asks
// for the listener <host>:<port>: an API listener whose HTTP connection
// manager takes the route configuration of the same name over ADS, with the
// router filter last (gRPC rejects anything else). Every TCP port of a
// service is served, whatever its protocol: the client decides what to dial.

// GRPCServerListenerPrefix starts the names of the listeners gRPC servers
// ask for: a server listening on addr asks for the listener
// GRPCServerListenerPrefix+addr (Istio's bootstrap sets the template
// "xds.istio.io/grpc/lds/inbound/%s"; grpc-go has no default).
const GRPCServerListenerPrefix = "xds.istio.io/grpc/lds/inbound/"

// grpcListenerSet is the client listeners of every service, and, for a
// proxy whose pod serves ports (in), a server listener per port for each
// address a server may listen on: 0.0.0.0, [::] and the pod IP, with the
// TLS of the workload's PeerAuthentication pa on that port (xdsCreds: the
// workload uses xDS credentials; grpc_mtls.go) and the authorization
// filters.
func grpcListenerSet(m *model.Mesh, in *inbound, ip string, pa model.PeerAuthn, xdsCreds bool, filters []*hcmv3.HttpFilter) (*Set, error) {
	all, err := perServiceResources(m, keyGRPCOut, false, grpcListeners)
	if err != nil {
		return nil, err
	}
	for _, p := range inboundPorts(in) {
		mode := grpcServerMode(pa, xdsCreds, p.target)
		for _, host := range []string{"0.0.0.0", "::", ip} {
			l := grpcServerListener(host, p.target, mode, filters)
			r, err := newResource(l.Name, l)
			if err != nil {
				return nil, err
			}
			all = append(all, r)
		}
	}
	return newSet(resource.ListenerType, all), nil
}

// grpcServerListener is what a gRPC server listening on host:port serves
// with: one filter chain, mTLS required when mode is STRICT, else
// plaintext (grpcServerMode never gives PERMISSIVE); every RPC to the
// server itself (non_forwarding_action), the authorization filters
// (grpc_rbac.go), the router last.
func grpcServerListener(host string, port int32, mode model.MTLSMode, filters []*hcmv3.HttpFilter) *listenerv3.Listener {
	name := GRPCServerListenerPrefix + net.JoinHostPort(host, portString(port))
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound_" + portString(port),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "inbound",
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "inbound|grpc|" + portString(port),
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: append(slices.Clip(filters), routerFilter()),
	}
	fc := &listenerv3.FilterChain{
		Name:    "inbound-plaintext",
		Filters: []*listenerv3.Filter{{Name: hcmFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)}}},
	}
	if mode == model.MTLSStrict {
		fc.Name = "inbound-mtls"
		fc.TransportSocket = grpcServerTLS()
	}
	return &listenerv3.Listener{
		Name:         name,
		Address:      socketAddress(host, port),
		FilterChains: []*listenerv3.FilterChain{fc},
	}
}

// grpcRouteSet is every service's route configurations, memoised per
// service under the DestinationRule and VirtualService the client applies.
func grpcRouteSet(m *model.Mesh, ns string, labels map[string]string) (*Set, error) {
	key := routeKey{rules: m.DestinationRuleView(ns), vs: m.VirtualServiceView(ns), labels: labelsKey(m, labels)}
	var all []*Resource
	for _, svc := range m.Services {
		dr := m.DestinationRule(ns, svc)
		sr := sidecarRoutes{vs: m.VirtualServiceFor(key.vs, svc.Hostname), key: key, labels: labels}
		if sr.vs != nil && len(sr.vs.Spec.GetHttp()) == 0 {
			sr.vs = nil
		}
		var k any = keyGRPCRDS // boxed once: services without config cost no allocation
		if dr != nil || sr.vs != nil {
			k = grpcRouteKey{dr: dr, vs: sr.vs, rules: key.rules, labels: key.labels}
		}
		r := svc.ConfigMemo(k, func() any {
			rs, err := grpcRoutes(m, svc, dr, sr)
			return serviceResult{resources: rs, err: err}
		}).(serviceResult)
		if r.err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.Hostname, r.err)
		}
		all = append(all, r.resources...)
	}
	return newSet(resource.RouteType, all), nil
}

type grpcRouteKey struct {
	dr            *model.DestinationRule
	vs            *model.VirtualService
	rules, labels string
}

// grpcClusterSet is every service's clusters for a client in namespace ns;
// autoMTLS says the client uses xDS credentials (grpc_mtls.go).
func grpcClusterSet(m *model.Mesh, ns string, autoMTLS bool) (*Set, error) {
	key, gen := keyGRPCCDS, grpcClusters
	if autoMTLS {
		key = keyGRPCCDSMTLS
		gen = func(m *model.Mesh, svc *model.Service, dr *model.DestinationRule) ([]*Resource, error) {
			return grpcClustersTLS(m, svc, dr, true)
		}
	}
	all, err := perServiceRuled(m, ns, key, gen)
	if err != nil {
		return nil, err
	}
	return newSet(resource.ClusterType, all), nil
}

// grpcTarget is the authority a gRPC client dials: <host>:<port>.
func grpcTarget(svc *model.Service, p *model.Port) string {
	return svc.Hostname + ":" + strconv.Itoa(int(p.Port))
}

func grpcListeners(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		name := grpcTarget(svc, p)
		l := &listenerv3.Listener{
			Name:        name,
			ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(rdsManager(name, name, faultFilter()))},
		}
		r, err := newResource(name, l)
		out = append(out, r)
		return err
	})
	return out, err
}

// grpcRoutes route each port by the VirtualService's http routes, as far
// as grpc-go implements them (path and header matches, weighted clusters,
// retries on gRPC codes, max stream duration, fault injection, hash
// policies by header; what else the model lists as a problem), or to the
// port's default cluster, with the hash policy of the rule's consistent
// hash (by header: what gRPC honours).
func grpcRoutes(m *model.Mesh, svc *model.Service, dr *model.DestinationRule, sr sidecarRoutes) ([]*Resource, error) {
	var out []*Resource
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		name := grpcTarget(svc, p)
		var routes []*routev3.Route
		if sr.vs != nil {
			routes = vsRoutes(m, sr.vs, routeCtx{port: p.Port, gateways: meshGateways, ns: sr.key.vs, labels: sr.labels, rules: sr.key.rules, grpc: true})
		}
		if len(routes) == 0 {
			route := defaultRoute(clusterName(svc, p), nil)
			if dr != nil {
				route.GetRoute().HashPolicy = grpcHashPolicy(dr.ConsistentHash(p.Port, ""))
			}
			route.GetRoute().RetryPolicy = retryPolicy(m, nil, false, true)
			routes = []*routev3.Route{route}
		}
		rc := &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    name,
				Domains: []string{name, svc.Hostname},
				Routes:  routes,
			}},
		}
		r, err := newResource(name, rc)
		out = append(out, r)
		return err
	})
	return out, err
}

// grpcClusters are the EDS clusters of each port and of each subset of
// the rule, with what gRPC supports of its traffic policy, for a client
// that does not use xDS credentials unless a rule says so.
func grpcClusters(m *model.Mesh, svc *model.Service, dr *model.DestinationRule) ([]*Resource, error) {
	return grpcClustersTLS(m, svc, dr, false)
}

// grpcClustersTLS are grpcClusters for a client that uses xDS credentials
// (autoMTLS) or not.
func grpcClustersTLS(m *model.Mesh, svc *model.Service, dr *model.DestinationRule, autoMTLS bool) ([]*Resource, error) {
	var out []*Resource
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		for _, subset := range append([]string{""}, subsetNames(dr)...) {
			name := model.OutboundClusterName(p.Port, subset, svc.Hostname)
			c := edsCluster(name)
			tp := m.TrafficPolicy(dr, p.Port, subset)
			if dr != nil || m.HasDefaultTrafficPolicy() {
				grpcTrafficPolicy(c, tp)
			}
			c.TransportSocket = grpcClusterTLS(m, svc, p, tp, autoMTLS)
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
