package pusher

import (
	"strings"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// needsPush decides, as Istio's ProxyNeedsPush, whether a request can
// affect a connection. A full push reaches every connection; an
// endpoint-only push reaches connections that watch the load assignment of
// one of the changed services (or all load assignments). Pod and Node
// changes (Istio's proxy updates) change no generated resource yet, so they
// reach no one.
func needsPush(ci *pb.ConnectionInfo, r *request) bool {
	if r.full {
		return true
	}
	endpointKeys := false
	for _, k := range r.keys {
		if k.GetKind() != "Pod" && k.GetKind() != "Node" {
			endpointKeys = true
			break
		}
	}
	if !endpointKeys {
		return false
	}
	for _, w := range ci.GetWatches() {
		if w.GetTypeUrl() != resource.EndpointType {
			continue
		}
		if w.GetWildcard() {
			return true
		}
		for _, k := range r.keys {
			switch k.GetKind() {
			case "Pod", "Node":
				continue
			case "Service":
			default:
				// Unknown endpoint key: cannot scope it.
				return true
			}
			host := k.GetName() + "." + k.GetNamespace() + ".svc.cluster.local"
			for _, n := range w.GetNames() {
				if clusterHost(n) == host {
					return true
				}
			}
		}
	}
	return false
}

// clusterHost is the host of an Istio cluster name
// outbound|<port>|<subset>|<host>, or "" for other names.
func clusterHost(name string) string {
	parts := strings.SplitN(name, "|", 4)
	if len(parts) != 4 {
		return ""
	}
	return parts[3]
}
