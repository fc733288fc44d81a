package model

import (
	"fmt"
	"strconv"
	"strings"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// ExtAuthz is an ext_authz extension provider of the mesh config
// (extensionProviders, envoyExtAuthzHttp or envoyExtAuthzGrpc) that
// CUSTOM AuthorizationPolicies name, resolved against the mesh's
// services as Istio's LookupCluster resolves it.
type ExtAuthz struct {
	Name string
	// HTTP or GRPC is set. Read-only.
	HTTP *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider
	GRPC *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider
	// Hostname is the service's hostname, Cluster its outbound cluster
	// on the provider's port.
	Hostname, Cluster string
}

// ExtAuthzProvider returns the ext_authz provider named name, or why
// CUSTOM policies naming it cannot use it (Istio then denies what their
// rules match).
func (m *Mesh) ExtAuthzProvider(name string) (*ExtAuthz, error) {
	return m.content.authzIdx().provider(name, m.Service)
}

// provider resolves name; service nil checks the mesh config alone.
func (x *authzIndex) provider(name string, service func(string) *Service) (*ExtAuthz, error) {
	if name == "" {
		return nil, fmt.Errorf("action CUSTOM needs a provider")
	}
	var found *meshv1alpha1.MeshConfig_ExtensionProvider
	for _, p := range x.providers {
		if p.GetName() != name {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("extension provider %q is defined twice in the mesh config", name)
		}
		found = p
	}
	if found == nil {
		return nil, fmt.Errorf("extension provider %q is not in the mesh config's extensionProviders", name)
	}
	out := &ExtAuthz{Name: name}
	var svcName string
	var port uint32
	switch p := found.GetProvider().(type) {
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp:
		out.HTTP = p.EnvoyExtAuthzHttp
		svcName, port = out.HTTP.GetService(), out.HTTP.GetPort()
		if pp := out.HTTP.GetPathPrefix(); pp != "" && !strings.HasPrefix(pp, "/") {
			return nil, fmt.Errorf("extension provider %q: pathPrefix %q does not begin with /", name, pp)
		}
		if err := statusOnError(out.HTTP.GetStatusOnError()); err != nil {
			return nil, fmt.Errorf("extension provider %q: %w", name, err)
		}
	case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc:
		out.GRPC = p.EnvoyExtAuthzGrpc
		svcName, port = out.GRPC.GetService(), out.GRPC.GetPort()
		if err := statusOnError(out.GRPC.GetStatusOnError()); err != nil {
			return nil, fmt.Errorf("extension provider %q: %w", name, err)
		}
	default:
		return nil, fmt.Errorf("extension provider %q is not an ext_authz provider (envoyExtAuthzHttp or envoyExtAuthzGrpc)", name)
	}
	if port == 0 || port > 65535 {
		return nil, fmt.Errorf("extension provider %q: port %d is not in 1..65535", name, port)
	}
	if service == nil {
		return out, nil
	}
	host := svcName
	ns, h, hasNS := strings.Cut(svcName, "/")
	if hasNS {
		host = h
	}
	svc := service(host)
	if svc == nil || hasNS && svc.Namespace != ns {
		return nil, fmt.Errorf("extension provider %q: service %q is not in the mesh", name, svcName)
	}
	out.Hostname = svc.Hostname
	out.Cluster = OutboundClusterName(int32(port), "", svc.Hostname)
	return out, nil
}

// statusOnError checks an ext_authz statusOnError: an HTTP status code.
func statusOnError(s string) error {
	if s == "" {
		return nil
	}
	code, err := strconv.Atoi(s)
	if err != nil || code < 100 || code > 599 {
		return fmt.Errorf("statusOnError %q is not an HTTP status", s)
	}
	return nil
}

// authzServiceProblems are the problems of the policies that depend on
// the services: CUSTOM policies whose provider's service is not in the
// mesh, and JWT
// rules whose jwksUri host is not a mesh service.
func (x *authzIndex) authzServiceProblems(byHost map[string]*Service) []Problem {
	var out []Problem
	service := func(h string) *Service { return byHost[h] }
	for _, p := range x.custom {
		if _, err := x.provider(p.authz.Provider, nil); err != nil {
			continue // reported with the policy
		}
		if _, err := x.provider(p.authz.Provider, service); err != nil {
			out = append(out, Problem{Object: p.object,
				Reason: err.Error() + ": the requests its rules match are denied, as Istio does"})
		}
	}
	for _, j := range x.jwks {
		host, _, cluster, err := JWKSCluster(j.uri)
		if err != nil {
			out = append(out, Problem{Object: j.object, Reason: "jwtRule of issuer " + j.issuer + ": " + err.Error() + ": its tokens are refused"})
			continue
		}
		if byHost[host] == nil {
			out = append(out, Problem{Object: j.object, Reason: "jwtRule of issuer " + j.issuer + ": jwksUri host " + host +
				" is not a mesh service, so Envoy has no cluster " + cluster + " to fetch its keys from and refuses its tokens (add a ServiceEntry for it, as Istio needs)"})
		}
	}
	return out
}
