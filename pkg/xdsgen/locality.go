package xdsgen

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Locality load balancing, after Istio's (pilot/pkg/networking/core/
// loadbalancer): a DestinationRule's trafficPolicy.loadBalancer.
// localityLbSetting, else the mesh config's, gives each proxy its own
// priorities or weights per locality of a load assignment:
//   - distribute: the first entry whose from matches the proxy's locality
//     weighs the localities its to names (a locality's share split over
//     its endpoint groups by their weight, rounded up); localities it does
//     not name get no traffic (Istio leaves them empty, pilotwire leaves
//     them out: the same for Envoy, and gRPC needs no empty child);
//   - otherwise, only when the policy has outlierDetection (without it a
//     proxy never learns that a locality failed, so Istio does not fail
//     over): failoverPriority splits each locality by how many of the
//     listed labels the endpoint shares with the proxy, then failover (or
//     without failoverPriority, always) orders by locality: same
//     region/zone/subzone first, then same zone, same region, a region a
//     failover entry names for the proxy's, any other region. Priorities
//     are then renumbered 0..N without gaps.
//
// Load assignments depend on the proxy only for the services where some
// rule or the mesh config can have such an effect; every proxy shares the
// others (and, for a proxy whose rule has none, all of them).

// localitySetting is the effective setting for a policy (Istio's
// GetEffectiveLbSetting, without zone-aware and traffic distribution): the
// policy's localityLbSetting, else the mesh's; nil when disabled or unset.
func localitySetting(m *model.Mesh, tp *networkingv1.TrafficPolicy) *networkingv1.LocalityLoadBalancerSetting {
	s := tp.GetLoadBalancer().GetLocalityLbSetting()
	if s == nil {
		s = m.LocalityLbSetting()
	}
	if s == nil || s.GetEnabled() != nil && !s.GetEnabled().GetValue() {
		return nil
	}
	return s
}

// localityEffect says what a setting does to the load assignments of a
// policy: nothing, weights, or priorities (failover needs outlier detection).
func localityEffect(s *networkingv1.LocalityLoadBalancerSetting, tp *networkingv1.TrafficPolicy) (weights, failover bool) {
	switch {
	case s == nil:
		return false, false
	case len(s.GetDistribute()) > 0:
		return true, false
	default:
		return false, tp.GetOutlierDetection() != nil
	}
}

// applyLocalityLbConfig sets the cluster's locality weighted LB config
// where Envoy needs it for the load assignment's weights or priorities
// (Istio's ApplyToCluster): with distribute, or failover with its own
// failover or failoverPriority entries.
func applyLocalityLbConfig(m *model.Mesh, c *clusterv3.Cluster, tp *networkingv1.TrafficPolicy) {
	s := localitySetting(m, tp)
	weights, failover := localityEffect(s, tp)
	if !weights && !(failover && (len(s.GetFailover()) > 0 || len(s.GetFailoverPriority()) > 0)) {
		return
	}
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.LocalityConfigSpecifier = &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
		LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
	}
}

// localityInfo is, per mesh, what locality load balancing may read.
type localityInfo struct {
	// services (by hostname) whose load assignments may depend on the
	// proxy. Not by pointer: the index lives in the config memo, which a
	// service's next version with other endpoints shares.
	services map[string]bool
	// labels are the failoverPriority label names of every rule and the
	// mesh setting: the proxy labels load assignments may depend on.
	labels []string
}

var keyLocalityInfo any = memoKey{typeURL: "locality-info"} // per mesh config

// localityInfoOf finds the services whose load assignments may depend on
// the proxy: every service when the mesh setting distributes, else those
// with a rule that sets a localityLbSetting or outlierDetection anywhere
// (or all, when the mesh's default traffic policy has outlier detection
// and the mesh setting is on). Over-approximating costs only sharing.
func localityInfoOf(m *model.Mesh) *localityInfo {
	return m.ConfigMemo(keyLocalityInfo, func() any {
		info := &localityInfo{services: make(map[string]bool)}
		addLabels := func(s *networkingv1.LocalityLoadBalancerSetting) {
			for _, l := range s.GetFailoverPriority() {
				name, _, _ := strings.Cut(l, "=")
				if !slices.Contains(info.labels, name) {
					info.labels = append(info.labels, name)
				}
			}
		}
		mesh := localitySetting(m, nil)
		addLabels(mesh)
		all := len(mesh.GetDistribute()) > 0 || mesh != nil && m.TrafficPolicy(nil, 0, "").GetOutlierDetection() != nil
		for _, svc := range m.Services {
			if all {
				info.services[svc.Hostname] = true
				continue
			}
			for _, r := range svc.DestinationRules() {
				if ruleMayLocalize(r.Spec, addLabels) {
					info.services[svc.Hostname] = true
				}
			}
		}
		slices.Sort(info.labels)
		return info
	}).(*localityInfo)
}

// ruleMayLocalize reports whether a rule sets a localityLbSetting or
// outlierDetection in any of its policies, noting failoverPriority labels.
func ruleMayLocalize(dr *networkingv1.DestinationRule, addLabels func(*networkingv1.LocalityLoadBalancerSetting)) bool {
	found := false
	check := func(lb *networkingv1.LoadBalancerSettings, od *networkingv1.OutlierDetection) {
		if s := lb.GetLocalityLbSetting(); s != nil {
			found = true
			addLabels(s)
		}
		found = found || od != nil
	}
	policy := func(tp *networkingv1.TrafficPolicy) {
		check(tp.GetLoadBalancer(), tp.GetOutlierDetection())
		for _, pl := range tp.GetPortLevelSettings() {
			check(pl.GetLoadBalancer(), pl.GetOutlierDetection())
		}
	}
	policy(dr.GetTrafficPolicy())
	for _, sub := range dr.GetSubsets() {
		policy(sub.GetTrafficPolicy())
	}
	return found
}

// proxyTopology is what a proxy's load assignments may depend on: its
// locality, and the labels failoverPriority compares (its workload labels
// with Istio's topology labels added).
type proxyTopology struct {
	locality model.Locality
	labels   map[string]string
	// key names the two, for memo keys.
	key string
}

var keyLocalityIndex any = memoKey{typeURL: "locality-index"} // per mesh, reads endpoints

// topologyOf is p's topology: its node's locality, else (as Istio) that of
// the workload with its IP; its labels with the topology labels added.
func (p Proxy) topologyOf(full *model.Mesh, names []string) proxyTopology {
	loc := p.Locality
	if loc == (model.Locality{}) && p.IP != "" {
		idx := full.Memo(keyLocalityIndex, func() any {
			out := make(map[string]model.Locality)
			for _, svc := range full.Services {
				for _, port := range svc.Ports {
					for i := range port.Endpoints {
						ep := &port.Endpoints[i]
						if _, ok := out[ep.Address]; !ok {
							out[ep.Address] = ep.Locality()
						}
					}
				}
			}
			return out
		}).(map[string]model.Locality)
		loc = idx[p.IP]
	}
	t := proxyTopology{locality: loc}
	var b strings.Builder
	b.WriteString(loc.String())
	if len(names) > 0 {
		t.labels = topologyLabels(p.workloadLabels(full), loc, p.ClusterID, "", "")
		for _, n := range names {
			b.WriteString("\x00" + n + "=" + t.labels[n])
		}
	}
	t.key = b.String()
	return t
}

// topologyLabels are a workload's labels with Istio's topology labels set
// where known (Istio's AugmentLabels). The result is new, or labels itself
// when nothing is added.
func topologyLabels(labels map[string]string, loc model.Locality, cluster, network, node string) map[string]string {
	add := [...]struct{ k, v string }{
		{model.LabelRegion, loc.Region}, {model.LabelZone, loc.Zone}, {model.LabelSubZone, loc.SubZone},
		{model.LabelCluster, cluster}, {model.LabelNetwork, network}, {model.LabelHostname, node},
	}
	var out map[string]string
	for _, a := range add {
		if a.v == "" || labels[a.k] == a.v {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(labels)+len(add))
			for k, v := range labels {
				out[k] = v
			}
		}
		out[a.k] = a.v
	}
	if out == nil {
		return labels
	}
	return out
}

// edsLocalityKey memoises a service's load assignments for one rule and
// one proxy topology.
type edsLocalityKey struct {
	rule     *model.DestinationRule
	topology string
}

// proxyKey.typeURL of a proxy's EDS set.
const edsProxyType = "eds-proxy"

// endpointSetFor is the EDS set of proxy p: the shared one, unless some
// service's load assignments depend on the proxy's locality or labels.
func endpointSetFor(full *model.Mesh, p Proxy) (*Set, error) {
	base, err := memoSet(full, keyEDS, true, func() (*Set, error) { return endpointSet(full) })
	if err != nil || len(localityInfoOf(full).services) == 0 {
		return base, err
	}
	info := localityInfoOf(full)
	topo := p.topologyOf(full, info.labels)
	key := proxyKey{typeURL: edsProxyType, rules: full.DestinationRuleView(p.Namespace), labels: topo.key}
	return memoSet(full, key, true, func() (*Set, error) {
		var own []*Resource
		for _, svc := range full.Services {
			if !info.services[svc.Hostname] {
				continue
			}
			dr := full.DestinationRule(p.Namespace, svc)
			r := svc.Memo(edsLocalityKey{rule: dr, topology: topo.key}, func() any {
				rs, err := localLoadAssignments(full, svc, dr, topo)
				return serviceResult{resources: rs, err: err}
			}).(serviceResult)
			if r.err != nil {
				return nil, r.err
			}
			own = append(own, r.resources...)
		}
		if len(own) == 0 {
			return base, nil
		}
		return overlaySet(base, own), nil
	})
}

// localLoadAssignments are the load assignments of svc that rule dr (nil:
// none) and the mesh setting give proxy topology t its own version of;
// those left out are the shared ones.
func localLoadAssignments(m *model.Mesh, svc *model.Service, dr *model.DestinationRule, t proxyTopology) ([]*Resource, error) {
	var out []*Resource
	subsets := svc.Subsets()
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		for _, subset := range append([]string{""}, subsets...) {
			tp := m.TrafficPolicy(dr, p.Port, subset)
			s := localitySetting(m, tp)
			weights, failover := localityEffect(s, tp)
			if !weights && !failover {
				continue
			}
			eps := p.Endpoints
			if subset != "" {
				eps = subsetEndpoints(eps, svc.Subset(subset).GetLabels())
			}
			name := model.OutboundClusterName(p.Port, subset, svc.Hostname)
			cla, groups := groupLocalities(name, eps, len(s.GetFailoverPriority()) > 0)
			if weights {
				applyLocalityWeights(t.locality, cla, s.GetDistribute())
			} else {
				if len(s.GetFailoverPriority()) > 0 {
					applyFailoverPriorities(cla, groups, t.labels, s.GetFailoverPriority())
				}
				if len(s.GetFailoverPriority()) == 0 || len(s.GetFailover()) > 0 {
					applyLocalityFailover(t.locality, cla, s.GetFailover())
				}
			}
			r, err := newResource(name, cla)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// localityMatch reports whether loc matches Istio's locality pattern
// region/zone/subzone, where "*" or a missing part matches anything (the
// region must be given).
func localityMatch(loc model.Locality, pattern string) bool {
	p := model.ParseLocality(pattern)
	return (p.Region == "*" || p.Region == loc.Region) &&
		(p.Zone == "*" || p.Zone == "" || p.Zone == loc.Zone) &&
		(p.SubZone == "*" || p.SubZone == "" || p.SubZone == loc.SubZone)
}

func localityOf(lle *endpointv3.LocalityLbEndpoints) model.Locality {
	l := lle.GetLocality()
	return model.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
}

// applyLocalityWeights applies the first distribute entry matching the
// proxy's locality. Its to patterns are taken most specific first (fewer
// wildcards and missing parts, then by name; Istio takes them in map
// order), each claiming the localities not yet claimed.
func applyLocalityWeights(loc model.Locality, cla *endpointv3.ClusterLoadAssignment, distribute []*networkingv1.LocalityLoadBalancerSetting_Distribute) {
	for _, d := range distribute {
		if d == nil || !localityMatch(loc, d.GetFrom()) {
			continue
		}
		to := make([]string, 0, len(d.GetTo()))
		for k := range d.GetTo() {
			to = append(to, k)
		}
		slices.SortFunc(to, func(a, b string) int { return cmp.Or(cmp.Compare(vagueness(a), vagueness(b)), strings.Compare(a, b)) })
		claimed := make([]bool, len(cla.Endpoints))
		weights := make([]uint32, len(cla.Endpoints))
		for _, pattern := range to {
			weight := d.GetTo()[pattern]
			var total float64
			var idx []int
			for i, lle := range cla.Endpoints {
				if !claimed[i] && localityMatch(localityOf(lle), pattern) {
					claimed[i] = true
					idx = append(idx, i)
					total += float64(max(lle.GetLoadBalancingWeight().GetValue(), 1))
				}
			}
			for _, i := range idx {
				w := math.Ceil(float64(max(cla.Endpoints[i].GetLoadBalancingWeight().GetValue(), 1)) * float64(weight) / total)
				weights[i] = uint32(min(w, math.MaxUint32))
			}
		}
		kept := cla.Endpoints[:0]
		for i, lle := range cla.Endpoints {
			if claimed[i] && weights[i] > 0 {
				lle.LoadBalancingWeight = wrapperspb.UInt32(weights[i])
				kept = append(kept, lle)
			}
		}
		clear(cla.Endpoints[len(kept):])
		cla.Endpoints = kept
		return
	}
}

// vagueness counts a pattern's wildcard and missing parts.
func vagueness(pattern string) int {
	p := model.ParseLocality(pattern)
	n := 0
	for _, s := range []string{p.Region, p.Zone, p.SubZone} {
		if s == "" || s == "*" {
			n++
		}
	}
	return n
}

// lbPriority is Istio's locality priority of endpoints at ep for a proxy
// at proxy: 0 same subzone, 1 same zone, 2 same region, 3 other.
func lbPriority(proxy, ep model.Locality) uint32 {
	switch {
	case proxy.Region != ep.Region:
		return 3
	case proxy.Zone != ep.Zone:
		return 2
	case proxy.SubZone != ep.SubZone:
		return 1
	}
	return 0
}

// applyLocalityFailover sets priorities by locality relative to the
// proxy, composed with those failoverPriority set (times 5: locality
// gives 0..4), then renumbers them without gaps.
func applyLocalityFailover(loc model.Locality, cla *endpointv3.ClusterLoadAssignment, failover []*networkingv1.LocalityLoadBalancerSetting_Failover) {
	for _, lle := range cla.Endpoints {
		epLoc := localityOf(lle)
		p := lbPriority(loc, epLoc)
		if p == 3 {
			for _, f := range failover {
				if f.GetFrom() == loc.Region {
					if epLoc.Region != f.GetTo() {
						p = 4
					}
					break
				}
			}
		}
		lle.Priority = lle.Priority*5 + p
	}
	compactPriorities(cla.Endpoints)
}

// compactPriorities renumbers priorities 0..N in their order.
func compactPriorities(lles []*endpointv3.LocalityLbEndpoints) {
	var ps []uint32
	for _, lle := range lles {
		ps = append(ps, lle.Priority)
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	for _, lle := range lles {
		i, _ := slices.BinarySearch(ps, lle.Priority)
		lle.Priority = uint32(i)
	}
}

// networkLabel is Istio's topology.istio.io/network: a failoverPriority
// starting with it does not demote endpoints of another network below
// those of the proxy's, it only orders them last.
const networkLabel = model.LabelNetwork

// applyFailoverPriorities splits each locality by failoverPriority: an
// endpoint's priority is the number of labels, from the first listed,
// it does not share with the proxy (a "label=value" entry compares with
// that value instead of the proxy's). Without proxy labels it does
// nothing, as in Istio.
func applyFailoverPriorities(cla *endpointv3.ClusterLoadAssignment, groups []localityGroup, proxyLabels map[string]string, priorities []string) {
	if len(proxyLabels) == 0 || len(groups) == 0 {
		return
	}
	names := make([]string, len(priorities))
	want := make([]string, len(priorities))
	for i, p := range priorities {
		name, value, override := strings.Cut(p, "=")
		names[i] = name
		want[i] = proxyLabels[name]
		if override {
			want[i] = value
		}
	}
	lowest := uint32(len(priorities))
	withNetwork := names[0] == networkLabel
	var out []*endpointv3.LocalityLbEndpoints
	for _, g := range groups {
		byPriority := map[uint32]*endpointv3.LocalityLbEndpoints{}
		for i := range g.eps {
			ep := &g.eps[i]
			labels := topologyLabels(ep.Labels, ep.Locality(), ep.ClusterID, ep.Network, ep.NodeName)
			var p, adjust uint32
			for j, name := range names {
				if labels[name] == want[j] {
					continue
				}
				if j == 0 && withNetwork {
					adjust = lowest
					continue
				}
				p = lowest - uint32(j)
				break
			}
			p += adjust
			split := byPriority[p]
			if split == nil {
				split = &endpointv3.LocalityLbEndpoints{Locality: g.lle.Locality, Priority: p, LoadBalancingWeight: wrapperspb.UInt32(0)}
				byPriority[p] = split
			}
			lb := g.lle.LbEndpoints[i]
			split.LbEndpoints = append(split.LbEndpoints, lb)
			split.LoadBalancingWeight.Value += lb.GetLoadBalancingWeight().GetValue()
		}
		for _, p := range slices.Sorted(maps.Keys(byPriority)) {
			out = append(out, byPriority[p])
		}
	}
	compactPriorities(out)
	cla.Endpoints = out
}

// overlaySet is base with the resources of own replacing those of the
// same name (each is in base: a load assignment of a served port). base
// is sorted and unique, so one merge pass keeps it so without a sort.
func overlaySet(base *Set, own []*Resource) *Set {
	own = sortedByName(own)
	rs := make([]*Resource, 0, len(base.Resources)+len(own))
	i := 0
	for _, r := range base.Resources {
		for i < len(own) && own[i].Name < r.Name {
			rs = append(rs, own[i]) // not in base: kept all the same
			i++
		}
		if i < len(own) && own[i].Name == r.Name {
			rs = append(rs, own[i])
			i++
			continue
		}
		rs = append(rs, r)
	}
	rs = append(rs, own[i:]...)
	byName := make(map[string]*Resource, len(rs))
	for _, r := range rs {
		byName[r.Name] = r
	}
	return &Set{TypeURL: base.TypeURL, Resources: rs, Version: VersionOf(rs), byName: byName}
}
