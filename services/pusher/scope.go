package pusher

import (
	"strings"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// needsPush decides, as Istio's ProxyNeedsPush, whether a request can
// affect a connection.
//
// A full push reaches a connection whose scope (its registry entry's, from
// the frontend's model: the Sidecar egress that applies to it) depends on
// one of the changed configs, or that watches the load assignments of a
// changed service; a full push without keys reaches everyone, and so does
// any full push while the connection's scope is unknown or may be stale
// (older than scopeChange: a change that can alter it was pushed to the
// connection since).
//
// An endpoint-only push reaches connections that watch the load
// assignment of one of the changed services (or all load assignments).
// Pod and Node changes (Istio's proxy updates) change no generated
// resource yet, so they reach no one.
func needsPush(c *connState, r *request) bool {
	ci := c.info
	if !r.full {
		return edsNeedsPush(c.watchedEDS(), r)
	}
	sc := ci.GetScope()
	if len(r.keys) == 0 || sc == nil || sc.GetAll() || sc.GetSeq() < c.scopeChange {
		return true
	}
	for _, k := range r.sortedKeys() {
		if dependsOn(ci, sc, k) {
			return true
		}
	}
	eds := c.watchedEDS()
	for _, k := range r.sortedKeys() {
		if k.GetKind() == "Service" && eds.service(k) {
			return true
		}
	}
	return false
}

// dependsOn reports whether a connection with scope sc can depend on the
// config k (Istio's SidecarScope.DependsOnConfig, by namespace and, for
// Services, by host): kinds the scope does not know reach it always.
func dependsOn(ci *pb.ConnectionInfo, sc *pb.Scope, k *pb.ConfigKey) bool {
	ns := k.GetNamespace()
	local := ns == ci.GetNamespace() || ns == sc.GetRootNamespace()
	switch k.GetKind() {
	case "Pod", "Node":
		return false
	case "Sidecar":
		// Applies to its namespace, or mesh-wide from the root namespace.
		return local
	case "Service":
		if ns == ci.GetNamespace() || backs(sc, ns) {
			return true
		}
		host := ""
		for _, imp := range sc.GetImports() {
			ins, h, ok := strings.Cut(imp, "/")
			if !ok || ins != "*" && ins != ns {
				continue
			}
			if h == "*" {
				return true
			}
			if host == "" {
				host = serviceHost(k)
			}
			if hostMatches(h, host) {
				return true
			}
		}
		return false
	case "ServiceEntry", "WorkloadEntry", "DestinationRule":
		// Their hosts are not in the key: any import from the namespace.
		if local || backs(sc, ns) {
			return true
		}
		for _, imp := range sc.GetImports() {
			if ins, _, ok := strings.Cut(imp, "/"); ok && (ins == "*" || ins == ns) {
				return true
			}
		}
		return false
	default:
		return true
	}
}

// affectsScope reports whether a request may change what a connection
// depends on: a full push without keys, or a Sidecar change in its
// namespace or the root namespace (unknown root: any Sidecar).
func affectsScope(ci *pb.ConnectionInfo, r *request) bool {
	if !r.full {
		return false
	}
	if len(r.keys) == 0 {
		return true
	}
	root := ci.GetScope().GetRootNamespace()
	for _, k := range r.sortedKeys() {
		if k.GetKind() == "Sidecar" && (root == "" || k.GetNamespace() == ci.GetNamespace() || k.GetNamespace() == root) {
			return true
		}
	}
	return false
}

func backs(sc *pb.Scope, ns string) bool {
	for _, b := range sc.GetBackedNamespaces() {
		if b == ns {
			return true
		}
	}
	return false
}

// hostMatches reports whether an egress host pattern ("*", "*.suffix" or a
// host) matches host.
func hostMatches(pattern, host string) bool {
	if pattern == "*" {
		return true
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return pattern == host
}

func serviceHost(k *pb.ConfigKey) string {
	return k.GetName() + "." + k.GetNamespace() + ".svc.cluster.local"
}

// edsNeedsPush is needsPush for an endpoint-only request.
func edsNeedsPush(eds *edsWatches, r *request) bool {
	for _, k := range r.sortedKeys() {
		switch k.GetKind() {
		case "Pod", "Node":
		case "Service":
			if eds.service(k) {
				return true
			}
		default:
			// Unknown endpoint key: cannot scope it.
			if eds.any {
				return true
			}
		}
	}
	return false
}

// edsWatches is what load assignments a connection watches, indexed by
// host: a request is checked against it for every connection, while it
// changes only with the connection's registry entry.
type edsWatches struct {
	any      bool // some EDS watch
	wildcard bool // every load assignment
	// by namespace, then name: the services of watched load assignments
	// (hosts <name>.<namespace>.svc.cluster.local).
	services map[string]map[string]struct{}
}

// watchedEDS returns the index of c.info's load assignment watches,
// building it once per registry entry.
func (c *connState) watchedEDS() *edsWatches {
	if c.eds != nil {
		return c.eds
	}
	if l := c.edsList; l != nil {
		// The connection's only load assignment watch: its index is the
		// list's, shared with every connection that watches the same.
		if l.eds == nil {
			l.eds = &edsWatches{any: true}
			l.eds.add(l.names)
		}
		c.eds = l.eds
		return c.eds
	}
	x := &edsWatches{}
	for _, w := range c.info.GetWatches() {
		if w.GetTypeUrl() != resource.EndpointType {
			continue
		}
		x.any = true
		x.wildcard = x.wildcard || w.GetWildcard()
		x.add(w.GetNames())
	}
	c.eds = x
	return x
}

// add indexes the services of the load assignments names.
func (x *edsWatches) add(names []string) {
	for _, n := range names {
		name, ns, ok := serviceOfHost(clusterHost(n))
		if !ok {
			continue
		}
		if x.services == nil {
			x.services = make(map[string]map[string]struct{})
		}
		if x.services[ns] == nil {
			x.services[ns] = make(map[string]struct{})
		}
		x.services[ns][name] = struct{}{}
	}
}

// service reports whether the load assignments of Service k are watched.
func (x *edsWatches) service(k *pb.ConfigKey) bool {
	if x.wildcard {
		return true
	}
	_, ok := x.services[k.GetNamespace()][k.GetName()]
	return ok
}

// serviceOfHost splits <name>.<namespace>.svc.cluster.local.
func serviceOfHost(host string) (name, ns string, ok bool) {
	rest, ok := strings.CutSuffix(host, ".svc.cluster.local")
	if !ok {
		return "", "", false
	}
	name, ns, ok = strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return "", "", false
	}
	return name, ns, true
}

// clusterHost is the host of an Istio cluster name
// outbound|<port>|<subset>|<host>, or "" for other names. It does not
// allocate: it runs for every watched name of every connection a request
// may reach.
func clusterHost(name string) string {
	rest := name
	for range 3 {
		i := strings.IndexByte(rest, '|')
		if i < 0 {
			return ""
		}
		rest = rest[i+1:]
	}
	return rest
}
