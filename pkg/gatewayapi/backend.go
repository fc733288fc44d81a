package gatewayapi

import (
	"fmt"
	"strings"

	networkingv1 "istio.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// backend is a backendRef of either route kind.
type backend struct {
	ref     gwv1.BackendObjectReference
	weight  *int32
	filters []gwv1.HTTPRouteFilter // header modifiers only
}

// destinations converts weighted backendRefs. A backend that does not
// resolve adds to refs: a missing Service or ServiceEntry host keeps its
// destination (its traffic finds no endpoints, as in Istio); one not
// permitted or of an unknown kind is left out. Weights are set only with
// two or more destinations.
func (c *converter) destinations(bs []backend, routeKind, ns string, mesh bool, refs *problem) ([]*networkingv1.HTTPRouteDestination, problem) {
	var out []*networkingv1.HTTPRouteDestination
	for _, b := range bs {
		w := deref(b.weight, 1)
		if w == 0 {
			continue
		}
		dst, fatal := c.destination(b.ref, routeKind, ns, mesh, refs)
		if fatal.reason != "" {
			return nil, fatal
		}
		if dst == nil {
			continue
		}
		rd := &networkingv1.HTTPRouteDestination{Destination: dst, Weight: w}
		for _, f := range b.filters {
			switch f.Type {
			case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier:
				var fatal problem
				if rd.Headers, fatal = withHeaders(rd.Headers, f.ResponseHeaderModifier != nil, or2(f.RequestHeaderModifier, f.ResponseHeaderModifier)); fatal.reason != "" {
					return nil, fatal
				}
			default:
				return nil, unsupported("backendRef filter type %q is not supported", f.Type)
			}
		}
		out = append(out, rd)
	}
	if len(out) == 1 {
		out[0].Weight = 0
	}
	return out, problem{}
}

// destination resolves one backendRef: a Service (host
// <name>.<namespace>.svc.<domain>) or, with group networking.istio.io and
// kind Hostname, a ServiceEntry host. Cross-namespace references need a
// ReferenceGrant; like Istio, only for Gateway parents (mesh false).
// It returns nil when the reference is not permitted or of an unknown
// kind (added to refs), and a fatal problem for a reference the route
// cannot use at all (no port, a hostname as a Service name).
func (c *converter) destination(ref gwv1.BackendObjectReference, routeKind, ns string, mesh bool, refs *problem) (*networkingv1.Destination, problem) {
	group := string(deref(ref.Group, ""))
	kind := string(deref(ref.Kind, KindService))
	toNS := string(deref(ref.Namespace, gwv1.Namespace(ns)))
	if group == "core" {
		group = ""
	}
	if !mesh && toNS != ns && !c.grants.allowed(groupGateway, routeKind, ns, group, kind, toNS, string(ref.Name)) {
		refs.add(string(gwv1.RouteReasonRefNotPermitted), fmt.Sprintf("backendRef %s/%s is not permitted by a ReferenceGrant in namespace %s", toNS, ref.Name, toNS))
		return nil, problem{}
	}
	var host string
	switch {
	case group == "" && kind == KindService:
		if strings.Contains(string(ref.Name), ".") {
			return nil, unsupported("backendRef %q: use the Service's name, not a hostname", ref.Name)
		}
		host = string(ref.Name) + "." + toNS + ".svc." + c.domain
		if !c.services[toNS+"/"+string(ref.Name)] {
			refs.add(string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("backend %s not found", host))
		}
	case group == groupIstio && kind == "Hostname":
		if ref.Namespace != nil {
			return nil, unsupported("backendRef %q: a Hostname has no namespace", ref.Name)
		}
		host = string(ref.Name)
		if !c.hosts[host] {
			refs.add(string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("backend %s not found", host))
		}
	default:
		refs.add(string(gwv1.RouteReasonInvalidKind), fmt.Sprintf("backendRef %s: kind %s of group %q is not supported", ref.Name, kind, group))
		return nil, problem{}
	}
	if ref.Port == nil {
		return nil, unsupported("backendRef %s: port is required", ref.Name)
	}
	return &networkingv1.Destination{Host: host, Port: &networkingv1.PortSelector{Number: uint32(*ref.Port)}}, problem{}
}

// mirror converts a RequestMirror filter; a mirror whose backend does not
// resolve is left out (and added to refs).
func (c *converter) mirror(f *gwv1.HTTPRequestMirrorFilter, routeKind, ns string, mesh bool, refs *problem) (*networkingv1.HTTPMirrorPolicy, problem) {
	if f == nil {
		return nil, problem{}
	}
	var local problem
	dst, fatal := c.destination(f.BackendRef, routeKind, ns, mesh, &local)
	if fatal.reason != "" {
		return nil, fatal
	}
	if local.reason != "" {
		refs.add(local.reason, local.msg)
		return nil, problem{}
	}
	mp := &networkingv1.HTTPMirrorPolicy{Destination: dst}
	switch {
	case f.Fraction != nil:
		mp.Percentage = &networkingv1.Percent{Value: 100 * float64(f.Fraction.Numerator) / float64(deref(f.Fraction.Denominator, 100))}
	case f.Percent != nil:
		mp.Percentage = &networkingv1.Percent{Value: float64(*f.Percent)}
	}
	return mp, problem{}
}
