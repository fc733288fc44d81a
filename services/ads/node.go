package ads

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/pilotwire/pilotwire/pkg/nodeid"
)

// Proxy types, as in Istio's node ids.
const (
	ProxySidecar = nodeid.Sidecar
	ProxyRouter  = nodeid.Router
	ProxyGRPC    = nodeid.GRPC
)

// Generators, from node metadata GENERATOR.
const (
	GeneratorEnvoy = nodeid.GeneratorEnvoy
	GeneratorGRPC  = nodeid.GeneratorGRPC
)

// proxy is what the frontend knows about the node behind a connection. It is
// set from the first request and never changes for the connection. The CLI's
// render reads nodes with the same package.
type proxy = nodeid.Proxy

// parseNode reads an Istio-style node (see [nodeid.Parse]).
func parseNode(n *core.Node) (*proxy, error) { return nodeid.Parse(n) }
