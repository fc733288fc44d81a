package model

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// buildService projects the Service objects (by cluster id) and the
// EndpointSlices joining them onto one mesh service. It returns nil when no
// cluster holds a Service object.
func buildService(sk serviceKey, defs map[string]*slimService, sls map[sliceID]*slimSlice, pods map[podKey]*pod, nodes map[nodeKey]*node, defaultExportTo []string) *Service {
	if len(defs) == 0 {
		return nil
	}
	clusters := sortedKeys(defs, strings.Compare)
	spec := defs[clusters[0]] // first cluster id wins
	svc := &Service{
		Name:      sk.Name,
		Namespace: sk.Namespace,
		Hostname:  Hostname(sk.Namespace, sk.Name),
		Clusters:  clusters,
	}
	switch {
	case spec.typ == corev1.ServiceTypeExternalName:
		svc.ExternalName = spec.externalName
		svc.Resolution = DNSLB
	case spec.clusterIP == corev1.ClusterIPNone:
		svc.Headless = true
		svc.Resolution = Passthrough
	default:
		svc.ClusterIP = canonicalIP(spec.clusterIP)
	}
	svc.ExportTo = defaultExportTo
	if spec.hasExportTo {
		svc.ExportTo = parseExportTo(spec.exportTo)
	}

	// The slice endpoints usable at all, in a stable order so that the
	// per-port lists below need only a cheap sort.
	ids := sortedKeys(sls, func(a, b sliceID) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Name, b.Name))
	})
	svc.Ports = make([]*Port, 0, len(spec.ports))
	for _, sp := range spec.ports {
		if sp.Port < 1 || sp.Port > 65535 {
			continue
		}
		p := &Port{
			Name:        sp.Name,
			Port:        sp.Port,
			Protocol:    cmp.Or(sp.Protocol, corev1.ProtocolTCP),
			AppProtocol: deref(sp.AppProtocol),
			TargetPort:  sp.TargetPort,
		}
		if slices.ContainsFunc(svc.Ports, func(o *Port) bool { return o.Port == p.Port && o.Protocol == p.Protocol }) {
			continue // invalid duplicate; the API server rejects these
		}
		p.Endpoints = portEndpoints(p, sk.Namespace, ids, sls, pods, nodes)
		svc.Ports = append(svc.Ports, p)
	}
	if len(svc.Ports) == 0 {
		svc.Ports = nil
	}
	slices.SortFunc(svc.Ports, func(a, b *Port) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), strings.Compare(string(a.Protocol), string(b.Protocol)))
	})
	return svc
}

// sortedKeys returns m's keys sorted by compare, in one allocation (not
// the few of slices.Sorted growing its result).
func sortedKeys[K comparable, V any](m map[K]V, compare func(a, b K) int) []K {
	if len(m) == 0 {
		return nil
	}
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compare)
	return keys
}

// portEndpoints returns the ready endpoints of one service port: from each
// slice, the port with the same name and protocol.
func portEndpoints(p *Port, ns string, ids []sliceID, sls map[sliceID]*slimSlice, pods map[podKey]*pod, nodes map[nodeKey]*node) []Endpoint {
	// One allocation for the list: size it for every endpoint of the
	// slices that serve the port, then drop the spare capacity.
	n := 0
	for _, id := range ids {
		if sl, _ := servingSlice(sls[id], p); sl != nil {
			n += len(sl.endpoints)
		}
	}
	if n == 0 {
		return nil
	}
	eps := make([]Endpoint, 0, n)
	for _, id := range ids {
		sl, port := servingSlice(sls[id], p)
		if sl == nil {
			continue
		}
		for _, ep := range sl.endpoints {
			if ep.notReady {
				continue
			}
			addr := canonicalIP(ep.address)
			if addr == "" {
				continue
			}
			var labels map[string]string
			var pd *pod
			if ep.podName != "" {
				if pd = pods[podKey{Cluster: id.Cluster, Namespace: cmp.Or(ep.podNamespace, ns), Name: ep.podName}]; pd != nil {
					labels = pd.labels
				}
			}
			loc := workloadLocality(pd, id.Cluster, ep.nodeName, ep.zone, nodes)
			eps = append(eps, Endpoint{
				Address:   addr,
				Port:      port,
				Region:    loc.Region,
				Zone:      loc.Zone,
				SubZone:   loc.SubZone,
				NodeName:  ep.nodeName,
				ClusterID: id.Cluster,
				Labels:    labels,
			})
		}
	}
	if len(eps) == 0 {
		return nil
	}
	slices.SortFunc(eps, compareEndpoints)
	// Several slices may list the same endpoint (the API allows it during
	// updates); keep the first in order.
	return slices.Clip(slices.CompactFunc(eps, func(a, b Endpoint) bool { return a.Address == b.Address && a.Port == b.Port }))
}

// servingSlice returns sl and the port number it gives service port p: that
// of its port with p's name and protocol. It returns nil when sl serves
// no usable address for p.
func servingSlice(sl *slimSlice, p *Port) (*slimSlice, int32) {
	if sl.addressType != discoveryv1.AddressTypeIPv4 && sl.addressType != discoveryv1.AddressTypeIPv6 {
		return nil, 0 // FQDN slices are deprecated and not routable by IP
	}
	i := slices.IndexFunc(sl.ports, func(sp slimPort) bool {
		return sp.name == p.Name && cmp.Or(sp.protocol, corev1.ProtocolTCP) == p.Protocol
	})
	if i < 0 {
		return nil, 0
	}
	port := sl.ports[i].port
	if port < 1 || port > 65535 {
		return nil, 0 // no port means "all ports": nothing to dial
	}
	return sl, port
}

func compareEndpoints(a, b Endpoint) int {
	return cmp.Or(
		strings.Compare(a.Address, b.Address),
		cmp.Compare(a.Port, b.Port),
		strings.Compare(a.ClusterID, b.ClusterID),
		strings.Compare(a.Zone, b.Zone),
		strings.Compare(a.NodeName, b.NodeName),
	)
}

// canonicalIP returns s in canonical form, or "" when s is not an IP address
// usable as a destination (scoped IPv6 addresses are not).
func canonicalIP(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return ""
	}
	// Compare with the canonical form in a stack buffer: most addresses
	// are canonical already, and then nothing is allocated.
	var buf [64]byte
	if c := a.AppendTo(buf[:0]); string(c) != s {
		return string(c)
	}
	return s
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// parseExportTo reads the networking.istio.io/exportTo annotation: a
// comma-separated list, sorted, "*" alone when it holds "*".
func parseExportTo(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	if len(out) == 0 || slices.Contains(out, "*") {
		return []string{"*"}
	}
	slices.Sort(out)
	return out
}
