package model

import (
	"cmp"
	"slices"
	"strings"
	"time"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

// storedSidecar is one Sidecar object as stored.
type storedSidecar struct {
	key     ObjectKey
	created time.Time
	spec    *networkingv1.Sidecar
}

// egressHost is one entry of a Sidecar's egress hosts: namespace/dnsName.
type egressHost struct {
	ns   string // "*", "." (the proxy's namespace), "~" (none) or a name
	host string // "*", "*.suffix" or a host
}

// sidecarScope is the egress of the Sidecar that applies to a proxy.
type sidecarScope struct {
	object string
	// selector is the Sidecar's workloadSelector labels (nil: none).
	selector map[string]string
	hosts    []egressHost
}

// sidecarIndex holds, by namespace, the Sidecar without workloadSelector
// that applies there (the root namespace's applies to namespaces without
// one of their own: Istio's mesh-wide default), and the Sidecars with a
// workloadSelector, which apply to the workloads of their namespace they
// select, over the namespace's default.
type sidecarIndex struct {
	root      string
	byNS      map[string]*sidecarScope
	selectors map[string][]*sidecarScope // oldest first
	problems  []Problem
}

// buildSidecars indexes the Sidecars of a mesh whose outbound mode is
// mode.
func buildSidecars(stored []*storedSidecar, root string, mode meshconfig.Mode) *sidecarIndex {
	slices.SortFunc(stored, func(a, b *storedSidecar) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Namespace, b.key.Namespace),
			strings.Compare(a.key.Name, b.key.Name), strings.Compare(a.key.Cluster, b.key.Cluster))
	})
	x := &sidecarIndex{root: root, byNS: make(map[string]*sidecarScope), selectors: make(map[string][]*sidecarScope)}
	for _, st := range stored {
		obj := objectName(st.key)
		ws := st.spec.GetWorkloadSelector()
		if ws == nil {
			if first := x.byNS[st.key.Namespace]; first != nil {
				x.problems = append(x.problems, Problem{Object: obj, Reason: "namespace already has a Sidecar without workloadSelector (" + first.object + "): ignored"})
				continue
			}
		}
		x.problems = append(x.problems, sidecarUnsupported(obj, st.spec, mode)...)
		sc := &sidecarScope{object: obj}
		if ws != nil {
			sc.selector = ws.GetLabels()
			if sc.selector == nil {
				sc.selector = map[string]string{}
			}
		}
		for _, eg := range st.spec.GetEgress() {
			if eg.GetPort() != nil {
				x.problems = append(x.problems, Problem{Object: obj, Reason: "egress port is not supported yet: its hosts apply to every port"})
			}
			for _, h := range eg.GetHosts() {
				ns, host, ok := strings.Cut(h, "/")
				if !ok || ns == "" || host == "" {
					x.problems = append(x.problems, Problem{Object: obj, Reason: "egress host " + h + " is not namespace/host: ignored"})
					continue
				}
				sc.hosts = append(sc.hosts, egressHost{ns: ns, host: host})
			}
		}
		if len(st.spec.GetEgress()) == 0 {
			// No egress: Istio's default, every visible service.
			sc.hosts = []egressHost{{ns: "*", host: "*"}}
		}
		if ws != nil {
			x.selectors[st.key.Namespace] = append(x.selectors[st.key.Namespace], sc)
			continue
		}
		x.byNS[st.key.Namespace] = sc
	}
	return x
}

// forProxy is the Sidecar scope of a proxy in ns with labels, or nil: the
// oldest Sidecar of ns whose workloadSelector selects it, else ns's
// default, else the root namespace's (Istio's precedence; a selector
// Sidecar of the root namespace applies to the root namespace only).
func (x *sidecarIndex) forProxy(ns string, labels map[string]string) *sidecarScope {
	if x == nil {
		return nil
	}
	for _, sc := range x.selectors[ns] {
		if selectorMatches(sc.selector, labels) {
			return sc
		}
	}
	if sc := x.byNS[ns]; sc != nil {
		return sc
	}
	return x.byNS[x.root]
}

// sidecarFor is the Sidecar scope of proxies in ns: on a mesh scoped for
// a proxy there, the one applying to that proxy.
func (m *Mesh) sidecarFor(ns string) *sidecarScope {
	if c := m.content; c.scoped && c.scopeNS == ns {
		return c.scopeSidecar
	}
	return m.content.sidecars.forProxy(ns, nil)
}

// allows reports whether a proxy in namespace proxyNS may see svc.
func (sc *sidecarScope) allows(proxyNS string, svc *Service) bool {
	for _, h := range sc.hosts {
		if h.importsFrom(proxyNS, svc.Namespace) && hostMatches(h.host, svc.Hostname) {
			return true
		}
	}
	return false
}

type scopeKey struct{ ns, sidecar, selected string }
type scopeConfigKey struct{ ns, sidecar, selected string }
type restrictedKey struct{}

// ScopeFor returns the mesh as proxies in namespace ns without labels see
// it: see [Mesh.ScopeForProxy].
func (m *Mesh) ScopeFor(ns string) *Mesh { return m.ScopeForProxy(ns, nil) }

// ScopeForProxy returns the mesh as a proxy in namespace ns whose workload
// has labels sees it: the services exported to ns (exportTo) that the
// Sidecar applying to the proxy (one of ns selecting it by
// workloadSelector, else ns's own, else the root namespace's) lists in its
// egress hosts, and the DestinationRules with a workloadSelector of ns
// that select it ([Mesh.DestinationRule]). It returns m itself when
// nothing limits the proxy. A scoped mesh has its own memos, shared by
// every proxy with the same Sidecar and selected rules (its config memo
// survives endpoint changes, as m's does); services are the same pointers
// as in m.
func (m *Mesh) ScopeForProxy(ns string, labels map[string]string) *Mesh {
	if m.content.scoped {
		return m
	}
	sc := m.content.sidecars.forProxy(ns, labels)
	selected, selKey := m.content.rules.selectedBy(ns, labels)
	if sc == nil && selected == nil && !m.restricted() {
		return m
	}
	scObj := ""
	if sc != nil {
		scObj = sc.object
	}
	c := m.Memo(scopeKey{ns, scObj, selKey}, func() any {
		var svcs []*Service
		byHost := make(map[string]*Service)
		for _, s := range m.Services {
			if visible(s.ExportTo, s.Namespace, ns) && (sc == nil || sc.allows(ns, s)) {
				svcs = append(svcs, s)
				byHost[s.Hostname] = s
			}
		}
		config := m.ConfigMemo(scopeConfigKey{ns, scObj, selKey}, func() any { return new(memo) }).(*memo)
		return &scopedMesh{services: svcs, content: &meshContent{
			byHost: byHost, rules: m.content.rules, routes: m.content.routes, problems: m.content.problems,
			settings: m.content.settings, sidecars: m.content.sidecars, peers: m.content.peers, authz: m.content.authz, selected: selected, config: config,
			scoped: true, scopeNS: ns, scopeSidecar: sc,
		}}
	}).(*scopedMesh)
	return &Mesh{Seq: m.Seq, Services: c.services, content: c.content}
}

type scopedMesh struct {
	services []*Service
	content  *meshContent
}

// restricted reports whether some service is not exported to every
// namespace.
func (m *Mesh) restricted() bool {
	return m.ConfigMemo(restrictedKey{}, func() any {
		for _, s := range m.Services {
			if !slices.Equal(s.ExportTo, []string{"*"}) && len(s.ExportTo) > 0 {
				return true
			}
		}
		return false
	}).(bool)
}

// EgressImports returns the egress hosts of the Sidecar that applies to a
// proxy in namespace ns with labels, as "<namespace>/<host>" with "."
// resolved to ns and "~" entries left out, and true; or nil and false when
// no Sidecar applies (the proxy may see every exported service). With the
// proxy's own namespace, the root namespace and the namespaces its pod
// backs services in, they bound what config its outbound side reads: the
// dependency index the pusher scopes by (Istio's SidecarScope
// dependencies).
func (m *Mesh) EgressImports(ns string, labels map[string]string) ([]string, bool) {
	sc := m.content.sidecars.forProxy(ns, labels)
	if sc == nil {
		return nil, false
	}
	out := make([]string, 0, len(sc.hosts))
	for _, h := range sc.hosts {
		switch h.ns {
		case "~":
			continue
		case ".":
			out = append(out, ns+"/"+h.host)
		default:
			out = append(out, h.ns+"/"+h.host)
		}
	}
	return out, true
}

type backedKey struct{}

// NamespacesBackedBy returns, sorted, the namespaces of the services with
// an endpoint at address ip (the services a proxy's pod backs), or nil.
func (m *Mesh) NamespacesBackedBy(ip string) []string {
	if ip == "" {
		return nil
	}
	idx := m.Memo(backedKey{}, func() any {
		idx := make(map[string][]string)
		for _, s := range m.Services {
			for _, p := range s.Ports {
				for _, ep := range p.Endpoints {
					if !slices.Contains(idx[ep.Address], s.Namespace) {
						idx[ep.Address] = append(idx[ep.Address], s.Namespace)
					}
				}
			}
		}
		for _, nss := range idx {
			slices.Sort(nss)
		}
		return idx
	}).(map[string][]string)
	return idx[ip]
}
