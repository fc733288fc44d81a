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
	var buf [4]keyedSlice
	keyed := buf[:0]
	for id, sl := range sls {
		keyed = append(keyed, keyedSlice{id: id, sl: sl})
	}
	slices.SortFunc(keyed, func(a, b keyedSlice) int {
		return cmp.Or(strings.Compare(a.id.Cluster, b.id.Cluster), strings.Compare(a.id.Name, b.id.Name))
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
		p.Endpoints = portEndpoints(p, sk.Namespace, keyed, pods, nodes)
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
func portEndpoints(p *Port, ns string, keyed []keyedSlice, pods map[podKey]*pod, nodes map[nodeKey]*node) []Endpoint {
	// One allocation for the list: size it for every endpoint of the
	// slices that serve the port, then drop the spare capacity.
	var buf [4]keyedSlice
	serving := buf[:0]
	n := 0
	for _, k := range keyed {
		if sl, port := servingSlice(k.sl, p); sl != nil {
			k.port = port
			serving = append(serving, k)
			n += len(sl.endpoints)
		}
	}
	if n == 0 {
		return nil
	}
	eps := make([]Endpoint, 0, n)
	for _, k := range serving {
		for _, ep := range k.sl.endpoints {
			if ep.notReady {
				continue
			}
			addr := canonicalIP(ep.address)
			if addr == "" {
				continue
			}
			var labels map[string]string
			var sa string
			var pd *pod
			if ep.podName != "" {
				if pd = pods[podKey{Cluster: k.id.Cluster, Namespace: cmp.Or(ep.podNamespace, ns), Name: ep.podName}]; pd != nil {
					labels, sa = pd.labels, pd.sa
				}
			}
			loc := workloadLocality(pd, k.id.Cluster, ep.nodeName, ep.zone, nodes)
			eps = append(eps, Endpoint{
				Address:        addr,
				Port:           k.port,
				Region:         loc.Region,
				Zone:           loc.Zone,
				SubZone:        loc.SubZone,
				NodeName:       ep.nodeName,
				ClusterID:      k.id.Cluster,
				Labels:         labels,
				ServiceAccount: sa,
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

// keyedSlice is one of a service's slices with its id and, once it is
// known to serve a port, the port number it gives it.
type keyedSlice struct {
	id   sliceID
	sl   *slimSlice
	port int32
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
	if canonicalIPv4(s) {
		return s // nearly every endpoint's: no parse needed
	}
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

// canonicalIPv4 reports whether s is an IPv4 address as netip.Addr
// writes it: four decimal fields of 0 to 255, without leading zeros.
func canonicalIPv4(s string) bool {
	if len(s) < len("0.0.0.0") || len(s) > len("255.255.255.255") {
		return false
	}
	dots, val, digits := 0, 0, 0
	for i := range len(s) {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if digits > 0 && val == 0 {
				return false // a leading zero
			}
			if val = val*10 + int(c-'0'); val > 255 {
				return false
			}
			digits++
		case c == '.' && digits > 0 && dots < 3:
			dots++
			val, digits = 0, 0
		default:
			return false
		}
	}
	return dots == 3 && digits > 0
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
