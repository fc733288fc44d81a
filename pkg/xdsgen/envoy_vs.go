package xdsgen

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// VirtualService http routes as Envoy routes, after Istio's route
// translation: one route per match (a route without match matches every
// request), in order, stopping after a catch-all; matches naming another
// port, other source labels or namespace, or gateways the proxy is not
// are left out. Destinations are the clusters
// outbound|<port>|<subset>|<host>: the destination's port, else the
// service's only port, else the port the request came in on.

// Names of the HTTP filters per-route config is keyed by.
const (
	faultFilterName = "envoy.filters.http.fault"
	corsFilterName  = "envoy.filters.http.cors"
)

// routeCtx is who the routes are for.
type routeCtx struct {
	port     int32
	gateways []string // "mesh" for sidecars, namespace/name for routers
	ns       string   // the proxy's namespace
	labels   map[string]string
	tls      bool // the listener terminates TLS (redirect scheme)
	grpc     bool // a proxyless gRPC client
	// rules is the DestinationRule view for hash policies.
	rules string
}

// vsRoutes translates the http routes of vs; nil when none applies.
func vsRoutes(m *model.Mesh, vs *model.VirtualService, c routeCtx) []*routev3.Route {
	var out []*routev3.Route
	for _, h := range vs.Spec.GetHttp() {
		if c.grpc && (h.GetRedirect() != nil || h.GetDirectResponse() != nil) {
			continue
		}
		matches := h.GetMatch()
		if len(matches) == 0 {
			matches = []*networkingv1.HTTPMatchRequest{nil}
		}
		for _, mt := range matches {
			if !c.applies(mt) || c.grpc && len(mt.GetQueryParams()) > 0 {
				continue
			}
			r := translateRoute(m, h, mt, c)
			out = append(out, r)
			if mt == nil || isCatchAll(r) {
				return out
			}
		}
	}
	return out
}

// applies reports whether a match may apply to the proxy on the port.
func (c routeCtx) applies(mt *networkingv1.HTTPMatchRequest) bool {
	if mt == nil {
		return true
	}
	if mt.GetPort() != 0 && mt.GetPort() != uint32(c.port) {
		return false
	}
	if len(mt.GetGateways()) > 0 {
		return slices.ContainsFunc(mt.GetGateways(), func(g string) bool { return slices.Contains(c.gateways, g) })
	}
	for k, v := range mt.GetSourceLabels() {
		if got, ok := c.labels[k]; !ok || got != v {
			return false
		}
	}
	return mt.GetSourceNamespace() == "" || mt.GetSourceNamespace() == c.ns
}

func isCatchAll(r *routev3.Route) bool {
	mt := r.GetMatch()
	all := false
	switch {
	case mt.GetPrefix() == "/":
		all = true
	case mt.GetSafeRegex().GetRegex() == ".*":
		all = true
	}
	return all && len(mt.GetHeaders()) == 0 && len(mt.GetQueryParameters()) == 0
}

func translateRoute(m *model.Mesh, h *networkingv1.HTTPRoute, mt *networkingv1.HTTPMatchRequest, c routeCtx) *routev3.Route {
	name := h.GetName()
	if mt.GetName() != "" {
		name += "." + mt.GetName()
	}
	out := &routev3.Route{Name: name, Match: routeMatch(mt, c.grpc)}
	authority := ""
	if !c.grpc && h.GetHeaders() != nil {
		authority = applyHeaders(h.GetHeaders(), &out.RequestHeadersToAdd, &out.RequestHeadersToRemove, &out.ResponseHeadersToAdd, &out.ResponseHeadersToRemove)
	}
	switch {
	case h.GetRedirect() != nil:
		applyRedirect(out, h.GetRedirect(), c)
	case h.GetDirectResponse() != nil:
		applyDirectResponse(out, h.GetDirectResponse())
	default:
		out.Action = &routev3.Route_Route{Route: routeAction(m, h, c, out, authority)}
	}
	if f := faultConfig(h.GetFault()); f != nil {
		out.TypedPerFilterConfig = map[string]*anypb.Any{faultFilterName: mustAny(f)}
	}
	if cp := h.GetCorsPolicy(); cp != nil && !c.grpc {
		if out.TypedPerFilterConfig == nil {
			out.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		out.TypedPerFilterConfig[corsFilterName] = mustAny(corsPolicy(cp))
	}
	return out
}

// routeMatch translates one match; nil matches every request. Header
// matches are for a proxyless gRPC client when grpc is set (headerMatch).
func routeMatch(in *networkingv1.HTTPMatchRequest, grpc bool) *routev3.RouteMatch {
	out := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if in == nil {
		return out
	}
	for _, name := range slices.Sorted(maps.Keys(in.GetHeaders())) {
		out.Headers = append(out.Headers, headerMatch(name, in.GetHeaders()[name], grpc))
	}
	for _, name := range slices.Sorted(maps.Keys(in.GetWithoutHeaders())) {
		sm := in.GetWithoutHeaders()[name]
		hm := headerMatch(name, sm, grpc)
		hm.InvertMatch = true
		if !hm.GetPresentMatch() {
			hm.TreatMissingHeaderAsEmpty = true
		}
		out.Headers = append(out.Headers, hm)
	}
	slices.SortStableFunc(out.Headers, func(a, b *routev3.HeaderMatcher) int { return strings.Compare(a.Name, b.Name) })
	switch u := in.GetUri().GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		out.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networkingv1.StringMatch_Prefix:
		out.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networkingv1.StringMatch_Regex:
		out.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	}
	out.CaseSensitive = wrapperspb.Bool(!in.GetIgnoreUriCase())
	for _, pseudo := range []struct {
		name string
		m    *networkingv1.StringMatch
	}{{":method", in.GetMethod()}, {":authority", in.GetAuthority()}, {":scheme", in.GetScheme()}} {
		if pseudo.m != nil {
			out.Headers = append(out.Headers, headerMatch(pseudo.name, pseudo.m, grpc))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(in.GetQueryParams())) {
		sm := in.GetQueryParams()[name]
		q := &routev3.QueryParameterMatcher{Name: name}
		if presentMatch(sm) {
			q.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		} else {
			q.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: stringMatcher(sm)}
		}
		out.QueryParameters = append(out.QueryParameters, q)
	}
	return out
}

// presentMatch: an empty match, or Istio's regex "*", only asks for the
// header to be there.
func presentMatch(sm *networkingv1.StringMatch) bool {
	return sm.GetMatchType() == nil || sm.GetRegex() == "*"
}

// headerMatch translates the match of header name. Envoy gets it as
// Istio sends it, in string_match. A proxyless gRPC client (grpc) gets it
// in the HeaderMatcher's own fields, deprecated for Envoy: gRPC clients
// older than gRFC A63 (C-core 1.51 under Python, C++ and Ruby) read only
// those and reject the whole route configuration over one string_match,
// and newer ones, grpc-go among them, read both.
func headerMatch(name string, sm *networkingv1.StringMatch, grpc bool) *routev3.HeaderMatcher {
	out := &routev3.HeaderMatcher{Name: name}
	if presentMatch(sm) {
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		return out
	}
	if !grpc {
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: stringMatcher(sm)}
		return out
	}
	switch v := sm.GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_ExactMatch{ExactMatch: v.Exact}
	case *networkingv1.StringMatch_Prefix:
		//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: v.Prefix}
	case *networkingv1.StringMatch_Regex:
		//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
		out.HeaderMatchSpecifier = &routev3.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherv3.RegexMatcher{Regex: v.Regex}}
	}
	return out
}

func stringMatcher(sm *networkingv1.StringMatch) *matcherv3.StringMatcher {
	switch v := sm.GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v.Exact}}
	case *networkingv1.StringMatch_Prefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v.Prefix}}
	case *networkingv1.StringMatch_Regex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v.Regex}}}
	}
	return nil
}

// applyHeaders translates header manipulation (set overwrites, add
// appends; pseudo-headers and Host are not Envoy's to change: an
// :authority or host value becomes a host rewrite, returned).
func applyHeaders(h *networkingv1.Headers, reqAdd *[]*corev3.HeaderValueOption, reqRemove *[]string, respAdd *[]*corev3.HeaderValueOption, respRemove *[]string) string {
	authority := ""
	add := func(dst *[]*corev3.HeaderValueOption, kv map[string]string, appendAction corev3.HeaderValueOption_HeaderAppendAction, isReq bool) {
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			if isReq && model.HostRewriteHeader(k) {
				authority = kv[k]
			}
			if model.ProxyOwnedHeader(k) {
				continue
			}
			*dst = append(*dst, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: kv[k]}, AppendAction: appendAction})
		}
	}
	remove := func(dst *[]string, keys []string) {
		for _, k := range keys {
			if !model.ProxyOwnedHeader(k) {
				*dst = append(*dst, k)
			}
		}
	}
	add(reqAdd, h.GetRequest().GetSet(), corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, true)
	setAuthority := authority
	add(reqAdd, h.GetRequest().GetAdd(), corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, true)
	if setAuthority != "" {
		authority = setAuthority // set wins over add
	}
	add(respAdd, h.GetResponse().GetSet(), corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, false)
	add(respAdd, h.GetResponse().GetAdd(), corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, false)
	remove(reqRemove, h.GetRequest().GetRemove())
	remove(respRemove, h.GetResponse().GetRemove())
	return authority
}

// destinationCluster names the cluster of a destination.
func destinationCluster(m *model.Mesh, d *networkingv1.Destination, listenPort int32) string {
	port := int32(d.GetPort().GetNumber())
	if port == 0 {
		port = listenPort
		if svc := m.Service(d.GetHost()); svc != nil && len(svc.Ports) == 1 {
			port = svc.Ports[0].Port
		}
	}
	return model.OutboundClusterName(port, d.GetSubset(), d.GetHost())
}

func routeAction(m *model.Mesh, h *networkingv1.HTTPRoute, c routeCtx, out *routev3.Route, authority string) *routev3.RouteAction {
	a := &routev3.RouteAction{Timeout: noTimeout}
	if h.GetTimeout() != nil {
		a.Timeout = h.GetTimeout()
	}
	if c.grpc {
		a.Timeout = nil
		if h.GetTimeout() != nil {
			a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: h.GetTimeout()}
		}
	} else {
		honourGRPCTimeout(a)
	}
	if rw := h.GetRewrite(); rw != nil && !c.grpc {
		switch {
		case rw.GetUriRegexRewrite() != nil:
			a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{
				Pattern:      &matcherv3.RegexMatcher{Regex: rw.GetUriRegexRewrite().GetMatch()},
				Substitution: rw.GetUriRegexRewrite().GetRewrite(),
			}
		case rw.GetUri() != "":
			a.PrefixRewrite = rw.GetUri()
		}
		if rw.GetAuthority() != "" {
			authority = rw.GetAuthority()
		}
	}
	if authority != "" {
		a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority}
	}
	if !c.grpc {
		a.RequestMirrorPolicies = mirrorPolicies(m, h, c.port)
	}
	dests := h.GetRoute()
	if len(dests) == 1 {
		d := dests[0]
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: destinationCluster(m, d.GetDestination(), c.port)}
		if d.GetHeaders() != nil && !c.grpc {
			auth := applyHeaders(d.GetHeaders(), &out.RequestHeadersToAdd, &out.RequestHeadersToRemove, &out.ResponseHeadersToAdd, &out.ResponseHeadersToRemove)
			if auth != "" && a.HostRewriteSpecifier == nil {
				a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: auth}
			}
		}
	} else {
		wc := &routev3.WeightedCluster{}
		for _, d := range dests {
			if d.GetWeight() == 0 {
				continue // a zero weight among others takes nothing
			}
			cw := &routev3.WeightedCluster_ClusterWeight{Name: destinationCluster(m, d.GetDestination(), c.port), Weight: wrapperspb.UInt32(uint32(d.GetWeight()))}
			if d.GetHeaders() != nil && !c.grpc {
				if auth := applyHeaders(d.GetHeaders(), &cw.RequestHeadersToAdd, &cw.RequestHeadersToRemove, &cw.ResponseHeadersToAdd, &cw.ResponseHeadersToRemove); auth != "" {
					cw.HostRewriteSpecifier = &routev3.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: auth}
				}
			}
			wc.Clusters = append(wc.Clusters, cw)
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	hashed := false
	for _, d := range dests {
		for _, hp := range destinationHash(m, c, d.GetDestination()) {
			hashed = true
			if !slices.ContainsFunc(a.HashPolicy, func(o *routev3.RouteAction_HashPolicy) bool { return proto.Equal(o, hp) }) {
				a.HashPolicy = append(a.HashPolicy, hp)
			}
		}
	}
	// Istio keeps other hosts out of retries only for a single hashed
	// destination.
	a.RetryPolicy = retryPolicy(m, h.GetRetries(), hashed && len(dests) == 1, c.grpc)
	return a
}

// destinationHash is the hash policy of the DestinationRule the proxy
// applies to the destination (Istio puts consistent hashing on the route).
func destinationHash(m *model.Mesh, c routeCtx, d *networkingv1.Destination) []*routev3.RouteAction_HashPolicy {
	svc := m.Service(d.GetHost())
	if svc == nil {
		return nil
	}
	dr := m.DestinationRule(c.rules, svc)
	if dr == nil {
		return nil
	}
	// As Istio, port-level hashes count only when the destination names
	// its port.
	ch := dr.ConsistentHash(int32(d.GetPort().GetNumber()), d.GetSubset())
	if c.grpc {
		return grpcHashPolicy(ch)
	}
	return hashPolicy(ch)
}

func mirrorPolicies(m *model.Mesh, h *networkingv1.HTTPRoute, port int32) []*routev3.RouteAction_RequestMirrorPolicy {
	var out []*routev3.RouteAction_RequestMirrorPolicy
	add := func(d *networkingv1.Destination, pct *networkingv1.Percent) {
		frac := &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}
		if pct != nil {
			if pct.GetValue() <= 0 {
				return // explicitly nothing
			}
			frac = millionths(pct.GetValue())
		}
		out = append(out, &routev3.RouteAction_RequestMirrorPolicy{
			Cluster:         destinationCluster(m, d, port),
			RuntimeFraction: &corev3.RuntimeFractionalPercent{DefaultValue: frac},
			TraceSampled:    wrapperspb.Bool(false),
		})
	}
	if h.GetMirror() != nil {
		add(h.GetMirror(), h.GetMirrorPercentage())
	}
	for _, mp := range h.GetMirrors() {
		if mp.GetDestination() != nil {
			add(mp.GetDestination(), mp.GetPercentage())
		}
	}
	return out
}

func millionths(pct float64) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: uint32(pct * 10000), Denominator: typev3.FractionalPercent_MILLION}
}

func applyRedirect(out *routev3.Route, r *networkingv1.HTTPRedirect, c routeCtx) {
	ra := &routev3.RedirectAction{HostRedirect: r.GetAuthority()}
	if r.GetUri() != "" {
		ra.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: r.GetUri()}
	}
	if r.GetScheme() != "" {
		ra.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: r.GetScheme()}
	}
	if r.GetRedirectPort() != nil {
		switch {
		case r.GetPort() != 0:
			ra.PortRedirect = r.GetPort()
		case r.GetDerivePort() == networkingv1.HTTPRedirect_FROM_REQUEST_PORT:
			ra.PortRedirect = uint32(c.port) // routes are per port
		}
		scheme := r.GetScheme()
		if scheme == "" {
			scheme = "http"
			if c.tls {
				scheme = "https"
			}
		}
		if scheme == "http" && ra.PortRedirect == 80 || scheme == "https" && ra.PortRedirect == 443 {
			ra.PortRedirect = 0
		}
	}
	switch r.GetRedirectCode() {
	case 0, 301:
		ra.ResponseCode = routev3.RedirectAction_MOVED_PERMANENTLY
	case 302:
		ra.ResponseCode = routev3.RedirectAction_FOUND
	case 303:
		ra.ResponseCode = routev3.RedirectAction_SEE_OTHER
	case 307:
		ra.ResponseCode = routev3.RedirectAction_TEMPORARY_REDIRECT
	case 308:
		ra.ResponseCode = routev3.RedirectAction_PERMANENT_REDIRECT
	default:
		// Istio validation rejects other codes; answer as Envoy would for
		// a route without action.
		out.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 500}}
		return
	}
	out.Action = &routev3.Route_Redirect{Redirect: ra}
}

func applyDirectResponse(out *routev3.Route, d *networkingv1.HTTPDirectResponse) {
	dr := &routev3.DirectResponseAction{Status: d.GetStatus()}
	switch b := d.GetBody().GetSpecifier().(type) {
	case *networkingv1.HTTPBody_String_:
		dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: b.String_}}
	case *networkingv1.HTTPBody_Bytes:
		dr.Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b.Bytes}}
	}
	out.Action = &routev3.Route_DirectResponse{DirectResponse: dr}
}

// grpcCodes are gRPC's status codes by Istio's names.
var grpcCodes = map[string]uint32{
	"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
	"ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
	"ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
	"DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}

// faultConfig translates fault injection (fixed delays; HTTP and gRPC
// aborts), nil when nothing applies.
func faultConfig(in *networkingv1.HTTPFaultInjection) *faultv3.HTTPFault {
	if in == nil {
		return nil
	}
	out := &faultv3.HTTPFault{}
	if d := in.GetDelay(); d != nil && d.GetFixedDelay() != nil {
		out.Delay = &faultcommonv3.FaultDelay{
			FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: d.GetFixedDelay()},
			Percentage:         faultPercent(d.GetPercentage()),
		}
	}
	if a := in.GetAbort(); a != nil {
		abort := &faultv3.FaultAbort{Percentage: faultPercent(a.GetPercentage())}
		switch e := a.GetErrorType().(type) {
		case *networkingv1.HTTPFaultInjection_Abort_HttpStatus:
			abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networkingv1.HTTPFaultInjection_Abort_GrpcStatus:
			if code, ok := grpcCodes[strings.ToUpper(e.GrpcStatus)]; ok {
				abort.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: code}
			}
		}
		if abort.ErrorType != nil {
			out.Abort = abort
		}
	}
	if out.Delay == nil && out.Abort == nil {
		return nil
	}
	return out
}

// faultPercent: unset is every request.
func faultPercent(p *networkingv1.Percent) *typev3.FractionalPercent {
	if p == nil {
		return &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}
	}
	return millionths(p.GetValue())
}

func corsPolicy(in *networkingv1.CorsPolicy) *corsv3.CorsPolicy {
	out := &corsv3.CorsPolicy{
		AllowHeaders:     strings.Join(in.GetAllowHeaders(), ","),
		AllowMethods:     strings.Join(in.GetAllowMethods(), ","),
		ExposeHeaders:    strings.Join(in.GetExposeHeaders(), ","),
		AllowCredentials: in.GetAllowCredentials(),
		FilterEnabled:    &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}},
		// Preflights no origin matches go on to the upstream unless the
		// policy says to ignore them (Envoy's behaviour before 1.30).
		ForwardNotMatchingPreflights: wrapperspb.Bool(in.GetUnmatchedPreflights() != networkingv1.CorsPolicy_IGNORE),
	}
	for _, o := range in.GetAllowOrigins() {
		if sm := stringMatcher(o); sm != nil {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, sm)
		}
	}
	if in.GetMaxAge() != nil {
		out.MaxAge = strconv.FormatInt(in.GetMaxAge().GetSeconds(), 10)
	}
	return out
}

// routeFilters are the HTTP filters outbound routes configure per route
// (typed_per_filter_config), before the router, in Istio's order: fault
// injection, then CORS (so a CORS preflight is fault-injected as under
// Istio). Shared, read-only.
var routeFilters = sync.OnceValue(func() []*hcmv3.HttpFilter {
	return []*hcmv3.HttpFilter{
		faultFilter(),
		{Name: corsFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&corsv3.Cors{})}},
	}
})

var faultFilter = sync.OnceValue(func() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: faultFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&faultv3.HTTPFault{})}}
})

// labelsKey is the canonical form of workload labels when some route
// matches on them, else "".
func labelsKey(m *model.Mesh, labels map[string]string) string {
	if !m.RoutesUseSourceLabels() || len(labels) == 0 {
		return ""
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k + "=" + labels[k] + ",")
	}
	return b.String()
}
