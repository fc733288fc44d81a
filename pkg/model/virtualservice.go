// VirtualServices and Istio Gateways in the model.
//
// # The input seam
//
// Routing config enters the model as [VirtualServiceInput] and
// [GatewayInput] values: name, namespace, creation time, the
// istio.io/api networking/v1 spec, and where it came from ([RouteSource])
// with the object its problems are reported against. One function,
// [Store.routingInputs], builds the list from the decoded change records
// (networking.istio.io VirtualService and Gateway). Objects of other APIs
// that Istio translates into VirtualServices and Gateways (Gateway API's
// Gateway, HTTPRoute and GRPCRoute) are to be converted outside the model
// and appended to the lists there, in that one place: everything after it
// (short-name resolution, delegation, merging, exportTo, validation and the
// problems) treats every input alike.
//
// # What the model makes of them
//
// [buildRoutes] turns the inputs into a [routeIndex]: each VirtualService
// with hosts (a root) has its short names resolved in its namespace, its
// delegate routes inlined (Istio's delegate merge: a delegate's routes take
// the root route's match as a superset and its settings as defaults), and
// its invalid parts dropped and reported. VirtualServices without hosts are
// only delegates. The index answers, for a proxy namespace and a gateway
// ("mesh" for sidecars), which VirtualServices apply, in Istio's order:
// those private to the namespace, then those exported to it, then the
// public ones, each oldest first.
//
// Several VirtualServices for one host are merged as Istio merges them:
// a sidecar takes the host's routes from the first VirtualService in that
// order (the others' routes for the host are reported as ignored); a
// gateway concatenates the routes of every VirtualService bound to it for
// the host, in that order, with catch-all routes moved last.
package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
)

// Kinds of Istio's routing config the model reads.
const (
	KindVirtualService = "VirtualService"
	KindGateway        = "Gateway"
)

// MeshGateway is the gateway name that stands for every sidecar.
const MeshGateway = "mesh"

// RouteSource says where a routing input came from.
type RouteSource uint8

// Route sources.
const (
	// FromIstio: a networking.istio.io object of the change stream.
	FromIstio RouteSource = iota
	// FromGatewayAPI: converted from Gateway API objects.
	FromGatewayAPI
)

func (s RouteSource) String() string {
	if s == FromGatewayAPI {
		return "gateway-api"
	}
	return "istio"
}

// VirtualServiceInput is one VirtualService as the model takes it in.
type VirtualServiceInput struct {
	Name, Namespace string
	Created         time.Time
	// Spec is read-only.
	Spec   *networkingv1.VirtualService
	Source RouteSource
	// Object names what problems are reported against:
	// <cluster>/<Kind>/<namespace>/<name> of the object it came from.
	Object string
}

// GatewayInput is one Istio Gateway as the model takes it in.
type GatewayInput struct {
	Name, Namespace string
	Created         time.Time
	// Spec is read-only.
	Spec   *networkingv1.Gateway
	Source RouteSource
	Object string
}

// routingInputs is the seam: every VirtualService and Gateway the model
// routes by, built from the decoded change records. Converted inputs (Gateway
// API) are appended here. Callers hold mu.
func (s *Store) routingInputs() ([]*VirtualServiceInput, []*GatewayInput) {
	vss := make([]*VirtualServiceInput, 0, len(s.virtualServices))
	for _, v := range s.virtualServices {
		vss = append(vss, v)
	}
	gws := make([]*GatewayInput, 0, len(s.gateways))
	for _, g := range s.gateways {
		gws = append(gws, g)
	}
	cvs, cgws := s.convertGatewayAPI()
	return append(vss, cvs...), append(gws, cgws...)
}

// decodeRouting decodes a VirtualService or Gateway record into an entry;
// ok is false for other kinds.
func decodeRouting(key ObjectKey, raw []byte) (e *entry, ok bool, err error) {
	switch {
	case key.isNetworking(KindVirtualService):
		spec := &networkingv1.VirtualService{}
		created, err := decodeIstio(raw, spec)
		if err != nil {
			return nil, true, fmt.Errorf("decode VirtualService: %w", err)
		}
		return &entry{vs: &VirtualServiceInput{Name: key.Name, Namespace: key.Namespace, Created: created, Spec: spec, Object: objectName(key)}}, true, nil
	case key.isNetworking(KindGateway):
		spec := &networkingv1.Gateway{}
		created, err := decodeIstio(raw, spec)
		if err != nil {
			return nil, true, fmt.Errorf("decode Gateway: %w", err)
		}
		return &entry{gw: &GatewayInput{Name: key.Name, Namespace: key.Namespace, Created: created, Spec: spec, Object: objectName(key)}}, true, nil
	}
	return nil, false, nil
}

// VirtualService is one root VirtualService as generators read it.
// Immutable; share by pointer.
type VirtualService struct {
	Name, Namespace string
	Created         time.Time
	Source          RouteSource
	// Hosts are spec.hosts as fully qualified names or wildcards.
	Hosts []string
	// Gateways are the gateways it binds to: "mesh", or namespace/name.
	Gateways []string
	// ExportTo is its visibility, the mesh default when it sets none.
	ExportTo []string
	// Spec has short names resolved (hosts, destinations, gateways),
	// delegates inlined and invalid parts dropped. Read-only.
	Spec *networkingv1.VirtualService
	// From lists namespace/name of the root and every delegate merged in.
	From []string

	object string
}

// Object is what its problems are reported against.
func (v *VirtualService) Object() string { return v.object }

// BindsTo reports whether the VirtualService applies to gateway.
func (v *VirtualService) BindsTo(gateway string) bool { return slices.Contains(v.Gateways, gateway) }

// routeIndex is the routing config of a mesh.
type routeIndex struct {
	all      []*VirtualService // oldest first
	gateways []*Gateway        // oldest first
	problems []Problem
	// sourceLabels: some http match reads sourceLabels, so routes depend
	// on the proxy's workload labels.
	sourceLabels bool
	// restricted: some VirtualService is not public, or matches on
	// sourceNamespace, so namespaces may see different routes.
	restricted bool
	memo       memo
}

func emptyRoutes() *routeIndex { return &routeIndex{} }

func byCreation[T any](created func(T) time.Time, ns, name func(T) string) func(a, b T) int {
	return func(a, b T) int {
		return cmp.Or(created(a).Compare(created(b)), strings.Compare(ns(a), ns(b)), strings.Compare(name(a), name(b)))
	}
}

// buildRoutes indexes the inputs; prev keeps the pointers of unchanged
// VirtualServices (and so the memos keyed by them).
func buildRoutes(vss []*VirtualServiceInput, gws []*GatewayInput, defaultExportTo []string, prev *routeIndex) *routeIndex {
	slices.SortFunc(vss, byCreation(func(v *VirtualServiceInput) time.Time { return v.Created },
		func(v *VirtualServiceInput) string { return v.Namespace }, func(v *VirtualServiceInput) string { return v.Object }))
	x := emptyRoutes()
	report := func(obj, format string, args ...any) {
		x.problems = append(x.problems, Problem{Object: obj, Reason: fmt.Sprintf(format, args...)})
	}
	delegates := make(map[string]*VirtualServiceInput)
	referenced := make(map[string]bool)
	for _, in := range vss {
		if len(in.Spec.GetHosts()) == 0 {
			delegates[in.Namespace+"/"+in.Name] = in
		}
		for _, h := range in.Spec.GetHttp() {
			if d := h.GetDelegate(); d != nil {
				referenced[cmp.Or(d.GetNamespace(), in.Namespace)+"/"+d.GetName()] = true
			}
		}
	}
	exportOf := func(in *VirtualServiceInput) []string {
		if e := in.Spec.GetExportTo(); len(e) > 0 {
			return e
		}
		return defaultExportTo
	}
	for _, in := range vss {
		if len(in.Spec.GetHosts()) == 0 {
			if !referenced[in.Namespace+"/"+in.Name] {
				report(in.Object, "spec.hosts is empty and no VirtualService delegates to it: ignored")
			}
			continue
		}
		spec := resolveShortNames(in.Spec, in.Namespace)
		from := []string{in.Namespace + "/" + in.Name}
		if slices.ContainsFunc(spec.GetHttp(), func(h *networkingv1.HTTPRoute) bool { return h.GetDelegate() != nil }) {
			var merged []*networkingv1.HTTPRoute
			for i, h := range spec.GetHttp() {
				d := h.GetDelegate()
				if d == nil {
					merged = append(merged, h)
					continue
				}
				dkey := cmp.Or(d.GetNamespace(), in.Namespace) + "/" + d.GetName()
				dv := delegates[dkey]
				switch {
				case dv == nil:
					report(in.Object, "http[%d]: delegate %s is not a VirtualService without hosts: route ignored", i, dkey)
					continue
				case !visible(exportOf(dv), dv.Namespace, in.Namespace):
					report(in.Object, "http[%d]: delegate %s is not exported to namespace %s: route ignored", i, dkey, in.Namespace)
					continue
				}
				dspec := resolveShortNames(dv.Spec, dv.Namespace)
				for j, dh := range dspec.GetHttp() {
					if dh.GetDelegate() != nil {
						report(dv.Object, "http[%d]: a delegate cannot delegate again: route ignored", j)
						continue
					}
					m, ok := mergeDelegateRoute(h, dh)
					if !ok {
						report(dv.Object, "http[%d]: its match is not within the match of %s http[%d] that delegates to it: route ignored", j, in.Namespace+"/"+in.Name, i)
						continue
					}
					merged = append(merged, m)
				}
				from = append(from, dkey)
			}
			spec.Http = merged
		}
		spec = validRoutes(spec, func(format string, args ...any) { report(in.Object, format, args...) })
		if len(spec.GetHosts()) == 0 {
			report(in.Object, "no valid host: ignored")
			continue
		}
		gws := spec.GetGateways()
		if len(gws) == 0 {
			gws = []string{MeshGateway}
		}
		vs := &VirtualService{
			Name: in.Name, Namespace: in.Namespace, Created: in.Created, Source: in.Source,
			Hosts: spec.GetHosts(), Gateways: gws, ExportTo: exportOf(in), Spec: spec, From: from, object: in.Object,
		}
		x.all = append(x.all, vs)
		if !slices.Contains(vs.ExportTo, "*") {
			x.restricted = true
		}
		for _, h := range spec.GetHttp() {
			for _, m := range h.GetMatch() {
				if len(m.GetSourceLabels()) > 0 {
					x.sourceLabels = true
				}
				if m.GetSourceNamespace() != "" {
					x.restricted = true
				}
			}
		}
		grpcUnsupported(spec, func(format string, args ...any) { report(in.Object, format, args...) })
	}
	if prev != nil {
		same := make(map[string]*VirtualService, len(prev.all))
		for _, v := range prev.all {
			same[v.object] = v
		}
		for i, v := range x.all {
			if p := same[v.object]; p != nil && p.Created.Equal(v.Created) && slices.Equal(p.From, v.From) &&
				slices.Equal(p.ExportTo, v.ExportTo) && p.Source == v.Source && proto.Equal(p.Spec, v.Spec) {
				x.all[i] = p
			}
		}
	}
	x.problems = append(x.problems, meshHostConflicts(x.all)...)
	x.gateways = buildGateways(gws, func(obj, format string, args ...any) { report(obj, format, args...) })
	return x
}

// meshHostConflicts reports, for sidecars, the hosts two VirtualServices
// visible to the same namespaces both claim: the older keeps the host.
func meshHostConflicts(all []*VirtualService) []Problem {
	var out []Problem
	type claim struct {
		host, exportTo, ns string
	}
	owner := make(map[claim]*VirtualService)
	for _, v := range all {
		if !v.BindsTo(MeshGateway) || len(v.Spec.GetHttp()) == 0 {
			continue
		}
		ns := v.Namespace
		if slices.Contains(v.ExportTo, "*") {
			ns = "" // public: every public one conflicts
		}
		for _, h := range v.Hosts {
			c := claim{h, strings.Join(v.ExportTo, ","), ns}
			if first := owner[c]; first != nil {
				out = append(out, Problem{Object: v.object, Reason: fmt.Sprintf(
					"host %s is already routed for sidecars by %s (older): this one's http routes for the host are ignored by sidecars", h, first.Namespace+"/"+first.Name)})
				continue
			}
			owner[c] = v
		}
	}
	return out
}

// resolveShortNames returns a copy of spec with short host names resolved
// in namespace ns (hosts, destinations, mirrors) and gateway names made
// namespace/name.
func resolveShortNames(in *networkingv1.VirtualService, ns string) *networkingv1.VirtualService {
	spec := proto.Clone(in).(*networkingv1.VirtualService)
	for i, h := range spec.Hosts {
		spec.Hosts[i] = resolveHost(strings.ToLower(h), ns)
	}
	gw := func(gs []string) {
		for i, g := range gs {
			gs[i] = resolveGateway(g, ns)
		}
	}
	gw(spec.Gateways)
	dest := func(d *networkingv1.Destination) {
		if d != nil && d.Host != "" {
			d.Host = resolveHost(d.Host, ns)
		}
	}
	for _, h := range spec.Http {
		for _, m := range h.Match {
			gw(m.Gateways)
		}
		for _, r := range h.Route {
			dest(r.Destination)
		}
		dest(h.Mirror)
		for _, m := range h.Mirrors {
			dest(m.Destination)
		}
	}
	for _, t := range spec.Tcp {
		for _, m := range t.Match {
			gw(m.Gateways)
		}
		for _, r := range t.Route {
			dest(r.Destination)
		}
	}
	for _, t := range spec.Tls {
		for _, m := range t.Match {
			gw(m.Gateways)
		}
		for _, r := range t.Route {
			dest(r.Destination)
		}
	}
	return spec
}

// resolveGateway makes a gateway reference namespace/name: "mesh" stays,
// a bare name is in ns, and a name with dots is Istio's legacy
// name.namespace.svc.cluster.local form.
func resolveGateway(g, ns string) string {
	if g == MeshGateway || strings.Contains(g, "/") {
		return g
	}
	if name, rest, ok := strings.Cut(g, "."); ok {
		gns, _, _ := strings.Cut(rest, ".")
		return gns + "/" + name
	}
	return ns + "/" + g
}

// validRoutes drops the hosts that are not host names, the http routes
// that have nothing to do (no destination, redirect or direct response),
// those that have more than one of these and those holding a value a
// proxy would reject, reporting them.
func validRoutes(spec *networkingv1.VirtualService, report func(string, ...any)) *networkingv1.VirtualService {
	var hosts []string
	for i, h := range spec.GetHosts() {
		if why := checkHost(h); why != "" {
			report("hosts[%d]: %s: host ignored", i, why)
			continue
		}
		hosts = append(hosts, h)
	}
	spec.Hosts = hosts
	var keep []*networkingv1.HTTPRoute
	for i, h := range spec.GetHttp() {
		n := 0
		for _, set := range []bool{len(h.GetRoute()) > 0, h.GetRedirect() != nil, h.GetDirectResponse() != nil} {
			if set {
				n++
			}
		}
		switch {
		case n == 0:
			report("http[%d]: no route, redirect or directResponse: route ignored", i)
			continue
		case n > 1:
			report("http[%d]: only one of route, redirect and directResponse may be set: route ignored", i)
			continue
		}
		if why := httpRouteProblem(h); why != "" {
			report("%s: route ignored", at(fmt.Sprintf("http[%d]", i), why))
			continue
		}
		for _, why := range ignoredHeaderOps(h) {
			report("%s: ignored", at(fmt.Sprintf("http[%d]", i), why))
		}
		bad := false
		for j, d := range h.GetRoute() {
			if d.GetDestination().GetHost() == "" {
				report("http[%d].route[%d]: destination has no host: route ignored", i, j)
				bad = true
			}
		}
		if bad {
			continue
		}
		keep = append(keep, h)
	}
	spec.Http = keep
	var tcp []*networkingv1.TCPRoute
	for i, t := range spec.GetTcp() {
		if len(t.GetRoute()) == 0 {
			report("tcp[%d]: no route: ignored", i)
			continue
		}
		if why := l4RouteProblem(t.GetRoute()); why != "" {
			report("%s: ignored", at(fmt.Sprintf("tcp[%d]", i), why))
			continue
		}
		tcp = append(tcp, t)
	}
	spec.Tcp = tcp
	var tls []*networkingv1.TLSRoute
	for i, t := range spec.GetTls() {
		if len(t.GetRoute()) == 0 || len(t.GetMatch()) == 0 {
			report("tls[%d]: a tls route needs a match and a route: ignored", i)
			continue
		}
		if why := l4RouteProblem(t.GetRoute()); why != "" {
			report("%s: ignored", at(fmt.Sprintf("tls[%d]", i), why))
			continue
		}
		tls = append(tls, t)
	}
	spec.Tls = tls
	return spec
}

// grpcUnsupported reports what proxyless gRPC clients leave out of a
// VirtualService (grpc-go implements a subset of Envoy's routing).
func grpcUnsupported(spec *networkingv1.VirtualService, report func(string, ...any)) {
	if !slices.Contains(spec.GetGateways(), MeshGateway) && len(spec.GetGateways()) > 0 {
		return
	}
	for i, h := range spec.GetHttp() {
		var what []string
		switch {
		case h.GetRedirect() != nil:
			what = append(what, "redirect")
		case h.GetDirectResponse() != nil:
			what = append(what, "directResponse")
		}
		for _, m := range h.GetMatch() {
			if len(m.GetQueryParams()) > 0 {
				what = append(what, "queryParams matches")
				break
			}
		}
		if h.GetRewrite() != nil {
			what = append(what, "rewrite")
		}
		if h.GetMirror() != nil || len(h.GetMirrors()) > 0 {
			what = append(what, "mirror")
		}
		if h.GetHeaders() != nil {
			what = append(what, "headers")
		}
		if h.GetCorsPolicy() != nil {
			what = append(what, "corsPolicy")
		}
		if len(what) > 0 {
			report("http[%d]: proxyless gRPC clients do not support %s: left out of their config (a redirect, directResponse or queryParams match leaves out the route)", i, strings.Join(what, ", "))
		}
	}
}

type vsViewKey struct{ ns, gateway string }

// forGateway returns the VirtualServices bound to gateway that a proxy in
// namespace ns sees, in Istio's order: private to ns, exported to ns,
// public; each oldest first. Read-only.
func (x *routeIndex) forGateway(ns, gateway string) []*VirtualService {
	if len(x.all) == 0 {
		return nil
	}
	return x.memo.get(vsViewKey{ns, gateway}, func() any {
		var private, exported, public []*VirtualService
		for _, v := range x.all {
			if !v.BindsTo(gateway) || !visible(v.ExportTo, v.Namespace, ns) {
				continue
			}
			switch {
			case slices.Contains(v.ExportTo, "*"):
				public = append(public, v)
			case v.Namespace == ns:
				private = append(private, v)
			default:
				exported = append(exported, v)
			}
		}
		return slices.Concat(private, exported, public)
	}).([]*VirtualService)
}

// VirtualServices returns the VirtualServices bound to gateway ("mesh"
// for sidecars) that a proxy in namespace ns sees, in the order Istio
// applies them (see [routeIndex.forGateway]); for "mesh", only those whose
// namespace and a host the Sidecar applying to ns imports. Read-only.
func (m *Mesh) VirtualServices(ns, gateway string) []*VirtualService {
	all := m.content.routes.forGateway(ns, gateway)
	sc := m.sidecarFor(ns)
	if gateway != MeshGateway || sc == nil || len(all) == 0 {
		return all
	}
	return m.content.routes.memo.get(scopedVSKey{ns, sc}, func() any {
		var out []*VirtualService
		for _, v := range all {
			if slices.ContainsFunc(v.Hosts, func(h string) bool { return sc.allowsHost(ns, v.Namespace, h) }) {
				out = append(out, v)
			}
		}
		return out
	}).([]*VirtualService)
}

// scopedVSKey and hostIndexKey name memos of the route index that also
// read a Sidecar scope: the index outlives Sidecar changes.
type scopedVSKey struct {
	ns string
	sc *sidecarScope
}

// VirtualServiceFor returns the VirtualService whose routes a sidecar in
// namespace ns uses for host: the first (in [Mesh.VirtualServices] order)
// with host among its hosts, else the first with the most specific
// wildcard matching it; nil when none.
func (m *Mesh) VirtualServiceFor(ns, host string) *VirtualService {
	if len(m.content.routes.all) == 0 {
		return nil
	}
	idx := m.content.routes.memo.get(hostIndexKey{ns, m.sidecarFor(ns)}, func() any {
		idx := &vsHostIndex{exact: map[string]*VirtualService{}}
		for _, v := range m.VirtualServices(ns, MeshGateway) {
			if len(v.Spec.GetHttp()) == 0 && len(v.Spec.GetTcp()) == 0 && len(v.Spec.GetTls()) == 0 {
				continue
			}
			for _, h := range v.Hosts {
				if strings.HasPrefix(h, "*") {
					idx.wildcards = append(idx.wildcards, wildcardVS{h, v})
				} else if idx.exact[h] == nil {
					idx.exact[h] = v
				}
			}
		}
		return idx
	}).(*vsHostIndex)
	if v := idx.exact[host]; v != nil {
		return v
	}
	var best *VirtualService
	bestLen := -1
	for _, w := range idx.wildcards {
		if hostMatches(w.host, host) && len(w.host) > bestLen {
			best, bestLen = w.vs, len(w.host)
		}
	}
	return best
}

type hostIndexKey struct {
	ns string
	sc *sidecarScope
}

// vsHostIndex finds the VirtualService of a host for one namespace.
type vsHostIndex struct {
	exact     map[string]*VirtualService
	wildcards []wildcardVS // in VirtualServices order
}

type wildcardVS struct {
	host string
	vs   *VirtualService
}

// VirtualServiceView names what VirtualServices a proxy in namespace ns
// sees: proxies with equal views get the same routes. "" is the view of
// every namespace without a Sidecar when all VirtualServices are public
// and none matches on sourceNamespace.
func (m *Mesh) VirtualServiceView(ns string) string {
	x := m.content.routes
	if len(x.all) == 0 || !x.restricted && m.sidecarFor(ns) == nil {
		return ""
	}
	return ns
}

// RoutesUseSourceLabels reports whether some VirtualService matches on
// sourceLabels: routes then depend on the proxy's workload labels.
func (m *Mesh) RoutesUseSourceLabels() bool { return m.content.routes.sourceLabels }

// routeProblems checks the destinations of every VirtualService against the
// mesh: a subset no DestinationRule of the host defines sends to a cluster
// that does not exist. Callers hold mu.
func (x *routeIndex) routeProblems(byHost map[string]*Service) []Problem {
	var out []Problem
	check := func(v *VirtualService, where string, d *networkingv1.Destination) {
		if d.GetSubset() == "" {
			return
		}
		svc := byHost[d.GetHost()]
		if svc != nil && svc.Subset(d.GetSubset()) == nil {
			out = append(out, Problem{Object: v.object, Reason: fmt.Sprintf(
				"%s: subset %q of %s is defined by no DestinationRule: requests to it fail (503 NC)", where, d.GetSubset(), d.GetHost())})
		}
	}
	for _, v := range x.all {
		for i, h := range v.Spec.GetHttp() {
			for j, r := range h.GetRoute() {
				if r.GetWeight() == 0 && len(h.GetRoute()) > 1 {
					continue // takes no traffic
				}
				check(v, fmt.Sprintf("http[%d].route[%d]", i, j), r.GetDestination())
			}
		}
		for i, t := range v.Spec.GetTcp() {
			for j, r := range t.GetRoute() {
				check(v, fmt.Sprintf("tcp[%d].route[%d]", i, j), r.GetDestination())
			}
		}
		for i, t := range v.Spec.GetTls() {
			for j, r := range t.GetRoute() {
				check(v, fmt.Sprintf("tls[%d].route[%d]", i, j), r.GetDestination())
			}
		}
	}
	return out
}

// allowsHost reports whether the Sidecar imports host from namespace ns
// for a proxy in proxyNS (a VirtualService's host may be a wildcard,
// matched either way round).
func (sc *sidecarScope) allowsHost(proxyNS, ns, host string) bool {
	for _, h := range sc.hosts {
		if h.importsFrom(proxyNS, ns) && (hostMatches(h.host, host) || hostMatches(host, h.host)) {
			return true
		}
	}
	return false
}

// importsFrom reports whether the egress host's namespace part takes
// config of namespace ns for a proxy in proxyNS.
func (h egressHost) importsFrom(proxyNS, ns string) bool {
	switch h.ns {
	case "~":
		return false
	case "*":
		return true
	case ".":
		return ns == proxyNS
	}
	return ns == h.ns
}

func orPublic(v []string) []string {
	if len(v) == 0 {
		return []string{"*"}
	}
	return v
}
