package xdsgen

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Router (gateway) listeners and routes, after Istio's gateway builder. A
// router proxy (node id router~...) serves the servers of every Istio
// Gateway whose selector its workload labels match (its own labels, else
// those of the endpoints with its IP). A server binds the target port of
// the Service port with its number, of the first Service (by hostname) in
// the router's namespace that has the router's IP as an endpoint (Istio's
// resolvePorts for gateways selected by labels: an ingress gateway Service
// port 80 with targetPort 8080 binds 8080); a server port no such Service
// has binds as it is. Per bound port, one bound listener 0.0.0.0_<port>:
//   - HTTP servers share one filter chain, routed by the route
//     configuration http.<bound port>;
//   - HTTPS servers each get a chain matched on their hosts (SNI) that
//     terminates TLS with the certificate credentialName names, fetched
//     over SDS (credentialResourceName: kubernetes://<credentialName>, or
//     the name as it is when it names its kind, as Gateway API's
//     kubernetes-gateway://<ns>/<name>), routed by
//     https.<server port>.<portName>.<gateway>.<ns>;
//   - TLS PASSTHROUGH servers take the VirtualServices' tls routes
//     (matched on SNI), TCP servers their tcp routes.
//
// A route configuration has a virtual host per host that a server and a
// VirtualService bound to its gateway both name (the more specific of
// the two), whose routes are those of every such VirtualService in
// [model.Mesh.VirtualServices] order, catch-alls last (Istio merges
// gateway VirtualServices this way). Without any, a blackhole host
// answers 404. Servers on a port another protocol took first are dropped.
// Virtual host names and VirtualService port matches use the server's port.

// serverOn is one server of one gateway.
type serverOn struct {
	gw  *model.Gateway
	srv *networkingv1.Server
}

// routerPort is what a router serves on one bound port, servers in
// gateway order.
type routerPort struct {
	port     uint32 // bound
	protocol string // of the first server
	servers  []serverOn
}

// routerPorts groups the servers of gws by the port they bind (targets:
// [routerTargets]).
func routerPorts(gws []*model.Gateway, targets []portTarget) []*routerPort {
	byPort := map[uint32]*routerPort{}
	var out []*routerPort
	for _, g := range gws {
		for _, s := range g.Servers {
			n, proto := boundPort(s.GetPort().GetNumber(), targets), model.ServerProtocol(s)
			rp := byPort[n]
			if rp == nil {
				rp = &routerPort{port: n, protocol: proto}
				byPort[n] = rp
				out = append(out, rp)
			}
			if plaintextHTTP(proto) != plaintextHTTP(rp.protocol) || (proto == "TLS" || proto == "TCP") != (rp.protocol == "TLS" || rp.protocol == "TCP") {
				continue // another protocol took the port
			}
			rp.servers = append(rp.servers, serverOn{g, s})
		}
	}
	slices.SortFunc(out, func(a, b *routerPort) int { return cmp.Compare(a.port, b.port) })
	return out
}

func plaintextHTTP(proto string) bool { return proto == "HTTP" || proto == "HTTP2" || proto == "GRPC" }

// portTarget is one port of a Service the router's pod backs: the
// Service port and the pod's port it forwards to.
type portTarget struct{ port, target uint32 }

// boundPort is the port a server with port number n binds: the target of
// the first Service port numbered n, else n.
func boundPort(n uint32, targets []portTarget) uint32 {
	for _, t := range targets {
		if t.port == n {
			return t.target
		}
	}
	return n
}

// routerTargetsKey memoises [routerTargets] per mesh.
type routerTargetsKey struct{ ns, ip string }

// routerTargets are the ports of the Services in namespace ns that have ip
// as an endpoint (Istio's service targets of the router's pod), Services
// by hostname, ports in order. As Istio, a Service keeps one port per
// target port and protocol: the first.
func routerTargets(full *model.Mesh, ns, ip string) []portTarget {
	if ip == "" {
		return nil
	}
	return full.Memo(routerTargetsKey{ns, ip}, func() any {
		var out []portTarget
		type targetProto struct {
			target int32
			proto  protocol
		}
		for _, svc := range full.Services {
			if svc.Namespace != ns {
				continue
			}
			var seen []targetProto
			for _, p := range svc.Ports {
				// Endpoints are sorted by address first.
				i, ok := slices.BinarySearchFunc(p.Endpoints, ip, func(e model.Endpoint, ip string) int { return strings.Compare(e.Address, ip) })
				if !ok {
					continue
				}
				tp := targetProto{p.Endpoints[i].Port, classify(p)}
				if slices.Contains(seen, tp) {
					continue
				}
				seen = append(seen, tp)
				out = append(out, portTarget{uint32(p.Port), uint32(tp.target)})
			}
		}
		return out
	}).([]portTarget)
}

// routerKey names what a router's sets depend on: its gateways, namespace
// and the ports its servers bind.
func routerKey(full, m *model.Mesh, p Proxy, typeURL string) (proxyKey, []*model.Gateway, []portTarget) {
	gws := m.GatewaysFor(p.workloadLabels(full))
	var targets []portTarget
	if len(gws) > 0 {
		targets = routerTargets(full, p.Namespace, p.IP)
	}
	var b strings.Builder
	for _, g := range gws {
		b.WriteString(g.Ref() + ",")
		for _, s := range g.Servers {
			if n, bound := s.GetPort().GetNumber(), boundPort(s.GetPort().GetNumber(), targets); bound != n {
				b.WriteString(portString(int32(n)) + ">" + portString(int32(bound)) + ",")
			}
		}
	}
	return proxyKey{gen: Envoy, typeURL: "router-" + typeURL, ns: p.Namespace, inbound: b.String(), rules: m.DestinationRuleView(p.Namespace)}, gws, targets
}

func routerListenerSet(m *model.Mesh, ns string, gws []*model.Gateway, targets []portTarget) (*Set, error) {
	var all []*Resource
	for _, rp := range routerPorts(gws, targets) {
		l := routerListener(m, ns, rp)
		if len(l.FilterChains) == 0 {
			continue
		}
		r, err := newResource(l.Name, l)
		if err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	return newSet(resource.ListenerType, all), nil
}

func routerListener(m *model.Mesh, ns string, rp *routerPort) *listenerv3.Listener {
	name := "0.0.0.0_" + portString(int32(rp.port))
	l := &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress("0.0.0.0", int32(rp.port)),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
	switch {
	case plaintextHTTP(rp.protocol):
		l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{routerManager(name, "http."+portString(int32(rp.port)))}}}
	case rp.protocol == "HTTPS":
		l.ListenerFilters = []*listenerv3.ListenerFilter{tlsInspectorFilter()}
		for _, s := range rp.servers {
			l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
				FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: sniHosts(s.srv.GetHosts())},
				TransportSocket:  downstreamTLS(s.srv.GetTls()),
				Filters:          []*listenerv3.Filter{routerManager(name, httpsRouteName(s))},
			})
		}
		dedupeChains(l)
	default: // TLS passthrough and TCP
		l.FilterChains = routerL4Chains(m, ns, rp)
		if rp.protocol == "TLS" {
			l.ListenerFilters = []*listenerv3.ListenerFilter{tlsInspectorFilter()}
		}
	}
	return l
}

// dedupeChains drops chains whose match an earlier one has (Envoy
// rejects duplicates): the first server keeps the hosts.
func dedupeChains(l *listenerv3.Listener) {
	seen := map[string]bool{}
	l.FilterChains = slices.DeleteFunc(l.FilterChains, func(fc *listenerv3.FilterChain) bool {
		k := strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")
		if seen[k] {
			return true
		}
		seen[k] = true
		return false
	})
}

func httpsRouteName(s serverOn) string {
	return "https." + portString(int32(s.srv.GetPort().GetNumber())) + "." + s.srv.GetPort().GetName() + "." + s.gw.Name + "." + s.gw.Namespace
}

// sniHosts are the server's hosts as SNI names: the namespace part
// dropped, "*" (any) as no names.
func sniHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		_, host := splitServerHost(h)
		if host == "*" {
			return nil
		}
		if !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	return out
}

// splitServerHost splits a server host [namespace/]host; no namespace
// is "*".
func splitServerHost(h string) (ns, host string) {
	if n, rest, ok := strings.Cut(h, "/"); ok {
		return n, strings.ToLower(rest)
	}
	return "*", strings.ToLower(h)
}

// downstreamTLS terminates TLS with the certificate named by
// credentialName (and its CA, <name>-cacert, for MUTUAL), over SDS.
func downstreamTLS(t *networkingv1.ServerTLSSettings) *corev3.TransportSocket {
	cred := t.GetCredentialName()
	if cred == "" && len(t.GetCredentialNames()) > 0 {
		cred = t.GetCredentialNames()[0]
	}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(credentialResourceName(cred))},
		AlpnProtocols:                  []string{"h2", "http/1.1"},
	}}
	if t.GetMode() == networkingv1.ServerTLSSettings_MUTUAL || t.GetMode() == networkingv1.ServerTLSSettings_OPTIONAL_MUTUAL {
		ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: sdsSecret(credentialResourceName(cred + "-cacert")),
		}
		ctx.RequireClientCertificate = wrapperspb.Bool(t.GetMode() == networkingv1.ServerTLSSettings_MUTUAL)
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// credentialResourceName is the SDS resource name of a credentialName, as
// Istio names it: a name that says its kind (kubernetes://,
// kubernetes-gateway://, configmap://) is kept, any other is a Secret in
// the proxy's namespace, kubernetes://<name>.
func credentialResourceName(cred string) string {
	for _, kind := range []string{"kubernetes://", "kubernetes-gateway://", "configmap://"} {
		if strings.HasPrefix(cred, kind) {
			return cred
		}
	}
	return "kubernetes://" + cred
}

func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSourceNoTimeout()}
}

// routerManager is a gateway's HTTP connection manager: it is the edge,
// so it trusts the client's address for internal/external decisions; it
// passes 100-continue through, as sidecars do.
func routerManager(listener, rds string) *listenerv3.Filter {
	h := &hcmv3.HttpConnectionManager{
		StatPrefix:        "outbound_" + listener,
		CodecType:         hcmv3.HttpConnectionManager_AUTO,
		HttpFilters:       append(slices.Clip(routeFilters()), routerFilter()),
		UseRemoteAddress:  wrapperspb.Bool(true),
		StreamIdleTimeout: durationpb.New(0),
		NormalizePath:     wrapperspb.Bool(true),
		RouteSpecifier:    &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: adsSourceNoTimeout(), RouteConfigName: rds}},
		UpgradeConfigs:    []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}},
		Proxy_100Continue: true,
	}
	return &listenerv3.Filter{Name: hcmFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(h)}}
}

// boundVS is a VirtualService bound to one gateway server, with the host
// they share.
func boundVirtualServices(m *model.Mesh, ns string, s serverOn) []struct {
	vs    *model.VirtualService
	hosts []string
} {
	var out []struct {
		vs    *model.VirtualService
		hosts []string
	}
	for _, vs := range m.VirtualServices(ns, s.gw.Ref()) {
		var hosts []string
		for _, sh := range s.srv.GetHosts() {
			sns, shost := splitServerHost(sh)
			if sns != "*" && sns != "." && sns != vs.Namespace || sns == "." && vs.Namespace != s.gw.Namespace {
				continue
			}
			for _, vh := range vs.Hosts {
				if h := intersectHost(shost, vh); h != "" && !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
		if len(hosts) > 0 {
			out = append(out, struct {
				vs    *model.VirtualService
				hosts []string
			}{vs, hosts})
		}
	}
	return out
}

// intersectHost is the more specific of two hosts when one matches the
// other, else "".
func intersectHost(a, b string) string {
	switch {
	case model.HostMatches(a, b):
		return b
	case model.HostMatches(b, a):
		return a
	}
	return ""
}

// routerRouteSet is the route configurations of the router's HTTP and
// HTTPS servers.
func routerRouteSet(m *model.Mesh, ns string, gws []*model.Gateway, targets []portTarget) (*Set, error) {
	var all []*Resource
	for _, rp := range routerPorts(gws, targets) {
		switch {
		case plaintextHTTP(rp.protocol):
			r, err := routerRoute(m, ns, "http."+portString(int32(rp.port)), rp.servers)
			if err != nil {
				return nil, err
			}
			all = append(all, r)
		case rp.protocol == "HTTPS":
			for _, s := range rp.servers {
				r, err := routerRoute(m, ns, httpsRouteName(s), []serverOn{s})
				if err != nil {
					return nil, err
				}
				all = append(all, r)
			}
		}
	}
	return newSet(resource.RouteType, all), nil
}

func routerRoute(m *model.Mesh, ns, name string, servers []serverOn) (*Resource, error) {
	vhosts := map[string]*routev3.VirtualHost{}
	for _, s := range servers {
		port := int32(s.srv.GetPort().GetNumber())
		c := routeCtx{port: port, gateways: []string{s.gw.Ref()}, ns: ns, tls: s.srv.GetTls() != nil, rules: ns}
		for _, b := range boundVirtualServices(m, ns, s) {
			routes := vsRoutes(m, b.vs, c)
			if len(routes) == 0 {
				continue
			}
			for _, h := range b.hosts {
				vh := vhosts[h]
				if vh == nil {
					vh = &routev3.VirtualHost{Name: h + ":" + portString(port), Domains: []string{h}, IncludeRequestAttemptCount: true}
					vhosts[h] = vh
				}
				vh.Routes = append(vh.Routes, routes...)
				if s.srv.GetTls().GetHttpsRedirect() {
					vh.RequireTls = routev3.VirtualHost_ALL
				}
			}
		}
		for _, sh := range s.srv.GetHosts() {
			if !s.srv.GetTls().GetHttpsRedirect() {
				continue
			}
			_, h := splitServerHost(sh)
			if vhosts[h] == nil {
				vhosts[h] = &routev3.VirtualHost{Name: h + ":" + portString(port), Domains: []string{h}, IncludeRequestAttemptCount: true}
			}
			vhosts[h].RequireTls = routev3.VirtualHost_ALL
		}
	}
	rc := &routev3.RouteConfiguration{
		Name:                           name,
		ValidateClusters:               wrapperspb.Bool(false),
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
		IgnorePortInHostMatching:       true,
	}
	for _, h := range slices.Sorted(maps.Keys(vhosts)) {
		vh := vhosts[h]
		// Catch-all routes last, order kept otherwise.
		slices.SortStableFunc(vh.Routes, func(a, b *routev3.Route) int {
			return cmp.Compare(boolInt(isCatchAll(a)), boolInt(isCatchAll(b)))
		})
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
	}
	if len(rc.VirtualHosts) == 0 {
		port := int32(servers[0].srv.GetPort().GetNumber())
		// No routes: Envoy answers 404 (NR).
		rc.VirtualHosts = []*routev3.VirtualHost{{Name: "blackhole:" + portString(port), Domains: []string{"*"}}}
	}
	return newResource(name, rc)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// routerL4Chains are the chains of a TLS passthrough or TCP port: per
// tls route match of a bound VirtualService (SNI), then the first tcp
// route.
func routerL4Chains(m *model.Mesh, ns string, rp *routerPort) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	var tcp *listenerv3.FilterChain
	seen := map[string]bool{}
	listener := "0.0.0.0_" + portString(int32(rp.port))
	for _, s := range rp.servers {
		port := int32(s.srv.GetPort().GetNumber())
		c := routeCtx{port: port, gateways: []string{s.gw.Ref()}, ns: ns}
		for _, b := range boundVirtualServices(m, ns, s) {
			for _, t := range b.vs.Spec.GetTls() {
				for _, mt := range t.GetMatch() {
					if !c.appliesL4(mt.GetPort(), mt.GetGateways(), mt.GetSourceLabels(), mt.GetSourceNamespace()) {
						continue
					}
					sni := claimSNI(seen, mt.GetSniHosts())
					if len(sni) == 0 {
						continue
					}
					out = append(out, &listenerv3.FilterChain{
						FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: sni},
						Filters:          []*listenerv3.Filter{l4Proxy(m, "outbound_tls_"+listener, t.GetRoute(), port)},
					})
				}
			}
			for _, t := range b.vs.Spec.GetTcp() {
				if tcp != nil {
					break
				}
				applies := len(t.GetMatch()) == 0
				for _, mt := range t.GetMatch() {
					applies = applies || c.appliesL4(mt.GetPort(), mt.GetGateways(), mt.GetSourceLabels(), mt.GetSourceNamespace())
				}
				if applies {
					tcp = &listenerv3.FilterChain{Filters: []*listenerv3.Filter{l4Proxy(m, "outbound_tcp_"+listener, t.GetRoute(), port)}}
				}
			}
		}
	}
	if tcp != nil {
		out = append(out, tcp)
	}
	return out
}
