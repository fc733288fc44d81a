package ads

import (
	"fmt"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Proxy types, as in Istio's node ids.
const (
	ProxySidecar = "sidecar"
	ProxyRouter  = "router"
	ProxyGRPC    = "grpc"
)

// Generators, from node metadata GENERATOR.
const (
	GeneratorEnvoy = "envoy"
	GeneratorGRPC  = "grpc"
)

// proxy is what the frontend knows about the node behind a connection. It is
// set from the first request and never changes for the connection.
type proxy struct {
	ID        string
	Type      string
	IP        string
	Namespace string
	ClusterID string
	Generator string
	// Version is the proxy's ISTIO_VERSION metadata, "unknown" without.
	Version string
}

// parseNode reads an Istio-style node: id "<type>~<ip>~<pod>.<ns>~<ns>.svc.<domain>"
// and metadata NAMESPACE, CLUSTER_ID and GENERATOR; metadata wins over the id.
func parseNode(n *core.Node) (*proxy, error) {
	if n == nil || n.GetId() == "" {
		return nil, fmt.Errorf("first request must carry a node with an id")
	}
	p := &proxy{ID: n.GetId(), Type: ProxySidecar, Generator: GeneratorEnvoy}
	if parts := strings.Split(n.GetId(), "~"); len(parts) == 4 {
		switch parts[0] {
		case ProxySidecar, ProxyRouter:
			p.Type = parts[0]
		default:
			return nil, fmt.Errorf("node id %q: unknown proxy type %q (want sidecar or router)", n.GetId(), parts[0])
		}
		p.IP = parts[1]
		if _, ns, ok := strings.Cut(parts[2], "."); ok {
			p.Namespace = ns
		}
		if p.Namespace == "" {
			if ns, _, ok := strings.Cut(parts[3], "."); ok {
				p.Namespace = ns
			}
		}
	}
	md := n.GetMetadata().GetFields()
	p.Version = md["ISTIO_VERSION"].GetStringValue()
	if p.Version == "" {
		p.Version = "unknown"
	}
	if v := md["NAMESPACE"].GetStringValue(); v != "" {
		p.Namespace = v
	}
	if v := md["CLUSTER_ID"].GetStringValue(); v != "" {
		p.ClusterID = v
	}
	switch g := md["GENERATOR"].GetStringValue(); g {
	case "":
	case GeneratorGRPC:
		p.Generator = GeneratorGRPC
		p.Type = ProxyGRPC
	default:
		return nil, fmt.Errorf("node %q: unknown GENERATOR %q", n.GetId(), g)
	}
	return p, nil
}
