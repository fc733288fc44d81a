package model

import (
	"fmt"
	"slices"
	"strings"
	"time"

	networkingv1 "istio.io/api/networking/v1"
)

// Gateway is one Istio Gateway as generators read it: the servers a router
// proxy whose workload labels its selector matches binds. Immutable.
type Gateway struct {
	Name, Namespace string
	Created         time.Time
	Source          RouteSource
	// Selector selects the router workloads (any namespace, as Istio by
	// default).
	Selector map[string]string
	// Servers are the valid servers. Read-only.
	Servers []*networkingv1.Server

	object string
}

// Ref is the gateway's name as VirtualServices bind to it: namespace/name.
func (g *Gateway) Ref() string { return g.Namespace + "/" + g.Name }

// Object is what its problems are reported against.
func (g *Gateway) Object() string { return g.object }

// buildGateways validates the Gateways, oldest first.
func buildGateways(in []*GatewayInput, report func(obj, format string, args ...any)) []*Gateway {
	slices.SortFunc(in, byCreation(func(g *GatewayInput) time.Time { return g.Created },
		func(g *GatewayInput) string { return g.Namespace }, func(g *GatewayInput) string { return g.Object }))
	var out []*Gateway
	for _, g := range in {
		gw := &Gateway{Name: g.Name, Namespace: g.Namespace, Created: g.Created, Source: g.Source, Selector: g.Spec.GetSelector(), object: g.Object}
		for i, srv := range g.Spec.GetServers() {
			if why := serverProblem(srv); why != "" {
				report(g.Object, "servers[%d]: %s: server ignored", i, why)
				continue
			}
			gw.Servers = append(gw.Servers, srv)
		}
		if len(gw.Servers) == 0 {
			report(g.Object, "no valid server: gateway ignored")
			continue
		}
		out = append(out, gw)
	}
	return out
}

// serverProblem says why a server cannot be configured, "" when it can.
func serverProblem(s *networkingv1.Server) string {
	p := s.GetPort()
	switch {
	case p.GetNumber() == 0 || p.GetNumber() > 65535:
		return fmt.Sprintf("port %d is not a port number", p.GetNumber())
	case len(s.GetHosts()) == 0:
		return "no hosts"
	}
	for i, h := range s.GetHosts() {
		// namespace/host: the namespace part selects VirtualServices.
		if _, host, ok := strings.Cut(h, "/"); ok {
			h = host
		}
		if why := checkHost(h); why != "" {
			return at(fmt.Sprintf("hosts[%d]", i), why)
		}
	}
	switch ServerProtocol(s) {
	case "HTTPS", "TLS":
		t := s.GetTls()
		switch t.GetMode() {
		case networkingv1.ServerTLSSettings_PASSTHROUGH, networkingv1.ServerTLSSettings_AUTO_PASSTHROUGH:
			if ServerProtocol(s) == "HTTPS" {
				return "HTTPS with tls mode " + t.GetMode().String() + " is not supported (use protocol TLS)"
			}
			if t.GetMode() == networkingv1.ServerTLSSettings_AUTO_PASSTHROUGH {
				return "tls mode AUTO_PASSTHROUGH is not supported"
			}
		case networkingv1.ServerTLSSettings_SIMPLE, networkingv1.ServerTLSSettings_MUTUAL, networkingv1.ServerTLSSettings_OPTIONAL_MUTUAL:
			if t.GetCredentialName() == "" && len(t.GetCredentialNames()) == 0 {
				return "tls needs credentialName (certificates are referenced by name over SDS; file paths are not supported)"
			}
		default:
			return "tls mode " + t.GetMode().String() + " is not supported"
		}
	case "HTTP", "HTTP2", "GRPC", "TCP":
	default:
		return "protocol " + p.GetProtocol() + " is not supported"
	}
	return ""
}

// ServerProtocol is a server's protocol in upper case, "HTTP" when unset.
func ServerProtocol(s *networkingv1.Server) string {
	p := s.GetPort().GetProtocol()
	if p == "" {
		return "HTTP"
	}
	b := []byte(p)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// GatewaysFor returns the Gateways whose selector the workload labels
// match, oldest first. Read-only.
func (m *Mesh) GatewaysFor(labels map[string]string) []*Gateway {
	var out []*Gateway
	for _, g := range m.content.routes.gateways {
		if len(g.Selector) > 0 && selects(g.Selector, labels) {
			out = append(out, g)
		}
	}
	return out
}

// HasGateways reports whether the mesh has any Gateway.
func (m *Mesh) HasGateways() bool { return len(m.content.routes.gateways) > 0 }

// HostMatches reports whether pattern (a host, "*" or "*.suffix") matches
// host.
func HostMatches(pattern, host string) bool { return hostMatches(pattern, host) }
