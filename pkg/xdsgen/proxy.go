package xdsgen

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// NodeType is the kind of proxy, from the first field of an Istio node id.
type NodeType uint8

const (
	// Sidecar is a proxy next to a workload (node id "sidecar~..."), and
	// every proxyless gRPC client.
	Sidecar NodeType = iota
	// Router is a gateway (node id "router~..."): it serves the Istio
	// Gateways selecting its workload (gateway.go) and gets every outbound
	// cluster.
	Router
)

// Proxy is what generation needs to know about a client. Two proxies with
// equal fields get the same *Set; proxies that differ only in what does
// not change their output (the IP of two pods backing the same services,
// the namespace for types that do not read it) share sets too.
type Proxy struct {
	Generator Generator
	Type      NodeType
	// IP is the proxy's pod IP (node id field 2): the services the pod backs
	// (their endpoints with this address) give its inbound listeners and
	// clusters. "" has none.
	IP string
	// Namespace is the proxy's namespace: short host names ("web",
	// "web.ns") resolve in it.
	Namespace string
	// Mesh holds the mesh-wide settings; nil is Istio's defaults.
	Mesh *meshconfig.MeshConfig
	// Labels are the workload's labels (node metadata LABELS): the
	// Sidecar and the DestinationRules with a workloadSelector that apply
	// to it select it by them, and VirtualService sourceLabels, Gateway
	// selectors and failoverPriority match them; for those three only, nil
	// finds them on the
	// endpoints with address IP.
	Labels map[string]string
	// Locality is the proxy's locality (the xDS node's), which locality
	// load balancing orders endpoints by; empty finds it on the endpoints
	// with address IP, as Istio does.
	Locality model.Locality
	// ClusterID is the proxy's cluster (node metadata CLUSTER_ID), the
	// topology.istio.io/cluster label failoverPriority may compare.
	ClusterID string
}

// workloadLabels are p's labels: its own, else those of an endpoint with
// its IP.
func (p Proxy) workloadLabels(full *model.Mesh) map[string]string {
	if p.Labels != nil || p.IP == "" {
		return p.Labels
	}
	idx := full.Memo(keyLabelIndex, func() any {
		out := make(map[string]map[string]string)
		for _, svc := range full.Services {
			for _, port := range svc.Ports {
				for _, ep := range port.Endpoints {
					if _, ok := out[ep.Address]; !ok && ep.Labels != nil {
						out[ep.Address] = ep.Labels
					}
				}
			}
		}
		return out
	}).(map[string]map[string]string)
	return idx[p.IP]
}

// Generate returns every resource of type typeURL that g produces for m,
// for a proxy that backs no service, in no namespace, under the default
// mesh config. See [GenerateFor].
func Generate(m *model.Mesh, g Generator, typeURL string) (*Set, error) {
	return GenerateFor(m, Proxy{Generator: g}, typeURL)
}

// GenerateFor returns every resource of type typeURL generated for proxy p
// from m. Calling it again with the same mesh (or a mesh that differs only
// in Seq, or, for types that do not read endpoints, only in endpoints) and
// an alike proxy returns the same *Set without generating anything. The Set
// is shared and read-only.
//
// Load assignments are identical for both generators: they carry what
// gRPC needs (localities, weights, health) and Envoy accepts it.
func GenerateFor(m *model.Mesh, p Proxy, typeURL string) (*Set, error) {
	if m == nil {
		return nil, errors.New("xdsgen: nil mesh")
	}
	if p.Generator != Envoy && p.Generator != GRPC {
		return nil, fmt.Errorf("xdsgen: unknown generator %v", p.Generator)
	}
	set, err := generateFor(m, p, typeURL)
	if err != nil {
		return nil, fmt.Errorf("xdsgen: %v %s: %w", p.Generator, typeURL, err)
	}
	return set, nil
}

func generateFor(full *model.Mesh, p Proxy, typeURL string) (*Set, error) {
	if typeURL == resource.EndpointType {
		// Load assignments are named subscriptions, the same for every
		// scope: the proxy's scope is not worked out for them.
		return endpointSetFor(full, p)
	}
	mode := p.Mesh.OutboundMode()
	// Outbound config covers the services the proxy may see (exportTo, the
	// Sidecar that applies to it: by workloadSelector on its labels, else
	// its namespace's), with the DestinationRules selecting it; load assignments are named subscriptions
	// and shared, and the inbound side is what the pod serves, whatever the
	// namespace sees.
	m := full.ScopeForProxy(p.Namespace, p.Labels)
	inboundFor := func(_ *model.Mesh, ip string) *inbound { return inboundFor(full, ip) }
	switch {
	case p.Generator == GRPC && typeURL == resource.ClusterType:
		xdsCreds := usesXDSCredentials(p.workloadLabels(full))
		key := proxyKey{gen: GRPC, typeURL: typeURL, rules: m.DestinationRuleView(p.Namespace), xdsCreds: xdsCreds}
		return memoSet(m, key, false, func() (*Set, error) { return grpcClusterSet(m, p.Namespace, xdsCreds) })
	case p.Generator == GRPC && typeURL == resource.RouteType:
		labels := p.workloadLabels(full)
		key := proxyKey{gen: GRPC, typeURL: typeURL, rules: m.DestinationRuleView(p.Namespace), ns: m.VirtualServiceView(p.Namespace), labels: labelsKey(m, labels)}
		return memoSet(m, key, false, func() (*Set, error) { return grpcRouteSet(m, p.Namespace, labels) })
	case p.Generator == GRPC && typeURL == resource.ListenerType:
		in := inboundFor(m, p.IP)
		if in == nil {
			return memoSet(m, keyGRPCLDS, false, func() (*Set, error) { return grpcListenerSet(m, nil, "", model.PeerAuthn{}, false, nil) })
		}
		labels := p.workloadLabels(full)
		pa := full.PeerAuthentication(p.Namespace, labels)
		xdsCreds := usesXDSCredentials(labels)
		key := proxyKey{gen: GRPC, typeURL: typeURL, inbound: in.grpcKey, ip: p.IP, authn: pa.Key(), xdsCreds: xdsCreds, authz: securityKey(m, p.Namespace, labels)}
		return memoSet(m, key, false, func() (*Set, error) {
			return grpcListenerSet(m, in, p.IP, pa, xdsCreds, grpcServerFilters(m, p.Namespace, labels))
		})
	case p.Generator != Envoy:
	case p.Type == Router && typeURL == resource.ClusterType:
		key := proxyKey{gen: Envoy, typeURL: "router-clusters", rules: m.DestinationRuleView(p.Namespace)}
		return memoSet(m, key, false, func() (*Set, error) { return routerClusterSet(m, p.Namespace) })
	case p.Type == Router && typeURL == resource.ListenerType:
		key, gws, targets := routerKey(full, m, p, typeURL)
		return memoSet(m, key, false, func() (*Set, error) { return routerListenerSet(m, p.Namespace, gws, targets) })
	case p.Type == Router && typeURL == resource.RouteType:
		key, gws, targets := routerKey(full, m, p, typeURL)
		return memoSet(m, key, false, func() (*Set, error) { return routerRouteSet(m, p.Namespace, gws, targets) })
	case typeURL == resource.ClusterType:
		in := inboundFor(m, p.IP)
		key := proxyKey{gen: Envoy, typeURL: typeURL, inbound: in.envoyKey(), rules: m.DestinationRuleView(p.Namespace)}
		return memoSet(m, key, false, func() (*Set, error) { return envoyClusterSet(m, in, p.Namespace) })
	case typeURL == resource.ListenerType:
		in := inboundFor(m, p.IP)
		labels := p.workloadLabels(full)
		pa := full.PeerAuthentication(p.Namespace, labels)
		key := proxyKey{gen: Envoy, typeURL: typeURL, mode: mode, inbound: in.envoyKey(), ns: m.VirtualServiceView(p.Namespace), labels: labelsKey(m, labels), authn: pa.Key(),
			authz: securityKey(m, p.Namespace, labels)}
		// Listeners of headless services follow their endpoints.
		return memoSet(m, key, hasHeadlessListeners(m), func() (*Set, error) { return envoyListenerSet(m, in, mode, p.Namespace, labels, pa) })
	case typeURL == resource.RouteType:
		labels := p.workloadLabels(full)
		key := proxyKey{gen: Envoy, typeURL: typeURL, mode: mode, ns: p.Namespace, labels: labelsKey(m, labels)}
		return memoSet(m, key, false, func() (*Set, error) { return envoyRouteSet(m, p.Namespace, labels, mode) })
	}
	return nil, fmt.Errorf("unsupported type %q", typeURL)
}

// memoKey names one generated type in the memo of a mesh or a service.
// Fixed keys are boxed once, here, so that their lookups do not allocate.
// EDS is the same for both generators, so its key has no generator.
type memoKey struct {
	gen     Generator
	typeURL string
}

// proxyKey names a set that depends on the proxy: its inbound side (a
// description of the ports it serves, not its IP, so that pods backing
// the same services share), its namespace, the DestinationRules its
// namespace sees ([model.Mesh.DestinationRuleView]), the mesh's
// outbound mode and its workload's PeerAuthentication.
type proxyKey struct {
	gen     Generator
	typeURL string
	mode    meshconfig.Mode
	ns      string
	rules   string
	inbound string
	ip      string
	labels  string
	authn   string // the workload's PeerAuthentication (model.PeerAuthn.Key)
	authz   string // the security policies of the workload (securityKey)
	// xdsCreds: a proxyless workload that uses xDS credentials
	// (grpc_mtls.go).
	xdsCreds bool
}

var (
	keyEDS          any = memoKey{typeURL: resource.EndpointType}
	keyGRPCCDS      any = memoKey{GRPC, resource.ClusterType}       // per service
	keyGRPCCDSMTLS  any = memoKey{GRPC, "clusters-xds-credentials"} // per service
	keyGRPCLDS      any = memoKey{GRPC, resource.ListenerType}
	keyGRPCRDS      any = memoKey{GRPC, resource.RouteType}        // per service
	keyEnvoyCDS     any = memoKey{Envoy, resource.ClusterType}     // per service
	keyEnvoyTCP     any = memoKey{Envoy, "tcp-listeners"}          // per service
	keyHeadless     any = memoKey{Envoy, "headless-listeners"}     // per service, reads endpoints
	keyHeadlessAny  any = memoKey{Envoy, "has-headless-listeners"} // per mesh
	keySniffedRoute any = memoKey{Envoy, "sniffed-routes"}         // per service
	keyInboundIndex any = memoKey{Envoy, "inbound-index"}          // per mesh, reads endpoints
	keyHTTPPorts    any = memoKey{Envoy, "http-ports"}             // per mesh
	keyGRPCOut      any = memoKey{GRPC, "outbound-listeners"}      // per service
	keyLabelIndex   any = memoKey{Envoy, "label-index"}            // per mesh, reads endpoints
)

type setResult struct {
	set *Set
	err error
}

// memoSet memoises a set on the mesh: on its config memo unless the set
// reads endpoints.
func memoSet(m *model.Mesh, key any, endpoints bool, build func() (*Set, error)) (*Set, error) {
	f := func() any {
		s, err := build()
		return setResult{set: s, err: err}
	}
	var r setResult
	if endpoints {
		r = m.Memo(key, f).(setResult)
	} else {
		r = m.ConfigMemo(key, f).(setResult)
	}
	return r.set, r.err
}

// inboundPort is one port the proxy's pod serves: an endpoint of a service
// port with the pod's address.
type inboundPort struct {
	target int32 // the endpoint's port: what the application listens on
	svc    *model.Service
	port   *model.Port
	proto  protocol
}

// inbound is what a pod serves, by target port (unique: the first service
// by hostname wins a port two services share, as in Istio).
type inbound struct {
	ports []inboundPort
	// envoy and grpc name the content the generators read, so that pods
	// backing the same service ports share sets.
	envoy, grpcKey string
}

func (in *inbound) envoyKey() string {
	if in == nil {
		return ""
	}
	return in.envoy
}

// inboundFor returns what the pod with IP ip serves, or nil.
func inboundFor(m *model.Mesh, ip string) *inbound {
	if ip == "" {
		return nil
	}
	idx := m.Memo(keyInboundIndex, func() any { return buildInboundIndex(m) }).(map[string]*inbound)
	return idx[ip]
}

// buildInboundIndex maps every endpoint address to what it serves.
func buildInboundIndex(m *model.Mesh) map[string]*inbound {
	idx := make(map[string]*inbound)
	for _, svc := range m.Services {
		_ = servedPorts(svc, func(p *model.Port, proto protocol) error {
			for _, ep := range p.Endpoints {
				in := idx[ep.Address]
				if in == nil {
					in = &inbound{}
					idx[ep.Address] = in
				}
				in.ports = append(in.ports, inboundPort{target: ep.Port, svc: svc, port: p, proto: proto})
			}
			return nil
		})
	}
	for _, in := range idx {
		// Stable: services come sorted by hostname, so the first kept for a
		// target port is the first by hostname.
		slices.SortStableFunc(in.ports, func(a, b inboundPort) int { return cmp.Compare(a.target, b.target) })
		in.ports = slices.CompactFunc(in.ports, func(a, b inboundPort) bool { return a.target == b.target })
		var e, g strings.Builder
		for _, ip := range in.ports {
			fmt.Fprintf(&e, "%d/%d/%d,", ip.target, ip.proto, ip.port.Port)
			g.WriteString(strconv.Itoa(int(ip.target)) + ",")
		}
		in.envoy, in.grpcKey = e.String(), g.String()
	}
	return idx
}

// servedPorts calls fn for every port xDS is generated for: the TCP ports
// of a service.
func servedPorts(svc *model.Service, fn func(p *model.Port, proto protocol) error) error {
	for _, p := range svc.Ports {
		if proto := classify(p); proto != protoUnsupported {
			if err := fn(p, proto); err != nil {
				return err
			}
		}
	}
	return nil
}

// usesEDS reports whether the service's endpoints go over EDS.
func usesEDS(svc *model.Service) bool {
	return svc.ExternalName == "" && svc.Resolution != model.DNSLB && svc.Resolution != model.DNSRoundRobinLB
}

// meshPorts calls fn for the served ports of services whose endpoints go
// over EDS: not ExternalName, not resolved by DNS.
func meshPorts(svc *model.Service, fn func(p *model.Port, proto protocol) error) error {
	if !usesEDS(svc) {
		return nil
	}
	return servedPorts(svc, fn)
}

func clusterName(svc *model.Service, p *model.Port) string {
	return model.OutboundClusterName(p.Port, "", svc.Hostname)
}
