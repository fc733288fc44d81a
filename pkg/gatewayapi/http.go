package gatewayapi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1 "istio.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// httpRules converts an HTTPRoute's rules: one Istio HTTP route per
// match, so that they can be ordered by the Gateway API's precedence.
func (c *converter) httpRules(r *gwv1.HTTPRoute, mesh bool) rulesResult {
	return splitRules(r.Namespace, r.Name, r.Spec.Rules,
		func(rule gwv1.HTTPRouteRule) (*gwv1.SectionName, []gwv1.HTTPRouteMatch) {
			return rule.Name, rule.Matches
		},
		func(name string, rule gwv1.HTTPRouteRule, m *gwv1.HTTPRouteMatch, refs *problem) (*networkingv1.HTTPRoute, problem) {
			return c.httpRule(r.Namespace, name, rule, m, mesh, refs)
		})
}

// splitRules converts a route's rules with one, one Istio HTTP route per
// match (nil for a rule without matches). Unnamed rules are named
// "<namespace>.<route>.<rule index>". The first fatal problem ends it.
func splitRules[R, M any](ns, route string, rules []R, parts func(R) (*gwv1.SectionName, []M),
	one func(name string, rule R, m *M, refs *problem) (*networkingv1.HTTPRoute, problem),
) rulesResult {
	var res rulesResult
	for n, rule := range rules {
		sn, matches := parts(rule)
		name := ns + "." + route + "." + strconv.Itoa(n)
		if sn != nil {
			name = string(*sn)
		}
		if len(matches) == 0 {
			hr, fatal := one(name, rule, nil, &res.refs)
			if fatal.reason != "" {
				return rulesResult{fatal: fatal, refs: res.refs}
			}
			res.routes = append(res.routes, hr)
			continue
		}
		for i := range matches {
			hr, fatal := one(name, rule, &matches[i], &res.refs)
			if fatal.reason != "" {
				return rulesResult{fatal: fatal, refs: res.refs}
			}
			res.routes = append(res.routes, hr)
		}
	}
	return res
}

func unsupported(format string, args ...any) problem {
	return problem{string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf(format, args...)}
}

// httpRule converts one rule with one match (nil: the rule has none).
// Unresolved references are added to refs.
func (c *converter) httpRule(ns, name string, rule gwv1.HTTPRouteRule, m *gwv1.HTTPRouteMatch, mesh bool, refs *problem) (*networkingv1.HTTPRoute, problem) {
	hr := &networkingv1.HTTPRoute{Name: name}
	if m != nil {
		mr, fatal := httpMatch(*m)
		if fatal.reason != "" {
			return nil, fatal
		}
		hr.Match = []*networkingv1.HTTPMatchRequest{mr}
	}
	for _, f := range rule.Filters {
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier:
			var fatal problem
			if hr.Headers, fatal = withHeaders(hr.Headers, f.ResponseHeaderModifier != nil, or2(f.RequestHeaderModifier, f.ResponseHeaderModifier)); fatal.reason != "" {
				return nil, fatal
			}
		case gwv1.HTTPRouteFilterRequestRedirect:
			hr.Redirect = redirect(f.RequestRedirect)
		case gwv1.HTTPRouteFilterURLRewrite:
			hr.Rewrite = rewrite(f.URLRewrite)
		case gwv1.HTTPRouteFilterRequestMirror:
			mp, fatal := c.mirror(f.RequestMirror, KindHTTPRoute, ns, mesh, refs)
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
	if rt := rule.Retry; rt != nil {
		retryOn := []string{"connect-failure", "refused-stream", "unavailable", "cancelled"}
		for _, code := range rt.Codes {
			retryOn = append(retryOn, strconv.Itoa(int(code)))
		}
		hr.Retries = &networkingv1.HTTPRetry{Attempts: int32(deref(rt.Attempts, 2)), RetryOn: strings.Join(retryOn, ",")}
		if hr.Retries.Attempts == 0 {
			hr.Retries.RetryOn = ""
		}
		if rt.Backoff != nil {
			d, err := parseDuration(*rt.Backoff)
			if err != nil {
				return nil, unsupported("retry backoff %q: %v", *rt.Backoff, err)
			}
			hr.Retries.Backoff = durationpb.New(d)
		}
	}
	if to := rule.Timeouts; to != nil {
		if to.Request != nil {
			d, err := parseDuration(*to.Request)
			if err != nil {
				return nil, unsupported("timeouts.request %q: %v", *to.Request, err)
			}
			if d != 0 {
				hr.Timeout = durationpb.New(d)
			}
		}
		if to.BackendRequest != nil {
			d, err := parseDuration(*to.BackendRequest)
			if err != nil {
				return nil, unsupported("timeouts.backendRequest %q: %v", *to.BackendRequest, err)
			}
			if d != 0 {
				// Per try when retries are set, else the whole request.
				if hr.Retries != nil {
					hr.Retries.PerTryTimeout = durationpb.New(d)
				} else {
					hr.Timeout = durationpb.New(d)
				}
			}
		}
	}
	if hr.Redirect != nil {
		return hr, problem{}
	}
	backends := make([]backend, 0, len(rule.BackendRefs))
	for _, b := range rule.BackendRefs {
		backends = append(backends, backend{ref: b.BackendObjectReference, weight: b.Weight, filters: b.Filters})
	}
	return c.routeTo(hr, backends, KindHTTPRoute, ns, mesh, refs)
}

// routeTo sets hr's destinations; with no backend of weight > 0, or none
// valid, hr answers 500, as the Gateway API wants.
func (c *converter) routeTo(hr *networkingv1.HTTPRoute, backends []backend, routeKind, ns string, mesh bool, refs *problem) (*networkingv1.HTTPRoute, problem) {
	dsts, fatal := c.destinations(backends, routeKind, ns, mesh, refs)
	if fatal.reason != "" {
		return nil, fatal
	}
	if len(dsts) == 0 {
		hr.DirectResponse = &networkingv1.HTTPDirectResponse{Status: 500}
		return hr, problem{}
	}
	hr.Route = dsts
	return hr, problem{}
}

// parseDuration reads a Gateway API duration ("1h2m3s4ms"; Go's syntax
// without fractions, which the CRD validates).
func parseDuration(d gwv1.Duration) (time.Duration, error) {
	return time.ParseDuration(string(d))
}

func httpMatch(m gwv1.HTTPRouteMatch) (*networkingv1.HTTPMatchRequest, problem) {
	mr := &networkingv1.HTTPMatchRequest{}
	// The API server defaults a missing path to PathPrefix "/".
	path := deref(m.Path, gwv1.HTTPPathMatch{})
	value := deref(path.Value, "/")
	switch deref(path.Type, gwv1.PathMatchPathPrefix) {
	case gwv1.PathMatchPathPrefix:
		if value != "/" {
			value = strings.TrimSuffix(value, "/") // "a trailing / is ignored"
		}
		mr.Uri = &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Prefix{Prefix: value}}
	case gwv1.PathMatchExact:
		mr.Uri = &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: value}}
	case gwv1.PathMatchRegularExpression:
		mr.Uri = &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: value}}
	default:
		return nil, unsupported("path match type %q is not supported", *path.Type)
	}
	for _, h := range m.Headers {
		if fatal := addHeaderMatch(mr, string(h.Name), string(deref(h.Type, gwv1.HeaderMatchExact)), h.Value); fatal.reason != "" {
			return nil, fatal
		}
	}
	for _, q := range m.QueryParams {
		sm, ok := stringMatch(string(deref(q.Type, gwv1.QueryParamMatchExact)), q.Value)
		if !ok {
			return nil, unsupported("query param match type %q is not supported", *q.Type)
		}
		if mr.QueryParams == nil {
			mr.QueryParams = make(map[string]*networkingv1.StringMatch)
		}
		if _, dup := mr.QueryParams[string(q.Name)]; !dup {
			mr.QueryParams[string(q.Name)] = sm
		}
	}
	if m.Method != nil {
		mr.Method = &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: string(*m.Method)}}
	}
	return mr, problem{}
}

// addHeaderMatch adds a header match to mr; later duplicates of a name
// are ignored.
func addHeaderMatch(mr *networkingv1.HTTPMatchRequest, name, typ, value string) problem {
	sm, ok := stringMatch(typ, value)
	if !ok {
		return unsupported("header match type %q is not supported", typ)
	}
	if mr.Headers == nil {
		mr.Headers = make(map[string]*networkingv1.StringMatch)
	}
	name = strings.ToLower(name)
	if _, dup := mr.Headers[name]; !dup {
		mr.Headers[name] = sm
	}
	return problem{}
}

// stringMatch converts an Exact or RegularExpression match.
func stringMatch(typ, value string) (*networkingv1.StringMatch, bool) {
	switch typ {
	case "Exact":
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Exact{Exact: value}}, true
	case "RegularExpression":
		return &networkingv1.StringMatch{MatchType: &networkingv1.StringMatch_Regex{Regex: value}}, true
	}
	return nil, false
}

// headerOps converts a header modifier; a value with control characters
// is refused, as Envoy would refuse it.
func headerOps(f *gwv1.HTTPHeaderFilter) (*networkingv1.Headers_HeaderOperations, problem) {
	if f == nil {
		return nil, problem{}
	}
	for _, h := range slices.Concat(f.Set, f.Add) {
		for _, b := range []byte(h.Value) {
			if b != '\t' && (b < 0x20 || b == 0x7f) {
				return nil, unsupported("header %q value contains invalid characters", h.Name)
			}
		}
	}
	return &networkingv1.Headers_HeaderOperations{Set: headerMap(f.Set), Add: headerMap(f.Add), Remove: f.Remove}, problem{}
}

// headerMap keys headers by lower-case name; later duplicates are
// ignored, as the Gateway API says.
func headerMap(hs []gwv1.HTTPHeader) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		k := strings.ToLower(string(h.Name))
		if _, ok := out[k]; !ok {
			out[k] = h.Value
		}
	}
	return out
}

// withHeaders applies a request (or response) header modifier to h,
// which may be nil.
func withHeaders(h *networkingv1.Headers, response bool, f *gwv1.HTTPHeaderFilter) (*networkingv1.Headers, problem) {
	ops, fatal := headerOps(f)
	if fatal.reason != "" || ops == nil {
		return h, fatal
	}
	if h == nil {
		h = &networkingv1.Headers{}
	}
	if response {
		h.Response = ops
	} else {
		h.Request = ops
	}
	return h, problem{}
}

func redirect(f *gwv1.HTTPRequestRedirectFilter) *networkingv1.HTTPRedirect {
	if f == nil {
		return nil
	}
	out := &networkingv1.HTTPRedirect{}
	if f.StatusCode != nil {
		out.RedirectCode = uint32(*f.StatusCode)
	}
	if f.Hostname != nil {
		out.Authority = string(*f.Hostname)
	}
	if f.Scheme != nil {
		out.Scheme = *f.Scheme
	}
	switch {
	case f.Port != nil:
		out.RedirectPort = &networkingv1.HTTPRedirect_Port{Port: uint32(*f.Port)}
	case f.Scheme != nil: // the new scheme's default port
		out.RedirectPort = &networkingv1.HTTPRedirect_DerivePort{DerivePort: networkingv1.HTTPRedirect_FROM_PROTOCOL_DEFAULT}
	default: // "when empty, the port of the request is used"
		out.RedirectPort = &networkingv1.HTTPRedirect_DerivePort{DerivePort: networkingv1.HTTPRedirect_FROM_REQUEST_PORT}
	}
	if p := f.Path; p != nil {
		switch p.Type {
		case gwv1.FullPathHTTPPathModifier:
			out.Uri = deref(p.ReplaceFullPath, "")
		case gwv1.PrefixMatchHTTPPathModifier:
			out.PrefixRewrite = deref(p.ReplacePrefixMatch, "")
		}
	}
	return out
}

func rewrite(f *gwv1.HTTPURLRewriteFilter) *networkingv1.HTTPRewrite {
	if f == nil {
		return nil
	}
	out := &networkingv1.HTTPRewrite{}
	if p := f.Path; p != nil {
		switch p.Type {
		case gwv1.PrefixMatchHTTPPathModifier:
			out.Uri = or(strings.TrimSuffix(deref(p.ReplacePrefixMatch, ""), "/"), "/") // "/" removes the prefix
		case gwv1.FullPathHTTPPathModifier:
			out.UriRegexRewrite = &networkingv1.RegexRewrite{Match: "/.*", Rewrite: deref(p.ReplaceFullPath, "")}
		}
	}
	if f.Hostname != nil {
		out.Authority = string(*f.Hostname)
	}
	if out.Uri == "" && out.UriRegexRewrite == nil && out.Authority == "" {
		return nil
	}
	return out
}
