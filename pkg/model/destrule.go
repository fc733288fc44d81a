package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1 "istio.io/api/networking/v1"
)

// DestinationRule is the DestinationRule (or several, merged) that applies
// to one host seen from a set of namespaces. Immutable; share by pointer.
//
// Rules for one host in one namespace with the same exportTo are merged as
// Istio merges them: the oldest rule (by creation time, then name) gives the
// traffic policy, and the subsets of later rules are added unless a subset
// of that name exists already. Both the ignored policy and a duplicate
// subset are reported as [Problem]s.
type DestinationRule struct {
	// Namespace and Name are the first (oldest) rule's.
	Namespace, Name string
	// Host is spec.host as a fully qualified name (a short name is resolved
	// in the rule's namespace) or a wildcard ("*.example.com", "*").
	Host string
	// ExportTo is the rule's visibility, the mesh default when it sets none.
	ExportTo []string
	// Spec is the merged rule with invalid parts dropped. Read-only.
	Spec *networkingv1.DestinationRule
	// From lists namespace/name of every rule merged into this one.
	From []string
	// WorkloadSelector is spec.workloadSelector.matchLabels: the rule
	// applies only to the sidecars of the workloads in its namespace whose
	// labels include these (nil: every proxy that sees the rule).
	WorkloadSelector map[string]string

	object string // the first rule's problem name
}

// Subset returns the subset named name, or nil.
func (r *DestinationRule) Subset(name string) *networkingv1.Subset {
	for _, s := range r.Spec.GetSubsets() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// visibleTo reports whether a proxy in namespace ns may use the rule.
func (r *DestinationRule) visibleTo(ns string) bool {
	return visible(r.ExportTo, r.Namespace, ns)
}

// visible applies Istio's exportTo: "*" every namespace, "." the owner's,
// "~" none, else the namespaces named.
func visible(exportTo []string, owner, ns string) bool {
	for _, e := range exportTo {
		switch e {
		case "*":
			return true
		case ".":
			if owner == ns {
				return true
			}
		default:
			if e == ns {
				return true
			}
		}
	}
	return false
}

// storedRule is one DestinationRule object as stored.
type storedRule struct {
	key     ObjectKey
	created time.Time
	spec    *networkingv1.DestinationRule
}

// hostRules holds rules by host: exact hosts and wildcards apart.
type hostRules struct {
	specific map[string][]*DestinationRule
	wildcard map[string][]*DestinationRule
}

func (h *hostRules) add(r *DestinationRule) {
	m := &h.specific
	if strings.HasPrefix(r.Host, "*") {
		m = &h.wildcard
	}
	if *m == nil {
		*m = make(map[string][]*DestinationRule)
	}
	(*m)[r.Host] = append((*m)[r.Host], r)
}

// match returns the rules of the most specific host matching host: an
// exact one, else the longest wildcard (Istio's MostSpecificHostMatch).
func (h *hostRules) match(host string) []*DestinationRule {
	if h == nil {
		return nil
	}
	if rs, ok := h.specific[host]; ok {
		return rs
	}
	if rs, ok := h.wildcard[host]; ok { // a wildcard service host
		return rs
	}
	best := ""
	for w := range h.wildcard {
		if hostMatches(w, host) && (len(w) > len(best) || len(w) == len(best) && w < best) {
			best = w
		}
	}
	if best == "" {
		return nil
	}
	return h.wildcard[best]
}

// hostMatches reports whether pattern (a host or a wildcard) matches host.
func hostMatches(pattern, host string) bool {
	if pattern == "*" {
		return true
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return pattern == host
}

// ruleIndex is Istio's destination rule index: by namespace, the rules a
// proxy there sees first; by namespace, the rules exported from it; and the
// root namespace's private rules.
type ruleIndex struct {
	root           string
	namespaceLocal map[string]*hostRules
	exported       map[string]*hostRules
	rootLocal      *hostRules
	// restricted: some rule is not visible to every namespace, so proxies
	// in different namespaces may see different rules.
	restricted bool
	all        []*DestinationRule // every rule, oldest first
	// byHost and wildcards hold every rule (oldest first) by exact host,
	// and those with wildcard hosts: what forService scans.
	byHost    map[string][]*DestinationRule
	wildcards []*DestinationRule
	// selectors holds, by namespace, the rules with a workloadSelector.
	selectors map[string][]*DestinationRule
	order     map[*DestinationRule]int // position in all
	problems  []Problem
}

func emptyRules() *ruleIndex {
	return &ruleIndex{namespaceLocal: map[string]*hostRules{}, exported: map[string]*hostRules{}, rootLocal: &hostRules{}}
}

// lookup returns the rule a proxy in namespace proxyNS uses for svc, as
// Istio's PushContext.destinationRule: the rules in the proxy's own
// namespace first (the root namespace's private ones for a proxy there),
// then those exported from the service's namespace, then those exported
// from the root namespace; within each, the most specific host. Of the
// rules found first, as Istio's SidecarScope.DestinationRule, a rule with
// a workloadSelector in the proxy's namespace that selects it (selected)
// wins, else the first without one; rules with a selector never apply to
// proxies they do not select, so the result may be nil.
func (x *ruleIndex) lookup(proxyNS string, host, svcNS string, selected map[*DestinationRule]bool) *DestinationRule {
	if proxyNS != x.root {
		if rs := x.namespaceLocal[proxyNS].match(host); len(rs) > 0 {
			r, _ := pickRule(rs, proxyNS, selected, false)
			return r
		}
	} else if rs := x.rootLocal.match(host); len(rs) > 0 {
		r, _ := pickRule(rs, proxyNS, selected, false)
		return r
	}
	for _, ns := range []string{svcNS, x.root} {
		if r, found := pickRule(x.exported[ns].match(host), proxyNS, selected, true); found {
			return r
		}
	}
	return nil
}

// pickRule is the rule of rs (oldest first; only those visible to ns when
// exported is set) that applies to a proxy in namespace ns that the rules
// in selected select, and whether rs held any rule (visible) at all.
func pickRule(rs []*DestinationRule, ns string, selected map[*DestinationRule]bool, exported bool) (*DestinationRule, bool) {
	var catchAll *DestinationRule
	found := false
	for _, r := range rs {
		if exported && !r.visibleTo(ns) {
			continue
		}
		found = true
		switch {
		case r.WorkloadSelector == nil:
			if catchAll == nil {
				catchAll = r
			}
		case r.Namespace == ns && selected[r]:
			return r, true
		}
	}
	return catchAll, found
}

// selectedBy returns the rules with a workloadSelector in namespace ns
// that select a workload with labels, and a key naming them ("" for none).
func (x *ruleIndex) selectedBy(ns string, labels map[string]string) (map[*DestinationRule]bool, string) {
	var set map[*DestinationRule]bool
	var key strings.Builder
	for _, r := range x.selectors[ns] {
		if !selectorMatches(r.WorkloadSelector, labels) {
			continue
		}
		if set == nil {
			set = make(map[*DestinationRule]bool)
		}
		set[r] = true
		key.WriteString(r.object + "|" + r.Host + ";")
	}
	return set, key.String()
}

// selectorMatches reports whether labels include every label of selector.
func selectorMatches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// view names the rules a proxy in namespace ns sees: "" when they are the
// same as every other namespace's.
func (x *ruleIndex) view(ns string) string {
	if x.restricted {
		return ns
	}
	if ns == x.root {
		if len(x.rootLocal.specific)+len(x.rootLocal.wildcard) > 0 {
			return ns
		}
		return ""
	}
	if x.namespaceLocal[ns] != nil {
		return ns
	}
	return ""
}

// forService returns every rule matching the service's host, the one a
// proxy in the service's own namespace uses first, then the others oldest
// first.
func (x *ruleIndex) forService(host, svcNS string) []*DestinationRule {
	if len(x.all) == 0 {
		return nil
	}
	exact := x.byHost[host]
	var out []*DestinationRule
	if r := x.lookup(svcNS, host, svcNS, nil); r != nil {
		out = append(out, r)
	}
	// Exact and wildcard rules, oldest first (both lists are).
	i, j := 0, 0
	for i < len(exact) || j < len(x.wildcards) {
		var r *DestinationRule
		if j >= len(x.wildcards) || i < len(exact) && x.order[exact[i]] < x.order[x.wildcards[j]] {
			r, i = exact[i], i+1
		} else {
			r, j = x.wildcards[j], j+1
			if !hostMatches(r.Host, host) {
				continue
			}
		}
		if len(out) == 0 || out[0] != r {
			out = append(out, r)
		}
	}
	return out
}

// resolveHost is Istio's ResolveShortnameToFQDN: a name without a dot is a
// service in the object's namespace.
func resolveHost(host, ns string) string {
	if host == "*" || strings.Contains(host, ".") {
		return host
	}
	return Hostname(ns, host)
}

// buildRules indexes the stored rules, oldest first (Istio sorts by
// creation time), merging rules for one host in one namespace.
func buildRules(stored []*storedRule, root string, defaultExportTo []string, prev *ruleIndex) *ruleIndex {
	slices.SortFunc(stored, func(a, b *storedRule) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Namespace, b.key.Namespace),
			strings.Compare(a.key.Name, b.key.Name), strings.Compare(a.key.Cluster, b.key.Cluster))
	})
	x := emptyRules()
	x.root = root
	type groupKey struct{ ns, host, exportTo, selector string }
	groups := make(map[groupKey]*DestinationRule)
	for _, st := range stored {
		obj := objectName(st.key)
		spec := st.spec
		if spec.GetHost() == "" {
			x.problems = append(x.problems, Problem{Object: obj, Reason: "spec.host is empty: rule ignored"})
			continue
		}
		spec, problems := validRule(spec)
		for _, p := range problems {
			x.problems = append(x.problems, Problem{Object: obj, Reason: p})
		}
		exportTo := spec.GetExportTo()
		if len(exportTo) == 0 {
			exportTo = defaultExportTo
		}
		host := resolveHost(spec.GetHost(), st.key.Namespace)
		selector := spec.GetWorkloadSelector().GetMatchLabels()
		if spec.GetWorkloadSelector() != nil && selector == nil {
			selector = map[string]string{} // selects every workload of the namespace
		}
		gk := groupKey{st.key.Namespace, host, strings.Join(exportTo, ","), selectorKey(selector)}
		if first := groups[gk]; first != nil {
			// Merged into the older rule: a copy, so rules already
			// published in a mesh stay as they were.
			merged := proto.Clone(first.Spec).(*networkingv1.DestinationRule)
			for _, s := range spec.GetSubsets() {
				if first.Subset(s.GetName()) != nil {
					x.problems = append(x.problems, Problem{Object: obj, Reason: fmt.Sprintf("subset %q already defined for host %s by %s: ignored", s.GetName(), host, first.From[0])})
					continue
				}
				merged.Subsets = append(merged.Subsets, s)
			}
			if spec.GetTrafficPolicy() != nil {
				if merged.TrafficPolicy == nil {
					merged.TrafficPolicy = spec.GetTrafficPolicy()
				} else {
					x.problems = append(x.problems, Problem{Object: obj, Reason: fmt.Sprintf("another DestinationRule for host %s in namespace %s (%s) is older: its trafficPolicy wins, this one's is ignored", host, st.key.Namespace, first.From[0])})
				}
			}
			*first = DestinationRule{Namespace: first.Namespace, Name: first.Name, Host: host, ExportTo: first.ExportTo, Spec: merged, From: append(first.From, st.key.Namespace+"/"+st.key.Name), WorkloadSelector: first.WorkloadSelector, object: first.object}
			continue
		}
		r := &DestinationRule{Namespace: st.key.Namespace, Name: st.key.Name, Host: host, ExportTo: exportTo, Spec: spec, From: []string{st.key.Namespace + "/" + st.key.Name}, WorkloadSelector: selector, object: obj}
		groups[gk] = r
		x.all = append(x.all, r)
	}
	// A rule equal to one of the previous index stays the same pointer, so
	// that services whose rules did not change keep their memos.
	if prev != nil {
		same := make(map[string]*DestinationRule, len(prev.all))
		for _, r := range prev.all {
			same[r.object+"|"+r.Host] = r
		}
		for i, r := range x.all {
			if p := same[r.object+"|"+r.Host]; p != nil && slices.Equal(p.From, r.From) && maps.Equal(p.WorkloadSelector, r.WorkloadSelector) &&
				slices.Equal(p.ExportTo, r.ExportTo) && proto.Equal(p.Spec, r.Spec) {
				x.all[i] = p
			}
		}
	}
	x.byHost = make(map[string][]*DestinationRule)
	x.selectors = make(map[string][]*DestinationRule)
	x.order = make(map[*DestinationRule]int, len(x.all))
	for i, r := range x.all {
		x.order[r] = i
		if r.WorkloadSelector != nil {
			x.selectors[r.Namespace] = append(x.selectors[r.Namespace], r)
		}
		if strings.HasPrefix(r.Host, "*") {
			x.wildcards = append(x.wildcards, r)
		} else {
			x.byHost[r.Host] = append(x.byHost[r.Host], r)
		}
		if !slices.Contains(r.ExportTo, "*") {
			x.restricted = true
		}
		if slices.Contains(r.ExportTo, "*") || slices.Contains(r.ExportTo, ".") || slices.Contains(r.ExportTo, r.Namespace) {
			hr := x.namespaceLocal[r.Namespace]
			if hr == nil {
				hr = &hostRules{}
				x.namespaceLocal[r.Namespace] = hr
			}
			hr.add(r)
		}
		privateOnly := len(r.ExportTo) == 1 && (r.ExportTo[0] == "." || r.ExportTo[0] == r.Namespace)
		switch {
		case !privateOnly && !slices.Equal(r.ExportTo, []string{"~"}):
			hr := x.exported[r.Namespace]
			if hr == nil {
				hr = &hostRules{}
				x.exported[r.Namespace] = hr
			}
			hr.add(r)
		case privateOnly && r.Namespace == root:
			x.rootLocal.add(r)
		}
	}
	return x
}

// validRule returns the rule without its invalid parts (a copy when it
// drops any) and what it dropped.
func validRule(spec *networkingv1.DestinationRule) (*networkingv1.DestinationRule, []string) {
	var problems []string
	var keep []*networkingv1.Subset
	seen := map[string]bool{}
	for _, s := range spec.GetSubsets() {
		switch {
		case s.GetName() == "":
			problems = append(problems, "a subset has no name: ignored")
		case len(s.GetLabels()) == 0:
			problems = append(problems, fmt.Sprintf("subset %q has no labels: ignored", s.GetName()))
		case seen[s.GetName()]:
			problems = append(problems, fmt.Sprintf("subset %q is defined twice: the second is ignored", s.GetName()))
		default:
			seen[s.GetName()] = true
			keep = append(keep, s)
		}
	}
	portProblem := func(where string, tp *networkingv1.TrafficPolicy) {
		for _, pl := range tp.GetPortLevelSettings() {
			if n := pl.GetPort().GetNumber(); n == 0 || n > 65535 {
				problems = append(problems, fmt.Sprintf("%sportLevelSettings: port %d is not a port number: ignored", where, n))
			}
		}
	}
	tlsProblem := func(where string, tp *networkingv1.TrafficPolicy) {
		tlss := []*networkingv1.ClientTLSSettings{tp.GetTls()}
		for _, pl := range tp.GetPortLevelSettings() {
			tlss = append(tlss, pl.GetTls())
		}
		for _, t := range tlss {
			switch {
			case t.GetCredentialName() != "":
				problems = append(problems, where+"tls credentialName needs SDS, not configured yet: plaintext")
			}
		}
	}
	portProblem("", spec.GetTrafficPolicy())
	tlsProblem("", spec.GetTrafficPolicy())
	tp, invalid := trafficPolicyProblems("trafficPolicy.", spec.GetTrafficPolicy())
	problems = append(problems, invalid...)
	for i, s := range keep {
		where := fmt.Sprintf("subset %q: ", s.GetName())
		portProblem(where, s.GetTrafficPolicy())
		tlsProblem(where, s.GetTrafficPolicy())
		stp, invalid := trafficPolicyProblems("trafficPolicy.", s.GetTrafficPolicy())
		for _, p := range invalid {
			problems = append(problems, where+p)
		}
		if stp != s.GetTrafficPolicy() {
			sub := proto.Clone(s).(*networkingv1.Subset)
			sub.TrafficPolicy = stp
			keep[i] = sub
		}
	}
	if len(problems) == 0 {
		return spec, nil
	}
	out := proto.Clone(spec).(*networkingv1.DestinationRule)
	out.Subsets = keep
	out.TrafficPolicy = tp
	return out, problems
}

// DestinationRule returns the rule a proxy in namespace proxyNS applies to
// svc, or nil (Istio's precedence: see [ruleIndex.lookup]). Rules with a
// workloadSelector apply only on a mesh scoped for a proxy they select
// ([Mesh.ScopeForProxy]), to proxies in the scope's namespace.
func (m *Mesh) DestinationRule(proxyNS string, svc *Service) *DestinationRule {
	if len(svc.rules) == 0 {
		return nil
	}
	return m.content.rules.lookup(proxyNS, svc.Hostname, svc.Namespace, m.content.selected)
}

// DestinationRuleView names the destination rules a proxy in namespace ns
// sees: proxies whose views are equal see the same rule for every service,
// so output that depends on rules may be shared between them. "" is the
// view of namespaces without rules of their own.
func (m *Mesh) DestinationRuleView(ns string) string {
	return m.content.rules.view(ns)
}

// Subset returns the subset named name of the first rule for the service
// that defines it (rules in the order [Service.DestinationRules] gives),
// or nil. Load assignments of subset clusters use it: they are shared by
// every proxy, whichever rule the proxy's namespace sees.
func (s *Service) Subset(name string) *networkingv1.Subset {
	for _, r := range s.rules {
		if sub := r.Subset(name); sub != nil {
			return sub
		}
	}
	return nil
}

// Subsets returns every subset name some rule for the service defines,
// first definition first. See [Service.Subset].
func (s *Service) Subsets() []string {
	var out []string
	for _, r := range s.rules {
		for _, sub := range r.Spec.GetSubsets() {
			if !slices.Contains(out, sub.GetName()) {
				out = append(out, sub.GetName())
			}
		}
	}
	return out
}

// DestinationRules returns every rule whose host matches the service, in
// any namespace: the one a proxy in the service's namespace uses first,
// then the others oldest first. Read-only.
func (s *Service) DestinationRules() []*DestinationRule { return s.rules }

// TrafficPolicy returns the traffic policy of rule r for one port and
// subset ("" for none), as Istio's cluster builder merges it:
//   - portLevelSettings for the port replace the rule's policy wholesale:
//     a component they leave out gets its default, nothing is inherited
//     from the rule's top level (nor its proxyProtocol, tunnel or
//     retryBudget);
//   - the mesh config's defaultTrafficPolicy then fills connectionPool and
//     outlierDetection where that policy sets none;
//   - a subset's policy then overrides it component by component, unless
//     the subset has portLevelSettings for the port: those replace
//     connectionPool, outlierDetection, loadBalancer and tls wholesale
//     (the mesh default included), keeping the rest.
//
// Any portLevelSettings left in the result are for other ports. nil when
// nothing is set. Read-only.
func (m *Mesh) TrafficPolicy(r *DestinationRule, port int32, subset string) *networkingv1.TrafficPolicy {
	var tp *networkingv1.TrafficPolicy
	if r != nil {
		tp, _ = forPort(r.Spec.GetTrafficPolicy(), port)
	}
	tp = withMeshDefault(tp, m.content.settings.defaultPolicy)
	if r == nil {
		return tp
	}
	if s := r.Subset(subset); s != nil && s.GetTrafficPolicy() != nil {
		top, portLevel := forPort(s.GetTrafficPolicy(), port)
		tp = mergeSubset(tp, top, portLevel)
	}
	return tp
}

// ConsistentHash returns the consistent hash a route to r's host hashes
// requests by, for a destination with subset ("" for none) and port (0
// when the destination names none), as Istio's route builder picks it:
// the first hash set by the subset's portLevelSettings for the port, the
// subset's policy, the rule's portLevelSettings for the port, the rule's
// policy. Unlike [Mesh.TrafficPolicy] nothing is replaced wholesale: a
// level without a hash of its own falls through to the next. nil when
// none hashes. Read-only.
func (r *DestinationRule) ConsistentHash(port int32, subset string) *networkingv1.LoadBalancerSettings_ConsistentHashLB {
	portHash := func(tp *networkingv1.TrafficPolicy) *networkingv1.LoadBalancerSettings_ConsistentHashLB {
		if port == 0 {
			return nil
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if pl.GetPort().GetNumber() == uint32(port) {
				return pl.GetLoadBalancer().GetConsistentHash()
			}
		}
		return nil
	}
	if r == nil {
		return nil
	}
	if s := r.Subset(subset); s != nil {
		if h := portHash(s.GetTrafficPolicy()); h != nil {
			return h
		}
		if h := s.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash(); h != nil {
			return h
		}
	}
	if h := portHash(r.Spec.GetTrafficPolicy()); h != nil {
		return h
	}
	return r.Spec.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash()
}

// forPort is tp's policy for port: that of its portLevelSettings for the
// port, alone (portLevel true), else tp itself.
func forPort(tp *networkingv1.TrafficPolicy, port int32) (_ *networkingv1.TrafficPolicy, portLevel bool) {
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == uint32(port) {
			return &networkingv1.TrafficPolicy{
				ConnectionPool:   pl.ConnectionPool,
				OutlierDetection: pl.OutlierDetection,
				LoadBalancer:     pl.LoadBalancer,
				Tls:              pl.Tls,
			}, true
		}
	}
	return tp, false
}

// withMeshDefault is tp with the mesh default's connectionPool and
// outlierDetection where tp sets none.
func withMeshDefault(tp *networkingv1.TrafficPolicy, d *meshv1alpha1.MeshConfig_DefaultTrafficPolicy) *networkingv1.TrafficPolicy {
	needPool := d.GetConnectionPool() != nil && tp.GetConnectionPool() == nil
	needOutlier := d.GetOutlierDetection() != nil && tp.GetOutlierDetection() == nil
	if !needPool && !needOutlier {
		return tp
	}
	out := shallowPolicy(tp)
	if needPool {
		out.ConnectionPool = d.GetConnectionPool()
	}
	if needOutlier {
		out.OutlierDetection = d.GetOutlierDetection()
	}
	return out
}

// mergeSubset is base overridden by a subset's policy top: by each
// component top sets, or, when top is port-level, by its four components
// whether set or not.
func mergeSubset(base, top *networkingv1.TrafficPolicy, portLevel bool) *networkingv1.TrafficPolicy {
	if base == nil {
		return top
	}
	out := shallowPolicy(base)
	if top.ConnectionPool != nil || portLevel {
		out.ConnectionPool = top.ConnectionPool
	}
	if top.OutlierDetection != nil || portLevel {
		out.OutlierDetection = top.OutlierDetection
	}
	if top.LoadBalancer != nil || portLevel {
		out.LoadBalancer = top.LoadBalancer
	}
	if top.Tls != nil || portLevel {
		out.Tls = top.Tls
	}
	if top.Tunnel != nil {
		out.Tunnel = top.Tunnel
	}
	if top.ProxyProtocol != nil {
		out.ProxyProtocol = top.ProxyProtocol
	}
	if top.RetryBudget != nil {
		out.RetryBudget = top.RetryBudget
	}
	return out
}

// shallowPolicy is a copy of tp without portLevelSettings (an empty
// policy for nil).
func shallowPolicy(tp *networkingv1.TrafficPolicy) *networkingv1.TrafficPolicy {
	if tp == nil {
		return &networkingv1.TrafficPolicy{}
	}
	return &networkingv1.TrafficPolicy{
		ConnectionPool:   tp.ConnectionPool,
		OutlierDetection: tp.OutlierDetection,
		LoadBalancer:     tp.LoadBalancer,
		Tls:              tp.Tls,
		ProxyProtocol:    tp.ProxyProtocol,
		Tunnel:           tp.Tunnel,
		RetryBudget:      tp.RetryBudget,
	}
}

type portSettings = networkingv1.TrafficPolicy_PortTrafficPolicy

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// HasDefaultTrafficPolicy reports whether the mesh config sets a
// defaultTrafficPolicy, which applies to services without rules too.
func (m *Mesh) HasDefaultTrafficPolicy() bool { return m.content.settings.defaultPolicy != nil }

// selectorKey is a canonical string of a label selector ("" for nil).
func selectorKey(sel map[string]string) string {
	if sel == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("{")
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		b.WriteString(k + "=" + sel[k] + ",")
	}
	b.WriteString("}")
	return b.String()
}
