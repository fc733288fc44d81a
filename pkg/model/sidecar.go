package model

import (
	"cmp"
	"slices"
	"strings"
	"time"

	networkingv1 "istio.io/api/networking/v1"
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

// sidecarScope is the egress of the Sidecar that applies to a namespace.
type sidecarScope struct {
	object string
	hosts  []egressHost
}

// sidecarIndex holds, by namespace, the Sidecar without workloadSelector
// that applies there; the root namespace's applies to namespaces without
// one of their own (Istio's mesh-wide default).
type sidecarIndex struct {
	root     string
	byNS     map[string]*sidecarScope
	problems []Problem
}

func buildSidecars(stored []*storedSidecar, root string) *sidecarIndex {
	slices.SortFunc(stored, func(a, b *storedSidecar) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Namespace, b.key.Namespace),
			strings.Compare(a.key.Name, b.key.Name), strings.Compare(a.key.Cluster, b.key.Cluster))
	})
	x := &sidecarIndex{root: root, byNS: make(map[string]*sidecarScope)}
	for _, st := range stored {
		obj := objectName(st.key)
		if st.spec.GetWorkloadSelector() != nil {
			x.problems = append(x.problems, Problem{Object: obj, Reason: "workloadSelector is not supported yet: Sidecar ignored"})
			continue
		}
		if first := x.byNS[st.key.Namespace]; first != nil {
			x.problems = append(x.problems, Problem{Object: obj, Reason: "namespace already has a Sidecar without workloadSelector (" + first.object + "): ignored"})
			continue
		}
		sc := &sidecarScope{object: obj}
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
		x.byNS[st.key.Namespace] = sc
	}
	return x
}

// forNamespace is the Sidecar scope of proxies in ns, or nil.
func (x *sidecarIndex) forNamespace(ns string) *sidecarScope {
	if x == nil {
		return nil
	}
	if sc := x.byNS[ns]; sc != nil {
		return sc
	}
	return x.byNS[x.root]
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

type scopeKey struct{ ns string }
type scopeConfigKey struct{ ns string }
type restrictedKey struct{}

// ScopeFor returns the mesh as proxies in namespace ns see it: the
// services exported to ns (exportTo) that the Sidecar applying to ns (its
// own, else the root namespace's) lists in its egress hosts. It returns m
// itself when nothing limits ns. A scoped mesh has its own memos, shared
// by every proxy of the namespace (its config memo survives endpoint
// changes, as m's does); services are the same pointers as in m.
func (m *Mesh) ScopeFor(ns string) *Mesh {
	sc := m.content.sidecars.forNamespace(ns)
	if sc == nil && !m.restricted() {
		return m
	}
	c := m.Memo(scopeKey{ns}, func() any {
		var svcs []*Service
		byHost := make(map[string]*Service)
		for _, s := range m.Services {
			if visible(s.ExportTo, s.Namespace, ns) && (sc == nil || sc.allows(ns, s)) {
				svcs = append(svcs, s)
				byHost[s.Hostname] = s
			}
		}
		config := m.ConfigMemo(scopeConfigKey{ns}, func() any { return new(memo) }).(*memo)
		return &scopedMesh{services: svcs, content: &meshContent{
			byHost: byHost, rules: m.content.rules, routes: m.content.routes, problems: m.content.problems,
			defaultPolicy: m.content.defaultPolicy, sidecars: m.content.sidecars, config: config,
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
