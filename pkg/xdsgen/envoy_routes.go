package xdsgen

import (
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// Sidecar route configurations, after Istio's:
//   - <port> for each HTTP listener 0.0.0.0_<port>: a virtual host
//     <host>:<port> per service with an HTTP or sniffed port <port>, whose
//     domains are the names a client in the proxy's namespace may use (the
//     hostname; for <name>.<ns>.svc.cluster.local hostnames name.ns and
//     name.ns.svc, and the bare name in namespace ns; for headless
//     services the same under "*."), and the
//     cluster IP. Ports in the Host header are ignored
//     (ignore_port_in_host_matching), so "10.0.0.1:8080" matches
//     "10.0.0.1". Last comes the catch-all host "*": allow_any to
//     PassthroughCluster, or block_all answering 502 under REGISTRY_ONLY.
//   - <host>:<port> for a sniffed port: one virtual host, "*", to the
//     service (its listener already matched the destination).

type routeKey struct {
	port   int32
	ns     string
	rules  string // the client's DestinationRule view
	vs     string // the client's VirtualService view
	labels string // the client's workload labels, when routes match on them
	mode   meshconfig.Mode
}

type vhostKey struct {
	port int32
	same bool // the client is in the service's namespace
	rule *model.DestinationRule
	vs   *model.VirtualService
	// with vs: the client's DestinationRule view (hash policies of the
	// destinations) and labels
	rules, labels string
}

type resourceResult struct {
	r   *Resource
	err error
}

func envoyRouteSet(m *model.Mesh, ns string, labels map[string]string, mode meshconfig.Mode) (*Set, error) {
	byPort := portNamespaces(m)
	var all []*Resource
	src := labelsKey(m, labels)
	for _, port := range httpPorts(m) {
		// A route configuration reads the namespace only when a service of
		// that namespace has the port: other namespaces share one.
		key := routeKey{port: port, mode: mode, rules: m.DestinationRuleView(ns), vs: m.VirtualServiceView(ns), labels: src}
		if byPort[port][ns] {
			key.ns = ns
		}
		r := m.ConfigMemo(key, func() any {
			r, err := portRoute(m, key, labels)
			return resourceResult{r, err}
		}).(resourceResult)
		if r.err != nil {
			return nil, r.err
		}
		all = append(all, r.r)
	}
	sniffed, err := sniffedRouteSet(m, ns, labels)
	if err != nil {
		return nil, err
	}
	return newSet(resource.RouteType, append(all, sniffed...)), nil
}

// portNamespaces maps each port to the namespaces with a service having it
// as an HTTP or sniffed port, by the namespace in the service's hostname
// (what its short names depend on).
func portNamespaces(m *model.Mesh) map[int32]map[string]bool {
	return m.ConfigMemo(keyPortNamespaces, func() any {
		out := make(map[int32]map[string]bool)
		for _, svc := range m.Services {
			_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
				if proto.httpOrSniffed() {
					if out[p.Port] == nil {
						out[p.Port] = make(map[string]bool)
					}
					if ns := hostNamespace(svc.Hostname); ns != "" {
						out[p.Port][ns] = true
					}
				}
				return nil
			})
		}
		return out
	}).(map[int32]map[string]bool)
}

var keyPortNamespaces any = memoKey{Envoy, "port-namespaces"}

func portRoute(m *model.Mesh, key routeKey, labels map[string]string) (*Resource, error) {
	rc := &routev3.RouteConfiguration{
		Name:                           portString(key.port),
		ValidateClusters:               wrapperspb.Bool(false),
		MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
		IgnorePortInHostMatching:       true,
	}
	claimed := make(map[string]bool)
	for _, svc := range m.Services {
		_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
			if p.Port != key.port || !proto.httpOrSniffed() {
				return nil
			}
			vh := serviceVirtualHost(m, svc, p, hostNamespace(svc.Hostname) == key.ns, m.DestinationRule(key.rules, svc), sidecarRoutes{vs: m.VirtualServiceFor(key.vs, svc.Hostname), key: key, labels: labels})
			// Envoy rejects a domain twice in one configuration: the first
			// service by hostname keeps it.
			if slices.ContainsFunc(vh.Domains, func(d string) bool { return claimed[d] }) {
				vh = &routev3.VirtualHost{
					Name:                       vh.Name,
					Domains:                    slices.DeleteFunc(slices.Clone(vh.Domains), func(d string) bool { return claimed[d] }),
					Routes:                     vh.Routes,
					IncludeRequestAttemptCount: vh.IncludeRequestAttemptCount,
				}
			}
			for _, d := range vh.Domains {
				claimed[d] = true
			}
			if len(vh.Domains) > 0 {
				rc.VirtualHosts = append(rc.VirtualHosts, vh)
			}
			return nil
		})
	}
	rc.VirtualHosts = append(rc.VirtualHosts, catchAllHost(key.mode))
	return newResource(rc.Name, rc)
}

// sidecarRoutes is the VirtualService (nil for none) whose routes a
// sidecar uses for a service, and whom for.
type sidecarRoutes struct {
	vs     *model.VirtualService
	key    routeKey
	labels map[string]string
}

// serviceVirtualHost is memoised per service, port, whether the client
// shares the service's namespace, and the VirtualService it applies.
// Read-only.
func serviceVirtualHost(m *model.Mesh, svc *model.Service, p *model.Port, same bool, dr *model.DestinationRule, sr sidecarRoutes) *routev3.VirtualHost {
	k := vhostKey{port: p.Port, same: same, rule: dr, vs: sr.vs}
	if sr.vs != nil {
		k.rules, k.labels = sr.key.rules, sr.key.labels
	}
	return svc.ConfigMemo(k, func() any {
		return &routev3.VirtualHost{
			Name:                       svc.Hostname + ":" + portString(p.Port),
			Domains:                    serviceDomains(svc, same),
			Routes:                     serviceRoutes(m, svc, p, dr, sr),
			IncludeRequestAttemptCount: true,
		}
	}).(*routev3.VirtualHost)
}

// serviceRoutes are the VirtualService's routes for the port, or the
// default route when it has none for it.
func serviceRoutes(m *model.Mesh, svc *model.Service, p *model.Port, dr *model.DestinationRule, sr sidecarRoutes) []*routev3.Route {
	if sr.vs != nil {
		c := routeCtx{port: p.Port, gateways: meshGateways, ns: sr.key.vs, labels: sr.labels, rules: sr.key.rules}
		if rs := vsRoutes(m, sr.vs, c); len(rs) > 0 {
			return rs
		}
	}
	return []*routev3.Route{serviceRoute(m, svc, p, dr)}
}

var meshGateways = []string{model.MeshGateway}

// noTimeout disables Envoy's default 15s route timeout, as Istio does.
var noTimeout = durationpb.New(0)

// serviceDomains returns the names a client may use for a service, as
// Istio: the hostname and its absolute form (with the trailing dot, which
// clients may send in Host: Istio's PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN,
// on by default); for a <name>.<ns>.svc.cluster.local hostname
// name.ns and name.ns.svc, and the bare name from a client in namespace
// ns (sameNamespace); for headless services each of these under "*."
// (pod-0.db.ns...); the cluster IP. Other hostnames (a ServiceEntry's
// api.example.com) have no shorter names: expanding them could take a
// name of a Kubernetes service's, and a ServiceEntry's own namespace
// plays no part in its hostname.
func serviceDomains(svc *model.Service, sameNamespace bool) []string {
	out := []string{svc.Hostname, svc.Hostname + "."}
	if name, ns, ok := kubeHostname(svc.Hostname); ok {
		nsName := name + "." + ns
		if sameNamespace {
			out = append(out, name, nsName+".svc", nsName)
		} else {
			out = append(out, nsName, nsName+".svc")
		}
	}
	if svc.Headless {
		for _, d := range slices.Clone(out) {
			out = append(out, "*."+d)
		}
	}
	if svc.ClusterIP != "" && !slices.Contains(out, svc.ClusterIP) {
		out = append(out, svc.ClusterIP)
	}
	return out
}

// kubeHostname splits a <name>.<ns>.svc.cluster.local hostname (Istio
// splits at the first dot: the rest is the namespace).
func kubeHostname(hostname string) (name, ns string, ok bool) {
	base, ok := strings.CutSuffix(hostname, "."+model.DomainSuffix)
	if !ok {
		return "", "", false
	}
	name, ns, ok = strings.Cut(base, ".")
	return name, ns, ok && name != "" && ns != ""
}

// hostNamespace is the namespace part of a <name>.<ns>.svc.cluster.local
// hostname, "" for other hostnames.
func hostNamespace(hostname string) string {
	_, ns, _ := kubeHostname(hostname)
	return ns
}

// catchAllHost takes requests for hosts no service has.
func catchAllHost(mode meshconfig.Mode) *routev3.VirtualHost {
	if mode == meshconfig.RegistryOnly {
		return &routev3.VirtualHost{
			Name:    "block_all",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Name:   "block_all",
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 502}},
			}},
			IncludeRequestAttemptCount: true,
		}
	}
	r := outboundRoute(PassthroughCluster)
	r.Name = "allow_any"
	return &routev3.VirtualHost{Name: "allow_any", Domains: []string{"*"}, Routes: []*routev3.Route{r}, IncludeRequestAttemptCount: true}
}

// sniffedRouteSet is the route configurations of every service's sniffed
// ports, memoised per service under its DestinationRule and
// VirtualService.
func sniffedRouteSet(m *model.Mesh, ns string, labels map[string]string) ([]*Resource, error) {
	key := routeKey{rules: m.DestinationRuleView(ns), vs: m.VirtualServiceView(ns), labels: labelsKey(m, labels)}
	var all []*Resource
	for _, svc := range m.Services {
		dr := m.DestinationRule(ns, svc)
		sr := sidecarRoutes{vs: m.VirtualServiceFor(key.vs, svc.Hostname), key: key, labels: labels}
		var k any = keySniffedRoute
		if dr != nil || sr.vs != nil {
			k = sniffedKey{dr: dr, vs: sr.vs, rules: key.rules, labels: key.labels}
		}
		r := svc.ConfigMemo(k, func() any {
			rs, err := sniffedRoutes(m, svc, dr, sr)
			return serviceResult{resources: rs, err: err}
		}).(serviceResult)
		if r.err != nil {
			return nil, r.err
		}
		all = append(all, r.resources...)
	}
	return all, nil
}

type sniffedKey struct {
	dr            *model.DestinationRule
	vs            *model.VirtualService
	rules, labels string
}

// sniffedRoutes returns the route configurations of a service's sniffed
// ports that have a listener (cluster IP or headless).
func sniffedRoutes(m *model.Mesh, svc *model.Service, dr *model.DestinationRule, sr sidecarRoutes) ([]*Resource, error) {
	if svc.ClusterIP == "" && !svc.Headless || svc.ExternalName != "" {
		return nil, nil
	}
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, proto protocol) error {
		if proto != protoAuto {
			return nil
		}
		name := sniffedRouteName(svc, p)
		rc := &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:                       name,
				Domains:                    []string{"*"},
				Routes:                     serviceRoutes(m, svc, p, dr, sr),
				IncludeRequestAttemptCount: true,
			}},
			ValidateClusters:               wrapperspb.Bool(false),
			MaxDirectResponseBodySizeBytes: wrapperspb.UInt32(1 << 20),
			IgnorePortInHostMatching:       true,
		}
		r, err := newResource(name, rc)
		out = append(out, r)
		return err
	})
	return out, err
}

// serviceRoute sends everything to the port's default cluster, hashing by
// the rule's consistent hash key when it has one (Istio puts the hash
// policy on the route).
func serviceRoute(m *model.Mesh, svc *model.Service, p *model.Port, dr *model.DestinationRule) *routev3.Route {
	r := outboundRoute(clusterName(svc, p))
	if dr != nil {
		r.GetRoute().HashPolicy = hashPolicy(dr.ConsistentHash(p.Port, ""))
	}
	// Istio's default route keeps previous_hosts even with a hash policy.
	r.GetRoute().RetryPolicy = retryPolicy(m, nil, false, false)
	return r
}
