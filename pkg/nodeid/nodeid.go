// Package nodeid reads what pilotwire knows about a proxy from its xDS node
// (an Istio-style node id and metadata), and turns it into what generation
// needs. The ADS frontend and the CLI's render share it, so that render
// generates for a node exactly what a frontend would.
package nodeid

import (
	"fmt"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// Proxy types, as in Istio's node ids.
const (
	Sidecar = "sidecar"
	Router  = "router"
	GRPC    = "grpc"
)

// Generators, from node metadata GENERATOR.
const (
	GeneratorEnvoy = "envoy"
	GeneratorGRPC  = "grpc"
)

// Proxy is what is known about the node behind a connection. It is read
// from the first request and never changes for the connection.
type Proxy struct {
	ID        string
	Type      string
	IP        string
	Namespace string
	ClusterID string
	Generator string
	// Version is the proxy's ISTIO_VERSION metadata, "unknown" without.
	Version string
	// Labels are the workload's labels, node metadata LABELS (nil
	// without): Sidecars and DestinationRules select proxies by them.
	Labels map[string]string
	// Locality is the node's locality (core.Node.locality), empty when
	// the node sets none (generation then takes its workload's).
	Locality model.Locality
}

// Parse reads an Istio-style node: id "<type>~<ip>~<pod>.<ns>~<ns>.svc.<domain>"
// and metadata NAMESPACE, CLUSTER_ID and GENERATOR; metadata wins over the id.
func Parse(n *core.Node) (*Proxy, error) {
	if n == nil || n.GetId() == "" {
		return nil, fmt.Errorf("first request must carry a node with an id")
	}
	p := &Proxy{ID: n.GetId(), Type: Sidecar, Generator: GeneratorEnvoy}
	if parts := strings.Split(n.GetId(), "~"); len(parts) == 4 {
		switch parts[0] {
		case Sidecar, Router:
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
	if l := n.GetLocality(); l != nil {
		p.Locality = model.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	}
	md := n.GetMetadata().GetFields()
	p.Version = md["ISTIO_VERSION"].GetStringValue()
	if p.Version == "" {
		p.Version = "unknown"
	}
	if v := md["NAMESPACE"].GetStringValue(); v != "" {
		p.Namespace = v
	}
	if ls := md["LABELS"].GetStructValue().GetFields(); len(ls) > 0 {
		p.Labels = make(map[string]string, len(ls))
		for k, v := range ls {
			p.Labels[k] = v.GetStringValue()
		}
	}
	if v := md["CLUSTER_ID"].GetStringValue(); v != "" {
		p.ClusterID = v
	}
	switch g := md["GENERATOR"].GetStringValue(); g {
	case "":
	case GeneratorGRPC:
		p.Generator = GeneratorGRPC
		p.Type = GRPC
	default:
		return nil, fmt.Errorf("node %q: unknown GENERATOR %q", n.GetId(), g)
	}
	return p, nil
}

// XDS is what generation reads of p (type, pod IP, namespace, labels,
// locality, cluster), with the mesh config mc (nil: Istio's defaults).
func (p *Proxy) XDS(mc *meshconfig.MeshConfig) xdsgen.Proxy {
	xp := xdsgen.Proxy{Generator: xdsgen.Envoy, IP: p.IP, Namespace: p.Namespace, Mesh: mc, Labels: p.Labels, Locality: p.Locality, ClusterID: p.ClusterID}
	if p.Generator == GeneratorGRPC {
		xp.Generator = xdsgen.GRPC
	}
	if p.Type == Router {
		xp.Type = xdsgen.Router
	}
	return xp
}
