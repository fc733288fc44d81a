package xdsgen

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// protocol is how a sidecar treats a service port.
type protocol int

const (
	// protoUnsupported: not TCP (UDP, SCTP); no xDS is generated.
	protoUnsupported protocol = iota
	// protoHTTP: HTTP/1.1 (http, http-*, kubernetes.io/ws).
	protoHTTP
	// protoHTTP2: HTTP/2 upstream (grpc, grpc-web, http2, kubernetes.io/h2c).
	protoHTTP2
	// protoTCP: opaque TCP, proxied by destination address (tcp, tls,
	// https, mongo, mysql, redis, kubernetes.io/wss; unnamed ports on the
	// well-known ports 25, 53, 3306 and 27017).
	protoTCP
	// protoAuto: the name says nothing; the protocol is sniffed per
	// connection (HTTP inspector): HTTP gets an HTTP connection manager,
	// anything else is proxied as TCP. Istio's "Unsupported".
	protoAuto
)

// isHTTP reports whether the port is declared HTTP (not sniffed).
func (p protocol) isHTTP() bool { return p == protoHTTP || p == protoHTTP2 }

// httpOrSniffed reports whether HTTP may arrive on the port.
func (p protocol) httpOrSniffed() bool { return p.isHTTP() || p == protoAuto }

// isGRPC reports whether Istio reads the port as gRPC or gRPC-Web (its
// protocol.IsGRPC): appProtocol, else the port name, up to the first '-'.
func isGRPC(p *model.Port) bool {
	name := p.Name
	if p.AppProtocol != "" {
		name = p.AppProtocol
	}
	prefix, _, _ := strings.Cut(strings.ToLower(name), "-")
	return prefix == "grpc"
}

// wellKnownTCP are ports Istio treats as TCP when their name says nothing.
var wellKnownTCP = map[int32]bool{25: true, 53: true, 3306: true, 27017: true}

// classify applies Istio's protocol selection: appProtocol if set, else the
// port name, whose prefix up to the first '-' names the protocol
// (case-insensitive). A port naming no known protocol is sniffed, except on
// the well-known TCP ports.
func classify(p *model.Port) protocol {
	if p.Protocol != corev1.ProtocolTCP {
		return protoUnsupported
	}
	name := p.Name
	if p.AppProtocol != "" {
		name = p.AppProtocol
		switch name {
		case "kubernetes.io/h2c":
			return protoHTTP2
		case "kubernetes.io/ws":
			return protoHTTP
		case "kubernetes.io/wss":
			return protoTCP
		}
	}
	name = strings.ToLower(name)
	if strings.HasPrefix(name, "grpc-web") {
		return protoHTTP2
	}
	prefix, _, _ := strings.Cut(name, "-")
	switch prefix {
	case "http":
		return protoHTTP
	case "http2", "grpc":
		return protoHTTP2
	case "tcp", "tls", "https", "mongo", "mysql", "redis":
		return protoTCP
	}
	if wellKnownTCP[p.Port] {
		return protoTCP
	}
	return protoAuto
}
