package model

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networkingv1 "istio.io/api/networking/v1"
)

// Values a proxy would reject. Istio's admission webhook refuses objects
// holding them; the model, which may read objects no webhook checked (a
// YAML directory, a cluster without istiod), reports them as problems and
// leaves out the part that holds them, so that one bad field never makes
// a proxy reject a whole type (every cluster, every route) for everyone
// who sees the object. The rules follow Istio's validation where it has
// one and Envoy's (protoc-gen-validate constraints and its header
// formatter) where Istio's lets a value through that Envoy refuses.

// headerName is an RFC 7230 token (optionally a pseudo-header), what
// Envoy and Istio take as a header name.
var headerName = regexp.MustCompile("^:?[-!#$%&'*+.^_`|~0-9A-Za-z]+$")

// maxRegex is the longest regex accepted: Envoy bounds a regex's program
// size, which is always larger than its length (Istio's bound).
const maxRegex = 1024

// checkDuration says why d cannot be a proxy duration: Istio's rule, at
// least 1ms and in whole milliseconds. nil is valid (unset).
func checkDuration(where string, d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	v := d.AsDuration()
	switch {
	case v < time.Millisecond:
		return where + ": duration " + v.String() + " is below 1ms"
	case v%time.Millisecond != 0:
		return where + ": duration " + v.String() + " is not in whole milliseconds"
	}
	return ""
}

func checkHeaderName(where, name string) string {
	if name == "" {
		return where + ": header name is empty"
	}
	if !headerName.MatchString(name) {
		return fmt.Sprintf("%s: %q is not a valid header name", where, name)
	}
	return ""
}

// checkHeaderValue says why v cannot be a header value Envoy writes: no
// control characters but tab, and every '%' escaped as "%%" or opening a
// %VARIABLE% or %VARIABLE(args)% that closes.
func checkHeaderValue(where, v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Sprintf("%s: %q holds a control character", where, v)
		}
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			continue
		}
		if i+1 < len(v) && v[i+1] == '%' {
			i++
			continue
		}
		end := strings.IndexByte(v[i+1:], '%')
		if p := strings.IndexByte(v[i+1:], '('); p >= 0 && (end < 0 || p < end) {
			// %VAR(args)%: the closing "%" follows the closing ")".
			closeArgs := strings.Index(v[i+1+p:], ")%")
			if closeArgs < 0 {
				end = -1
			} else {
				end = p + closeArgs + 1
			}
		}
		if end <= 0 {
			return fmt.Sprintf("%s: %q has an unescaped %% (write %%%% for a literal one)", where, v)
		}
		i += end + 1
	}
	return ""
}

func checkRegex(where, re string) string {
	switch {
	case re == "":
		return where + ": regex is empty"
	case len(re) > maxRegex:
		return fmt.Sprintf("%s: regex is %d bytes, longer than %d", where, len(re), maxRegex)
	}
	if _, err := regexp.Compile(re); err != nil {
		return fmt.Sprintf("%s: %v (RE2 syntax)", where, err)
	}
	return ""
}

func checkStringMatch(where string, m *networkingv1.StringMatch) string {
	switch m.GetMatchType().(type) {
	case *networkingv1.StringMatch_Prefix:
		if m.GetPrefix() == "" {
			return where + ": prefix is empty"
		}
	case *networkingv1.StringMatch_Regex:
		return checkRegex(where+".regex", m.GetRegex())
	}
	return ""
}

// presence reports whether a header or query parameter match only asks
// that it be present: Istio reads regex "*" so.
func presence(m *networkingv1.StringMatch) bool { return m.GetRegex() == "*" }

func checkHTTPStatus(where string, s int64) string {
	if s < 200 || s > 599 {
		return fmt.Sprintf("%s: HTTP status %d is not in 200-599", where, s)
	}
	return ""
}

func checkPercent(where string, p *networkingv1.Percent) string {
	if p != nil && (p.GetValue() < 0 || p.GetValue() > 100) {
		return fmt.Sprintf("%s: %v is not in 0-100", where, p.GetValue())
	}
	return ""
}

// checkHeaderOps covers a route's or destination's header operations, in
// the order of their names (a problem's reason must not change from one
// build to the next).
// Pseudo-headers and Host pass: the generators turn a set :authority or
// host into a host rewrite and leave the others out.
func checkHeaderOps(where string, h *networkingv1.Headers) string {
	for _, dir := range []struct {
		name string
		ops  *networkingv1.Headers_HeaderOperations
	}{{"request", h.GetRequest()}, {"response", h.GetResponse()}} {
		w := where + "." + dir.name
		for _, kv := range []struct {
			op string
			m  map[string]string
		}{{"set", dir.ops.GetSet()}, {"add", dir.ops.GetAdd()}} {
			for _, name := range slices.Sorted(maps.Keys(kv.m)) {
				value := kv.m[name]
				at := w + "." + kv.op
				if why := checkHeaderName(at, name); why != "" {
					return why
				}
				if why := checkHeaderValue(at+"["+name+"]", value); why != "" {
					return why
				}
			}
		}
		for _, name := range dir.ops.GetRemove() {
			at := w + ".remove"
			if why := checkHeaderName(at, name); why != "" {
				return why
			}
		}
	}
	return ""
}

// httpRouteProblem says why the HTTP route h cannot be given to a proxy,
// "" when it can. where names it ("http[3]").
func httpRouteProblem(where string, h *networkingv1.HTTPRoute) string {
	for i, m := range h.GetMatch() {
		at := fmt.Sprintf("%s.match[%d]", where, i)
		for _, sm := range []struct {
			name string
			m    *networkingv1.StringMatch
		}{{"uri", m.GetUri()}, {"scheme", m.GetScheme()}, {"method", m.GetMethod()}, {"authority", m.GetAuthority()}} {
			if why := checkStringMatch(at+"."+sm.name, sm.m); why != "" {
				return why
			}
		}
		for _, hm := range []struct {
			name string
			m    map[string]*networkingv1.StringMatch
		}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}} {
			for _, name := range slices.Sorted(maps.Keys(hm.m)) {
				v := hm.m[name]
				if why := checkHeaderName(at+"."+hm.name, name); why != "" && !strings.HasPrefix(name, "@request.auth.claims") {
					return why
				}
				if why := checkStringMatch(at+"."+hm.name+"["+name+"]", v); why != "" && !presence(v) {
					return why
				}
			}
		}
		for _, name := range slices.Sorted(maps.Keys(m.GetQueryParams())) {
			v := m.GetQueryParams()[name]
			if name == "" {
				return at + ".queryParams: parameter name is empty"
			}
			if why := checkStringMatch(at+".queryParams["+name+"]", v); why != "" && !presence(v) {
				return why
			}
		}
	}
	weights := make([]int32, len(h.GetRoute()))
	for j, d := range h.GetRoute() {
		weights[j] = d.GetWeight()
	}
	if why := checkWeights(where+".route", weights); why != "" {
		return why
	}
	if why := checkHeaderOps(where+".headers", h.GetHeaders()); why != "" {
		return why
	}
	for j, d := range h.GetRoute() {
		if why := checkHeaderOps(fmt.Sprintf("%s.route[%d].headers", where, j), d.GetHeaders()); why != "" {
			return why
		}
	}
	r, rw, rr := h.GetRedirect(), h.GetRewrite(), h.GetRewrite().GetUriRegexRewrite()
	delay, abort := h.GetFault().GetDelay(), h.GetFault().GetAbort()
	var status, abortStatus, regexRewrite string
	if d := h.GetDirectResponse(); d != nil {
		status = checkHTTPStatus(where+".directResponse.status", int64(d.GetStatus()))
	}
	if _, ok := abort.GetErrorType().(*networkingv1.HTTPFaultInjection_Abort_HttpStatus); ok {
		abortStatus = checkHTTPStatus(where+".fault.abort.httpStatus", int64(abort.GetHttpStatus()))
	}
	if rr != nil {
		regexRewrite = cmp.Or(checkRegex(where+".rewrite.uriRegexRewrite.match", rr.GetMatch()),
			checkHeaderValue(where+".rewrite.uriRegexRewrite.rewrite", rr.GetRewrite()))
	}
	if why := cmp.Or(
		checkHeaderValue(where+".redirect.uri", r.GetUri()),
		checkHeaderValue(where+".redirect.authority", r.GetAuthority()),
		checkHeaderValue(where+".rewrite.uri", rw.GetUri()),
		checkHeaderValue(where+".rewrite.authority", rw.GetAuthority()),
		regexRewrite, status, abortStatus,
		checkDuration(where+".fault.delay.fixedDelay", delay.GetFixedDelay()),
		checkPercent(where+".fault.delay.percentage", delay.GetPercentage()),
		checkPercent(where+".fault.abort.percentage", abort.GetPercentage()),
		retryProblem(where+".retries", h.GetRetries()),
	); why != "" {
		return why
	}
	for i, o := range h.GetCorsPolicy().GetAllowOrigins() {
		if why := checkStringMatch(fmt.Sprintf("%s.corsPolicy.allowOrigins[%d]", where, i), o); why != "" {
			return why
		}
	}
	return ""
}

// checkWeights says why destinations with these weights cannot be split
// between (Istio's rule): a weight is negative, or there are several and
// they sum to 0 (a proxy takes no split with nothing to split).
func checkWeights(where string, weights []int32) string {
	var sum int64
	for j, w := range weights {
		if w < 0 {
			return fmt.Sprintf("%s[%d].weight: %d is negative", where, j, w)
		}
		sum += int64(w)
	}
	if len(weights) > 1 && sum == 0 {
		return where + ": the weights of the destinations sum to 0"
	}
	return ""
}

// l4RouteProblem says why a TCP or TLS route's destinations cannot be
// given to a proxy.
func l4RouteProblem(where string, route []*networkingv1.RouteDestination) string {
	weights := make([]int32, len(route))
	for j, d := range route {
		weights[j] = d.GetWeight()
	}
	return checkWeights(where+".route", weights)
}

// retryProblem says why a retry policy cannot be given to a proxy.
func retryProblem(where string, r *networkingv1.HTTPRetry) string {
	return cmp.Or(checkDuration(where+".perTryTimeout", r.GetPerTryTimeout()), checkDuration(where+".backoff", r.GetBackoff()))
}

// checkHost says why host cannot name a service or a gateway's virtual
// host: a DNS name, optionally with a leading "*." wildcard, "*", or an
// IP address.
func checkHost(where, host string) string {
	name := strings.TrimPrefix(host, "*")
	if host == "*" || net.ParseIP(host) != nil {
		return ""
	}
	if host == "" || len(host) > 253 {
		return fmt.Sprintf("%s: %q is not a host name", where, host)
	}
	if name != host && !strings.HasPrefix(name, ".") {
		return fmt.Sprintf("%s: %q: a wildcard must be a whole leading label", where, host)
	}
	for _, label := range strings.Split(strings.TrimPrefix(name, "."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Sprintf("%s: %q is not a host name", where, host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("%s: %q is not a host name", where, host)
			}
		}
	}
	return ""
}

// trafficPolicyProblems checks a traffic policy's settings and returns
// the policy without those that a proxy would reject (nil problems: tp
// itself), with why each was left out. where prefixes the reasons.
func trafficPolicyProblems(where string, tp *networkingv1.TrafficPolicy) (*networkingv1.TrafficPolicy, []string) {
	if tp == nil {
		return nil, nil
	}
	var problems []string
	out := tp
	drop := func(why, part string, clear func(*networkingv1.TrafficPolicy)) {
		if why == "" {
			return
		}
		problems = append(problems, why+": "+part+" ignored")
		if out == tp {
			out = proto.Clone(tp).(*networkingv1.TrafficPolicy)
		}
		clear(out)
	}
	drop(connectionPoolProblem(where+"connectionPool", tp.GetConnectionPool()), where+"connectionPool",
		func(p *networkingv1.TrafficPolicy) { p.ConnectionPool = nil })
	drop(outlierProblem(where+"outlierDetection", tp.GetOutlierDetection()), where+"outlierDetection",
		func(p *networkingv1.TrafficPolicy) { p.OutlierDetection = nil })
	drop(loadBalancerProblem(where+"loadBalancer", tp.GetLoadBalancer()), where+"loadBalancer",
		func(p *networkingv1.TrafficPolicy) { p.LoadBalancer = nil })
	drop(clientTLSProblem(where+"tls", tp.GetTls()), where+"tls",
		func(p *networkingv1.TrafficPolicy) { p.Tls = nil })
	for i, pl := range tp.GetPortLevelSettings() {
		at := fmt.Sprintf("%sportLevelSettings[%d].", where, i)
		for _, c := range []struct {
			why, part string
			clear     func(*networkingv1.TrafficPolicy_PortTrafficPolicy)
		}{
			{connectionPoolProblem(at+"connectionPool", pl.GetConnectionPool()), at + "connectionPool",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.ConnectionPool = nil }},
			{outlierProblem(at+"outlierDetection", pl.GetOutlierDetection()), at + "outlierDetection",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.OutlierDetection = nil }},
			{loadBalancerProblem(at+"loadBalancer", pl.GetLoadBalancer()), at + "loadBalancer",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.LoadBalancer = nil }},
			{clientTLSProblem(at+"tls", pl.GetTls()), at + "tls",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.Tls = nil }},
		} {
			drop(c.why, c.part, func(p *networkingv1.TrafficPolicy) { c.clear(p.PortLevelSettings[i]) })
		}
	}
	return out, problems
}

func connectionPoolProblem(where string, cp *networkingv1.ConnectionPoolSettings) string {
	if t := cp.GetTcp(); t != nil {
		for _, d := range []struct {
			name string
			d    *durationpb.Duration
		}{{"connectTimeout", t.GetConnectTimeout()}, {"maxConnectionDuration", t.GetMaxConnectionDuration()},
			{"tcpKeepalive.time", t.GetTcpKeepalive().GetTime()}, {"tcpKeepalive.interval", t.GetTcpKeepalive().GetInterval()}} {
			if why := checkDuration(where+".tcp."+d.name, d.d); why != "" {
				return why
			}
		}
		// 0s turns the idle timeout off (Istio's rule).
		if d := t.GetIdleTimeout(); d != nil && d.AsDuration() != 0 {
			if why := checkDuration(where+".tcp.idleTimeout", d); why != "" {
				return why
			}
		}
	}
	if h := cp.GetHttp(); h != nil {
		if why := checkDuration(where+".http.idleTimeout", h.GetIdleTimeout()); why != "" {
			return why
		}
	}
	return ""
}

func outlierProblem(where string, od *networkingv1.OutlierDetection) string {
	if od == nil {
		return ""
	}
	if why := checkDuration(where+".interval", od.GetInterval()); why != "" {
		return why
	}
	if why := checkDuration(where+".baseEjectionTime", od.GetBaseEjectionTime()); why != "" {
		return why
	}
	if p := od.GetMaxEjectionPercent(); p < 0 || p > 100 {
		return fmt.Sprintf("%s.maxEjectionPercent: %d is not in 0-100", where, p)
	}
	if p := od.GetMinHealthPercent(); p < 0 || p > 100 {
		return fmt.Sprintf("%s.minHealthPercent: %d is not in 0-100", where, p)
	}
	return ""
}

// maxRingSize is Envoy's bound on a ring hash's size (and gRPC's).
const maxRingSize = 8 << 20

func loadBalancerProblem(where string, lb *networkingv1.LoadBalancerSettings) string {
	ch := lb.GetConsistentHash()
	if ch == nil {
		return ""
	}
	at := where + ".consistentHash"
	switch k := ch.GetHashKey().(type) {
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		if why := checkHeaderName(at+".httpHeaderName", k.HttpHeaderName); why != "" {
			return why
		}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		if k.HttpCookie.GetName() == "" {
			return at + ".httpCookie: name is empty"
		}
		for _, a := range k.HttpCookie.GetAttributes() {
			if a.GetName() == "" {
				return at + ".httpCookie.attributes: a name is empty"
			}
		}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if k.HttpQueryParameterName == "" {
			return at + ".httpQueryParameterName is empty"
		}
	}
	//lint:ignore SA1019 the deprecated field still applies, as in Istio
	if n := max(ch.GetRingHash().GetMinimumRingSize(), ch.GetMinimumRingSize()); n > maxRingSize {
		return fmt.Sprintf("%s: minimumRingSize %d is above %d", at, n, maxRingSize)
	}
	if ml := ch.GetMaglev(); ml != nil && ml.GetTableSize() >= 5000011 {
		return fmt.Sprintf("%s.maglev.tableSize: %d is not below 5000011", at, ml.GetTableSize())
	}
	return ""
}

func clientTLSProblem(where string, t *networkingv1.ClientTLSSettings) string {
	if t.GetMode() == networkingv1.ClientTLSSettings_MUTUAL && t.GetCredentialName() == "" &&
		(t.GetClientCertificate() == "" || t.GetPrivateKey() == "") {
		return where + ": mode MUTUAL needs clientCertificate and privateKey (or credentialName)"
	}
	return ""
}
