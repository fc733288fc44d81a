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
func needsPush(ci *pb.ConnectionInfo, scopeChange uint64, r *request) bool {
	if !r.full {
		return edsNeedsPush(ci, r)
	}
	sc := ci.GetScope()
	if len(r.keys) == 0 || sc == nil || sc.GetAll() || sc.GetSeq() < scopeChange {
		return true
	}
	for _, k := range r.keys {
		if dependsOn(ci, sc, k) {
			return true
		}
	}
	for _, k := range r.keys {
		if k.GetKind() == "Service" && watchesService(ci, serviceHost(k)) {
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
		host := serviceHost(k)
		for _, imp := range sc.GetImports() {
			if ins, h, ok := strings.Cut(imp, "/"); ok && (ins == "*" || ins == ns) && hostMatches(h, host) {
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
	for _, k := range r.keys {
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
func edsNeedsPush(ci *pb.ConnectionInfo, r *request) bool {
	var hosts []string
	for _, k := range r.keys {
		switch k.GetKind() {
		case "Pod", "Node":
		case "Service":
			hosts = append(hosts, serviceHost(k))
		default:
			// Unknown endpoint key: cannot scope it.
			if watchesEDS(ci) {
				return true
			}
		}
	}
	for _, h := range hosts {
		if watchesService(ci, h) {
			return true
		}
	}
	return false
}

func watchesEDS(ci *pb.ConnectionInfo) bool {
	for _, w := range ci.GetWatches() {
		if w.GetTypeUrl() == resource.EndpointType {
			return true
		}
	}
	return false
}

// watchesService reports whether the connection watches a load assignment
// of the service with hostname host (or every load assignment).
func watchesService(ci *pb.ConnectionInfo, host string) bool {
	for _, w := range ci.GetWatches() {
		if w.GetTypeUrl() != resource.EndpointType {
			continue
		}
		if w.GetWildcard() {
			return true
		}
		for _, n := range w.GetNames() {
			if clusterHost(n) == host {
				return true
			}
		}
	}
	return false
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
