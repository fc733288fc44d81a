package gatewayapi

import (
	networkingv1 "istio.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// grpcRules converts a GRPCRoute's rules, one Istio HTTP route per match.
// A method match becomes a path match on /<service>/<method>.
func (c *converter) grpcRules(r *gwv1.GRPCRoute, mesh bool) rulesResult {
	return splitRules(r.Namespace, r.Name, r.Spec.Rules,
		func(rule gwv1.GRPCRouteRule) (*gwv1.SectionName, []gwv1.GRPCRouteMatch) {
			return rule.Name, rule.Matches
		},
		func(name string, rule gwv1.GRPCRouteRule, m *gwv1.GRPCRouteMatch, refs *problem) (*networkingv1.HTTPRoute, problem) {
			return c.grpcRule(r.Namespace, name, rule, m, mesh, refs)
		})
}

func (c *converter) grpcRule(ns, name string, rule gwv1.GRPCRouteRule, m *gwv1.GRPCRouteMatch, mesh bool, refs *problem) (*networkingv1.HTTPRoute, problem) {
	hr := &networkingv1.HTTPRoute{Name: name}
	if m != nil {
		mr := &networkingv1.HTTPMatchRequest{}
		if m.Method != nil {
			uri, fatal := grpcPath(*m.Method)
			if fatal.reason != "" {
				return nil, fatal
			}
			mr.Uri = uri
		}
		for _, h := range m.Headers {
			if fatal := addHeaderMatch(mr, string(h.Name), string(deref(h.Type, gwv1.GRPCHeaderMatchExact)), h.Value); fatal.reason != "" {
				return nil, fatal
			}
		}
		hr.Match = []*networkingv1.HTTPMatchRequest{mr}
	}
	for _, f := range rule.Filters {
		switch f.Type {
		case gwv1.GRPCRouteFilterRequestHeaderModifier, gwv1.GRPCRouteFilterResponseHeaderModifier:
			var fatal problem
			if hr.Headers, fatal = withHeaders(hr.Headers, f.ResponseHeaderModifier != nil, or2(f.RequestHeaderModifier, f.ResponseHeaderModifier)); fatal.reason != "" {
				return nil, fatal
			}
		case gwv1.GRPCRouteFilterRequestMirror:
			mp, fatal := c.mirror(f.RequestMirror, KindGRPCRoute, ns, mesh, refs)
			if fatal.reason != "" {
				return nil, fatal
			}
			if mp != nil {
				hr.Mirrors = append(hr.Mirrors, mp)
			}
		default:
			return nil, unsupported("filter type %q is not supported", f.Type)
		}
	}
	backends := make([]backend, 0, len(rule.BackendRefs))
	for _, b := range rule.BackendRefs {
		var fs []gwv1.HTTPRouteFilter
		for _, f := range b.Filters {
			switch f.Type {
			case gwv1.GRPCRouteFilterRequestHeaderModifier:
				fs = append(fs, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: f.RequestHeaderModifier})
			case gwv1.GRPCRouteFilterResponseHeaderModifier:
				fs = append(fs, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: f.ResponseHeaderModifier})
			default:
				return nil, unsupported("backendRef filter type %q is not supported", f.Type)
			}
		}
		backends = append(backends, backend{ref: b.BackendObjectReference, weight: b.Weight, filters: fs})
	}
	return c.routeTo(hr, backends, KindGRPCRoute, ns, mesh, refs)
}

// grpcPath turns a gRPC method match into a path match: gRPC calls
// /<service>/<method>.
func grpcPath(m gwv1.GRPCMethodMatch) (*networkingv1.StringMatch, problem) {
	svc, method := deref(m.Service, ""), deref(m.Method, "")
	if svc == "" && method == "" {
		return nil, unsupported("a gRPC method match needs a service or a method")
	}
	regex := func(s string) *networkingv1.StringMatch {
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: s}}
	}
	switch deref(m.Type, gwv1.GRPCMethodMatchExact) {
	case gwv1.GRPCMethodMatchExact:
		switch {
		case method == "":
			return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: "/" + svc + "/"}}, problem{}
		case svc == "":
			return regex("/[^/]+/" + method), problem{}
		}
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: "/" + svc + "/" + method}}, problem{}
	case gwv1.GRPCMethodMatchRegularExpression:
		switch {
		case method == "":
			return regex("/" + svc + "/.+"), problem{}
		case svc == "":
			return regex("/[^/]+/" + method), problem{}
		}
		return regex("/" + svc + "/" + method), problem{}
	}
	return nil, unsupported("method match type %q is not supported", *m.Type)
}
