package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

// Mesh is an immutable view of the mesh at one change-stream sequence.
// Nothing reachable from a Mesh may be modified; it is shared without locks.
type Mesh struct {
	// Seq is the change-stream sequence the view reflects: every record with a
	// sequence up to and including Seq has been applied.
	Seq uint64
	// Services, sorted by Hostname. Read-only.
	Services []*Service

	// content is shared by meshes with the same services (when only records of
	// kinds the mesh ignores were applied in between), so memoised output
	// survives a sequence bump that changed nothing.
	content *meshContent
}

type meshContent struct {
	byHost map[string]*Service
	// rules indexes the DestinationRules; never nil.
	rules *ruleIndex
	// problems lists the objects (or parts) ignored, sorted. Read-only.
	problems []Problem
	// routes indexes the VirtualServices and Gateways; never nil.
	routes *routeIndex
	// sidecars indexes the Sidecars; nil when there are none.
	sidecars *sidecarIndex
	// peers indexes the PeerAuthentications; never nil.
	peers *peerIndex
	// authz indexes the AuthorizationPolicies and RequestAuthentications;
	// nil when there are none.
	authz *authzIndex
	// selected: on a mesh scoped for a proxy ([Mesh.ScopeForProxy]), the
	// DestinationRules with a workloadSelector that select it; nil else.
	selected map[*DestinationRule]bool
	// scoped: a mesh scoped for a proxy in namespace scopeNS, to which
	// Sidecar scopeSidecar (nil: none) applies.
	scoped       bool
	scopeNS      string
	scopeSidecar *sidecarScope
	// settings are the mesh config's, the same for every mesh of a
	// store and every scope of a mesh; never nil.
	settings *meshSettings
	memo     memo
	// config is shared further, by meshes whose services differ at most in
	// their endpoints.
	config *memo
}

// Service is one mesh service: the Services named namespace/name in every
// cluster, merged. Immutable once published in a Mesh; share it by pointer.
type Service struct {
	Name      string
	Namespace string
	// Hostname is <name>.<namespace>.svc.cluster.local.
	Hostname string
	// ClusterIP is the virtual IP, "" for headless services and services
	// without one (ExternalName).
	ClusterIP string
	// Headless is true when spec.clusterIP is "None".
	Headless bool
	// ExternalName is spec.externalName of ExternalName services.
	ExternalName string
	// Clusters lists, sorted, the cluster ids holding a Service object with
	// this namespace and name; Ports, ClusterIP, Headless and ExternalName come
	// from Clusters[0]. EndpointSlices naming a service that no cluster
	// defines wait, outside the mesh, for the Service to appear.
	Clusters []string
	// Ports sorted by (Port, Protocol).
	Ports []*Port

	// Registry is where the service comes from: Kubernetes or a ServiceEntry.
	Registry Registry
	// Resolution says how clients find its endpoints. Kubernetes services
	// are ClientSideLB (with a cluster IP), Passthrough (headless) or DNS
	// (ExternalName).
	Resolution Resolution
	// MeshExternal is true for ServiceEntries with location MESH_EXTERNAL.
	MeshExternal bool
	// Addresses are a ServiceEntry's spec.addresses (IPs or CIDRs).
	// ClusterIP is the first that is an IP.
	Addresses []string
	// ExportTo is the service's visibility: "*" (every namespace), "."
	// (its own), "~" (none) or namespace names; the mesh default when the
	// object sets none. Read-only.
	ExportTo []string
	// ServiceAccounts are the identities of the service's workloads,
	// sorted: spiffe://<trust domain>/ns/<namespace>/sa/<name> of each
	// endpoint's ServiceAccount, and a ServiceEntry's subjectAltNames.
	// Clients sending Istio mTLS accept these in the server's certificate.
	// Part of the service's config. Read-only.
	ServiceAccounts []string

	// mtls is what clients assume of its workloads ([Service.MTLSMode]).
	mtls MTLSMode
	// sidecarPorts are the ports with endpoints that all have Istio's
	// sidecar ([Service.AllSidecars]), sorted.
	sidecarPorts []int32

	// rules are the DestinationRules whose host matches this service, in any
	// namespace, most relevant first (see [Mesh.DestinationRule]). Part of
	// the service's config: a service whose rules change is a new version.
	rules []*DestinationRule

	memo memo
	// config is shared with the previous version of this service when only
	// endpoints changed. Set before the service is published in a Mesh.
	config *memo
}

// Port is one Service port and the ready endpoints behind it.
type Port struct {
	Name string
	// Port is what clients dial (the Service's port).
	Port     int32
	Protocol corev1.Protocol
	// AppProtocol is spec.ports[].appProtocol, "" when unset.
	AppProtocol string
	// TargetPort is a hint only: endpoint ports come from the EndpointSlices.
	TargetPort intstr.IntOrString
	// Endpoints that are ready, from every cluster, unique by (Address,
	// Port), sorted by (Address, Port, ClusterID, Zone, NodeName). When
	// several slices list one address and port, the first in that order is
	// kept. Read-only.
	Endpoints []Endpoint
}

// Endpoint is one ready network endpoint of a service port.
type Endpoint struct {
	// Address is the IP address in canonical form.
	Address string
	// Port is the endpoint's port: that of the slice port matching the
	// Service port by name and protocol.
	Port int32
	// Weight is the endpoint's load-balancing weight; 0 means 1. (Beside
	// Port, so that the two share a word: an Endpoint is 144 bytes, not
	// 152.)
	Weight uint32
	// Region, Zone and SubZone are the workload's locality ([Locality]):
	// for a Kubernetes endpoint, its Pod's locality label
	// (topology.istio.io/locality, istio-locality), else its Node's
	// topology labels (topology.kubernetes.io/region and zone,
	// topology.istio.io/subzone), else the slice endpoint's zone; for a
	// WorkloadEntry its locality field, else its locality label.
	Region, Zone, SubZone string
	// NodeName is endpoints[].nodeName of the slice, "" when unset.
	NodeName string
	// ClusterID is the cluster the EndpointSlice was observed in.
	ClusterID string
	// Labels are the workload's labels: those of the Pod the slice
	// endpoint's targetRef names, of a WorkloadEntry, or of a ServiceEntry
	// endpoint. Subsets select endpoints by them. Shared, read-only.
	Labels map[string]string
	// Network is the endpoint's network, "" for the default one.
	Network string
	// ServiceAccount is the workload's Kubernetes service account (a
	// Pod's spec.serviceAccountName, a WorkloadEntry's serviceAccount), in
	// the service's namespace; "" when unknown. Shared with the workload.
	ServiceAccount string
}

// Registry is where a service is defined.
type Registry uint8

// Registries.
const (
	Kubernetes Registry = iota
	ServiceEntryRegistry
)

// Resolution is how clients reach a service's endpoints, after Istio's
// ServiceEntry resolution.
type Resolution uint8

// Resolutions.
const (
	// ClientSideLB: the endpoints are IPs, sent over EDS (STATIC).
	ClientSideLB Resolution = iota
	// DNSLB: the endpoints are names (or IPs) the client resolves, every
	// address a host (DNS, Envoy's STRICT_DNS).
	DNSLB
	// DNSRoundRobinLB: the client resolves one name and connects to the
	// first address it gets (DNS_ROUND_ROBIN, Envoy's LOGICAL_DNS).
	DNSRoundRobinLB
	// Passthrough: the client connects to the original destination (NONE,
	// headless services).
	Passthrough
)

func (r Resolution) String() string {
	switch r {
	case ClientSideLB:
		return "STATIC"
	case DNSLB:
		return "DNS"
	case DNSRoundRobinLB:
		return "DNS_ROUND_ROBIN"
	case Passthrough:
		return "NONE"
	}
	return fmt.Sprintf("Resolution(%d)", uint8(r))
}

func endpointEqual(a, b Endpoint) bool {
	return a.Address == b.Address && a.Port == b.Port && a.Zone == b.Zone && a.NodeName == b.NodeName &&
		a.ClusterID == b.ClusterID && a.Region == b.Region && a.SubZone == b.SubZone &&
		a.Weight == b.Weight && a.Network == b.Network && a.ServiceAccount == b.ServiceAccount && maps.Equal(a.Labels, b.Labels)
}

// SelectedBy reports whether every label of selector is one of the
// endpoint's labels (an empty selector selects every endpoint).
func (e *Endpoint) SelectedBy(selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := e.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// NewMesh builds a Mesh from services, which it sorts by hostname. Each
// service needs a Hostname, unique within the mesh. The Store builds meshes
// itself; NewMesh is for tests and tools that make meshes by hand. The
// services must not be modified afterwards.
func NewMesh(seq uint64, services []*Service) (*Mesh, error) {
	svcs := slices.Clone(services)
	slices.SortFunc(svcs, func(a, b *Service) int { return strings.Compare(a.Hostname, b.Hostname) })
	byHost := make(map[string]*Service, len(svcs))
	for _, s := range svcs {
		if s.Hostname == "" {
			return nil, fmt.Errorf("service %s/%s has no hostname", s.Namespace, s.Name)
		}
		if _, dup := byHost[s.Hostname]; dup {
			return nil, fmt.Errorf("duplicate service hostname %q", s.Hostname)
		}
		byHost[s.Hostname] = s
	}
	for _, s := range svcs {
		if s.config == nil { // not published in another mesh
			s.config = new(memo)
			s.deriveIdentity(meshconfig.DefaultTrustDomain)
		}
	}
	return &Mesh{Seq: seq, Services: svcs, content: &meshContent{byHost: byHost, config: new(memo), rules: emptyRules(), routes: emptyRoutes(), settings: noSettings, peers: emptyPeers}}, nil
}

// withSeq returns a mesh with the same content at a later sequence.
func (m *Mesh) withSeq(seq uint64) *Mesh {
	return &Mesh{Seq: seq, Services: m.Services, content: m.content}
}

// Service returns the service with the given hostname, or nil.
func (m *Mesh) Service(hostname string) *Service {
	return m.content.byHost[hostname]
}

// ServiceFor returns the service namespace/name, or nil.
func (m *Mesh) ServiceFor(namespace, name string) *Service {
	return m.Service(Hostname(namespace, name))
}

// ClusterPort resolves an xDS cluster name (outbound|<port>|<subset>|<host>,
// also the name of its load assignment) to its service and port. A subset
// resolves when some DestinationRule for the host defines it.
func (m *Mesh) ClusterPort(clusterName string) (*Service, *Port, bool) {
	port, subset, host, ok := ParseOutboundClusterName(clusterName)
	if !ok {
		return nil, nil, false
	}
	if subset != "" {
		svc := m.Service(host)
		if svc == nil || svc.Subset(subset) == nil {
			return nil, nil, false
		}
	}
	svc := m.Service(host)
	if svc == nil {
		return nil, nil, false
	}
	p := svc.Port(port)
	if p == nil {
		return nil, nil, false
	}
	return svc, p, true
}

// Memo returns the value cached on this mesh's content under key, calling
// build once per key. Meshes that differ only in Seq share the cache. build
// must derive its value from the mesh content only, never from Seq. Keys
// should be of a type private to the caller's package, like context keys.
func (m *Mesh) Memo(key any, build func() any) any {
	return m.content.memo.get(key, build)
}

// ConfigMemo is like [Mesh.Memo] for values that do not depend on endpoints:
// meshes whose services differ only in Port.Endpoints share this cache, so
// endpoint churn does not invalidate, say, routes. build must not read
// endpoints.
func (m *Mesh) ConfigMemo(key any, build func() any) any {
	return m.content.config.get(key, build)
}

// Port returns the TCP port numbered port, or the first port with that
// number when none is TCP, or nil.
func (s *Service) Port(port int32) *Port {
	var found *Port
	for _, p := range s.Ports {
		if p.Port != port {
			continue
		}
		if p.Protocol == corev1.ProtocolTCP {
			return p
		}
		if found == nil {
			found = p
		}
	}
	return found
}

// Memo returns the value cached on this service under key, calling build once
// per key. A service that did not change between two snapshots is the same
// *Service in both, so its memoised values carry over. build must derive its
// value from the service only. Keys should be of a type private to the
// caller's package.
func (s *Service) Memo(key any, build func() any) any {
	return s.memo.get(key, build)
}

// ConfigMemo is like [Service.Memo] for values that do not depend on
// endpoints: a service whose next version differs only in Port.Endpoints
// shares this cache with it. build must not read endpoints.
func (s *Service) ConfigMemo(key any, build func() any) any {
	return s.config.get(key, build)
}

// sameEndpoints reports whether two services with the same config have
// the same endpoints on every port.
func (s *Service) sameEndpoints(o *Service) bool {
	return slices.EqualFunc(s.Ports, o.Ports, func(a, b *Port) bool {
		return slices.EqualFunc(a.Endpoints, b.Endpoints, endpointEqual)
	})
}

// sameConfig reports whether two services are equal but for endpoints.
func (s *Service) sameConfig(o *Service) bool {
	if s.Name != o.Name || s.Namespace != o.Namespace || s.Hostname != o.Hostname ||
		s.ClusterIP != o.ClusterIP || s.Headless != o.Headless || s.ExternalName != o.ExternalName ||
		!slices.Equal(s.Clusters, o.Clusters) || s.Registry != o.Registry || s.Resolution != o.Resolution ||
		s.MeshExternal != o.MeshExternal || !slices.Equal(s.Addresses, o.Addresses) ||
		!slices.Equal(s.ExportTo, o.ExportTo) || !slices.Equal(s.rules, o.rules) ||
		!slices.Equal(s.ServiceAccounts, o.ServiceAccounts) || s.mtls != o.mtls || !slices.Equal(s.sidecarPorts, o.sidecarPorts) {
		return false
	}
	return slices.EqualFunc(s.Ports, o.Ports, func(a, b *Port) bool {
		return a.Name == b.Name && a.Port == b.Port && a.Protocol == b.Protocol &&
			a.AppProtocol == b.AppProtocol && a.TargetPort == b.TargetPort
	})
}

// LocalityLbSetting is the mesh config's localityLbSetting: the locality
// load balancing of destinations whose DestinationRule sets none (Istio's
// default enables it, with no distribute or failover of its own). nil for
// meshes made by [NewMesh]. Read-only.
func (m *Mesh) LocalityLbSetting() *networkingv1.LocalityLoadBalancerSetting {
	return m.content.settings.localityLB
}

// DNSRefreshRate is the refresh rate of the clusters Envoy resolves by DNS:
// the mesh config's dnsRefreshRate, 60s by default.
func (m *Mesh) DNSRefreshRate() time.Duration {
	if d := m.content.settings.dnsRefresh; d > 0 {
		return d
	}
	return meshconfig.DefaultDNSRefreshRate
}

// DefaultHTTPRetryPolicy is the mesh config's defaultHttpRetryPolicy, for
// outbound HTTP routes that set no retries; nil when unset (Istio's
// built-in default then applies). Read-only.
func (m *Mesh) DefaultHTTPRetryPolicy() *networkingv1.HTTPRetry { return m.content.settings.retry }

// DefaultInboundHTTPRetryPolicy is the mesh config's
// defaultInboundHttpRetryPolicy, for a sidecar's inbound HTTP routes; nil
// when unset. Read-only.
func (m *Mesh) DefaultInboundHTTPRetryPolicy() *networkingv1.HTTPRetry {
	return m.content.settings.inboundRetry
}

// AutoMTLS reports whether clients send Istio mTLS to destinations with
// a sidecar that no DestinationRule sets TLS for (the mesh config's
// enableAutoMtls, on by default and for meshes made by [NewMesh]).
func (m *Mesh) AutoMTLS() bool { return !m.content.settings.noAutoMTLS }

// meshSettings are what generation reads of the mesh config. A scoped
// mesh shares its full mesh's: one value, so that no setting can be
// left behind when a scope is made.
type meshSettings struct {
	// defaultPolicy is the mesh config's defaultTrafficPolicy, or nil.
	defaultPolicy *meshv1alpha1.MeshConfig_DefaultTrafficPolicy
	// localityLB is the mesh config's localityLbSetting, or nil.
	localityLB *networkingv1.LocalityLoadBalancerSetting
	// retry and inboundRetry are the mesh config's defaultHttpRetryPolicy
	// and defaultInboundHttpRetryPolicy, or nil.
	retry, inboundRetry *networkingv1.HTTPRetry
	// dnsRefresh is the mesh config's dnsRefreshRate; 0 for meshes made
	// by [NewMesh] (the default applies).
	dnsRefresh time.Duration
	// noAutoMTLS: the mesh config's enableAutoMtls is false (the zero
	// value is Istio's default, on).
	noAutoMTLS bool
}

// noSettings are those of meshes made by [NewMesh]: none set.
var noSettings = &meshSettings{}

// MeshConfigObject is what problems of the mesh config are reported
// against.
const MeshConfigObject = "mesh config"

// settingsOf reads c's settings, leaving out (and reporting) the defaults
// a proxy would reject, as in objects ([trafficPolicyProblems]).
func settingsOf(c *meshconfig.MeshConfig) (*meshSettings, []Problem) {
	st := &meshSettings{
		defaultPolicy: c.DefaultTrafficPolicy(), localityLB: c.LocalityLbSetting(),
		retry: c.DefaultHTTPRetryPolicy(), inboundRetry: c.DefaultInboundHTTPRetryPolicy(),
		dnsRefresh: c.DNSRefreshRate(),
		noAutoMTLS: !c.AutoMTLS(),
	}
	var problems []Problem
	report := func(why, what string) {
		problems = append(problems, Problem{Object: MeshConfigObject, Reason: why + ": " + what})
	}
	if p := st.defaultPolicy; p != nil {
		cp := connectionPoolProblem(p.GetConnectionPool())
		od := outlierProblem(p.GetOutlierDetection())
		if cp != "" || od != "" {
			p = proto.Clone(p).(*meshv1alpha1.MeshConfig_DefaultTrafficPolicy)
			if cp != "" {
				p.ConnectionPool = nil
				report(at("defaultTrafficPolicy.connectionPool", cp), "defaultTrafficPolicy.connectionPool ignored")
			}
			if od != "" {
				p.OutlierDetection = nil
				report(at("defaultTrafficPolicy.outlierDetection", od), "defaultTrafficPolicy.outlierDetection ignored")
			}
			st.defaultPolicy = p
		}
	}
	for _, r := range []struct {
		name string
		p    **networkingv1.HTTPRetry
	}{{"defaultHttpRetryPolicy", &st.retry}, {"defaultInboundHttpRetryPolicy", &st.inboundRetry}} {
		if why := retryProblem(*r.p); why != "" {
			*r.p = nil
			report(at(r.name, why), r.name+" ignored (Istio's built-in default applies)")
		}
	}
	// Envoy rejects a refresh rate of 1ms or less.
	if d := st.dnsRefresh; d <= time.Millisecond {
		st.dnsRefresh = meshconfig.DefaultDNSRefreshRate
		report("dnsRefreshRate "+d.String()+": must be more than 1ms", st.dnsRefresh.String()+" applies")
	}
	return st, sortProblems(problems)
}
