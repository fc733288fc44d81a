package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	networkingv1 "istio.io/api/networking/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// storedEntry is one ServiceEntry object as stored.
type storedEntry struct {
	key     ObjectKey
	created time.Time
	spec    *networkingv1.ServiceEntry
}

// storedWorkload is one WorkloadEntry object as stored.
type storedWorkload struct {
	key  ObjectKey
	spec *networkingv1.WorkloadEntry
}

// entrySources is what ServiceEntry services are built from.
type entrySources struct {
	entries   []*storedEntry
	workloads []*storedWorkload // sorted by key
	pods      map[podKey]*pod
	nodes     map[nodeKey]*node
	// taken reports whether a Kubernetes Service has the hostname.
	taken           func(host string) bool
	defaultExportTo []string
}

// buildServiceEntries turns ServiceEntries into mesh services, one per
// host, as Istio's serviceentry registry: a host two objects declare goes
// to the oldest (then by namespace and name), a host a Kubernetes Service
// has stays the Service's; the others are reported.
func buildServiceEntries(src entrySources) (map[string]*Service, []Problem) {
	entries := slices.Clone(src.entries)
	slices.SortFunc(entries, func(a, b *storedEntry) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Namespace, b.key.Namespace),
			strings.Compare(a.key.Name, b.key.Name), strings.Compare(a.key.Cluster, b.key.Cluster))
	})
	out := make(map[string]*Service)
	owner := make(map[string]string)
	var problems []Problem
	for _, se := range entries {
		obj := objectName(se.key)
		report := func(format string, args ...any) {
			problems = append(problems, Problem{Object: obj, Reason: fmt.Sprintf(format, args...)})
		}
		spec := se.spec
		res, ok := resolutionOf(spec.GetResolution())
		if !ok {
			report("resolution %s is not supported: entry ignored", spec.GetResolution())
			continue
		}
		if len(spec.GetHosts()) == 0 {
			report("spec.hosts is empty: entry ignored")
			continue
		}
		ports := entryPorts(spec, report)
		if len(ports) == 0 {
			report("no valid ports: entry ignored")
			continue
		}
		if spec.GetWorkloadSelector() != nil && len(spec.GetEndpoints()) > 0 {
			report("both endpoints and workloadSelector are set: workloadSelector ignored")
		}
		exportTo := spec.GetExportTo()
		if len(exportTo) == 0 {
			exportTo = src.defaultExportTo
		}
		var clusterIP string
		for _, a := range spec.GetAddresses() {
			if ip := canonicalIP(a); ip != "" {
				clusterIP = ip
				break
			}
		}
		for _, host := range spec.GetHosts() {
			badHost := checkHost(host)
			switch {
			case host == "" || host == "*":
				report("host %q is not a service host: ignored", host)
				continue
			case badHost != "":
				report("host: %s: ignored", badHost)
				continue
			case src.taken(host):
				report("host %s is a Kubernetes Service's: ignored", host)
				continue
			case owner[host] != "":
				report("host %s is already defined by ServiceEntry %s: ignored", host, owner[host])
				continue
			case strings.HasPrefix(host, "*") && res == DNSLB && len(spec.GetEndpoints()) == 0:
				report("wildcard host %s with DNS resolution needs endpoints: ignored", host)
				continue
			}
			owner[host] = se.key.Namespace + "/" + se.key.Name
			svc := &Service{
				Name:         host,
				Namespace:    se.key.Namespace,
				Hostname:     host,
				ClusterIP:    clusterIP,
				Clusters:     []string{se.key.Cluster},
				Registry:     ServiceEntryRegistry,
				Resolution:   res,
				MeshExternal: spec.GetLocation() == networkingv1.ServiceEntry_MESH_EXTERNAL,
				Addresses:    spec.GetAddresses(),
				ExportTo:     exportTo,
				// Endpoints' identities are added when it is built.
				ServiceAccounts: slices.Clone(spec.GetSubjectAltNames()),
			}
			for _, tmpl := range ports {
				p := *tmpl
				p.Endpoints = entryEndpoints(se, src, host, res, &p, report)
				svc.Ports = append(svc.Ports, &p)
			}
			out[host] = svc
		}
	}
	return out, problems
}

func resolutionOf(r networkingv1.ServiceEntry_Resolution) (Resolution, bool) {
	switch r {
	case networkingv1.ServiceEntry_STATIC:
		return ClientSideLB, true
	case networkingv1.ServiceEntry_DNS:
		return DNSLB, true
	case networkingv1.ServiceEntry_DNS_ROUND_ROBIN:
		return DNSRoundRobinLB, true
	case networkingv1.ServiceEntry_NONE:
		return Passthrough, true
	}
	return 0, false
}

// entryPorts are the entry's ports, sorted, their protocol as the app
// protocol (HTTP, HTTP2, GRPC, TCP, TLS, HTTPS, ...: Istio's names, which
// the generators classify as they do Kubernetes app protocols).
func entryPorts(spec *networkingv1.ServiceEntry, report func(string, ...any)) []*Port {
	var out []*Port
	for _, sp := range spec.GetPorts() {
		n := sp.GetNumber()
		if n == 0 || n > 65535 {
			report("port %q: number %d is not a port: ignored", sp.GetName(), n)
			continue
		}
		if slices.ContainsFunc(out, func(p *Port) bool { return p.Port == int32(n) }) {
			report("port %d is declared twice: the second is ignored", n)
			continue
		}
		proto := strings.ToLower(sp.GetProtocol())
		if proto == "udp" {
			report("port %d: protocol UDP is not supported: ignored", n)
			continue
		}
		p := &Port{Name: sp.GetName(), Port: int32(n), Protocol: corev1.ProtocolTCP, AppProtocol: proto}
		if t := sp.GetTargetPort(); t > 0 && t <= 65535 {
			p.TargetPort = intstr.FromInt32(int32(t))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Port) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// entryEndpoints are the endpoints of one port of one host: the entry's
// endpoints, or the WorkloadEntries and Pods its workloadSelector selects
// in its namespace, or, for DNS resolution without either, the host.
func entryEndpoints(se *storedEntry, src entrySources, host string, res Resolution, p *Port, report func(string, ...any)) []Endpoint {
	spec := se.spec
	var eps []Endpoint
	portFor := func(ports map[string]uint32) int32 {
		if n := ports[p.Name]; n > 0 && n <= 65535 {
			return int32(n)
		}
		if p.TargetPort.IntVal > 0 {
			return p.TargetPort.IntVal
		}
		return p.Port
	}
	add := func(we *networkingv1.WorkloadEntry, cluster string) {
		addr := we.GetAddress()
		switch {
		case addr == "":
			return
		case strings.HasPrefix(addr, "unix://"):
			return // not reachable over the network
		case res == ClientSideLB || res == Passthrough:
			ip := canonicalIP(addr)
			if ip == "" {
				report("endpoint address %q is not an IP (resolution %s): ignored", addr, res)
				return
			}
			addr = ip
		}
		// Istio: the locality field, else the workload's locality label.
		loc := ParseLocality(we.GetLocality())
		if we.GetLocality() == "" {
			loc, _ = labelLocality(we.GetLabels())
		}
		eps = append(eps, Endpoint{
			Address:        addr,
			Port:           portFor(we.GetPorts()),
			Zone:           loc.Zone,
			Region:         loc.Region,
			SubZone:        loc.SubZone,
			ClusterID:      cluster,
			Labels:         we.GetLabels(),
			Weight:         we.GetWeight(),
			Network:        we.GetNetwork(),
			ServiceAccount: we.GetServiceAccount(),
		})
	}
	sel := spec.GetWorkloadSelector().GetLabels()
	switch {
	case len(spec.GetEndpoints()) > 0:
		for _, e := range spec.GetEndpoints() {
			add(e, se.key.Cluster)
		}
	case spec.GetWorkloadSelector() != nil:
		for _, w := range src.workloads {
			if w.key.Namespace == se.key.Namespace && selects(sel, w.spec.GetLabels()) {
				add(w.spec, w.key.Cluster)
			}
		}
		for _, pk := range slices.SortedFunc(maps.Keys(src.pods), comparePodKeys) {
			pd := src.pods[pk]
			if pk.Namespace == se.key.Namespace && pd.ip != "" && selects(sel, pd.labels) {
				loc := workloadLocality(pd, pk.Cluster, "", "", src.nodes)
				eps = append(eps, Endpoint{Address: pd.ip, Port: portFor(nil), ClusterID: pk.Cluster, Labels: pd.labels,
					Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone, NodeName: pd.nodeName, ServiceAccount: pd.sa})
			}
		}
	case res == DNSLB || res == DNSRoundRobinLB:
		eps = append(eps, Endpoint{Address: host, Port: portFor(nil), ClusterID: se.key.Cluster})
	}
	if res == DNSRoundRobinLB && len(eps) > 1 {
		report("resolution DNS_ROUND_ROBIN takes one endpoint: %d ignored", len(eps)-1)
		eps = eps[:1]
	}
	slices.SortFunc(eps, compareEndpoints)
	return slices.CompactFunc(eps, func(a, b Endpoint) bool { return a.Address == b.Address && a.Port == b.Port })
}

func comparePodKeys(a, b podKey) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Cluster, b.Cluster))
}

// splitLocality splits Istio's region/zone/subzone.
func splitLocality(l string) (region, zone, subZone string) {
	parts := strings.SplitN(l, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return parts[0], parts[1], parts[2]
}
