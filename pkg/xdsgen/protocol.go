package xdsgen

import (
	"strings"

	"github.com/pilotwire/pilotwire/pkg/model"
	corev1 "k8s.io/api/core/v1"
)

// protocol is how a sidecar treats a service port.
type protocol int

const (
	// protoUnsupported: not TCP (UDP, SCTP); no xDS is generated.
	protoUnsupported protocol = iota
	// protoHTTP: HTTP/1.1, and the default for unnamed and unknown ports.
	protoHTTP
	// protoHTTP2: HTTP/2 upstream (gRPC, gRPC-Web, HTTP/2, h2c).
	protoHTTP2
	// protoTCP: opaque TCP, proxied by destination address.
	protoTCP
)

func (p protocol) isHTTP() bool { return p == protoHTTP || p == protoHTTP2 }

// classify applies Istio's protocol selection: appProtocol if set, else the
// port name, whose prefix up to the first '-' names the protocol
// (case-insensitive). Ports that name no known protocol are treated as HTTP.
// TLS-carrying protocols (tls, https, wss) are opaque TCP: an HTTP connection
// manager cannot read them.
func classify(p *model.Port) protocol {
	if p.Protocol != corev1.ProtocolTCP {
		return protoUnsupported
	}
	name := strings.ToLower(p.Name)
	if p.AppProtocol != "" {
		name = strings.ToLower(p.AppProtocol)
		switch name {
		case "kubernetes.io/h2c":
			return protoHTTP2
		case "kubernetes.io/ws":
			return protoHTTP
		case "kubernetes.io/wss":
			return protoTCP
		}
	}
	if strings.HasPrefix(name, "grpc-web") {
		return protoHTTP2
	}
	prefix, _, _ := strings.Cut(name, "-")
	switch prefix {
	case "http":
		return protoHTTP
	case "http2", "grpc", "h2c":
		return protoHTTP2
	case "tcp", "tls", "https", "mongo", "mysql", "redis":
		return protoTCP
	}
	return protoHTTP
}
