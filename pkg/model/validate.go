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

	"golang.org/x/net/http/httpguts"
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

// isHeaderName reports an RFC 7230 token, optionally after ":" (a
// pseudo-header), as Envoy and Istio take a header name.
func isHeaderName(name string) bool {
	return httpguts.ValidHeaderFieldName(strings.TrimPrefix(name, ":"))
}

// maxRegex is the longest regex accepted: Envoy bounds a regex's program
// size, which is always larger than its length (Istio's bound).
const maxRegex = 1024

// The checks below return "" for a valid value, else why it is not, as a
// reason about the value itself ("duration 0s is below 1ms") or, for a
// value with parts, prefixed by the part's path (".tcp.connectTimeout:
// duration 0s is below 1ms"). Paths are built only for a value that
// fails, with [at]: models are rebuilt on every change of config, and
// nearly every value passes.

// at places why (a check's result) under the path where.
func at(where, why string) string {
	switch {
	case why == "":
		return ""
	case why[0] == '.' || why[0] == '[':
		return where + why
	}
	return where + ": " + why
}

// part is a check's result for the part of a value at path.
type part struct{ path, why string }

// firstField is the first failing part, placed under its path.
func firstField(parts ...part) string {
	for _, f := range parts {
		if f.why != "" {
			return at(f.path, f.why)
		}
	}
	return ""
}

// checkDuration is Istio's rule for a proxy duration: at least 1ms and in
// whole milliseconds. nil is valid (unset).
func checkDuration(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	v := d.AsDuration()
	switch {
	case v < time.Millisecond:
		return "duration " + v.String() + " is below 1ms"
	case v%time.Millisecond != 0:
		return "duration " + v.String() + " is not in whole milliseconds"
	}
	return ""
}

func checkHeaderName(name string) string {
	if name == "" {
		return "header name is empty"
	}
	if !isHeaderName(name) {
		return fmt.Sprintf("%q is not a valid header name", name)
	}
	return ""
}

// checkHeaderValue says why v cannot be a header value Envoy writes: no
// control characters but tab, and every '%' escaped as "%%" or opening a
// %VARIABLE% or %VARIABLE(args)% that closes.
func checkHeaderValue(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Sprintf("%q holds a control character", v)
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
			return fmt.Sprintf("%q has an unescaped %% (write %%%% for a literal one)", v)
		}
		i += end + 1
	}
	return ""
}

func checkRegex(re string) string {
	switch {
	case re == "":
		return "regex is empty"
	case len(re) > maxRegex:
		return fmt.Sprintf("regex is %d bytes, longer than %d", len(re), maxRegex)
	}
	if _, err := regexp.Compile(re); err != nil {
		return fmt.Sprintf("%v (RE2 syntax)", err)
	}
	return ""
}

func checkStringMatch(m *networkingv1.StringMatch) string {
	switch m.GetMatchType().(type) {
	case *networkingv1.StringMatch_Prefix:
		if m.GetPrefix() == "" {
			return "prefix is empty"
		}
	case *networkingv1.StringMatch_Regex:
		return at(".regex", checkRegex(m.GetRegex()))
	}
	return ""
}

// presence reports whether a header or query parameter match only asks
// that it be present: Istio reads regex "*" so.
func presence(m *networkingv1.StringMatch) bool { return m.GetRegex() == "*" }

func checkHTTPStatus(s int64) string {
	if s < 200 || s > 599 {
		return fmt.Sprintf("HTTP status %d is not in 200-599", s)
	}
	return ""
}

func checkPercent(p *networkingv1.Percent) string {
	if p != nil && (p.GetValue() < 0 || p.GetValue() > 100) {
		return fmt.Sprintf("%v is not in 0-100", p.GetValue())
	}
	return ""
}

// checkHeaderOps covers a route's or destination's header operations, in
// the order of their names (a problem's reason must not change from one
// build to the next). Pseudo-headers and Host pass: the generators turn a
// set :authority or host into a host rewrite and leave the others out.
func checkHeaderOps(h *networkingv1.Headers) string {
	for _, l := range headerOpLists(h) {
		why := firstByName(l.values, func(name, value string) string {
			return cmp.Or(checkHeaderName(name), checkHeaderValue(value))
		})
		for _, name := range l.remove {
			if why != "" {
				break
			}
			why = checkHeaderName(name)
		}
		if why != "" {
			return at(l.path, why)
		}
	}
	return ""
}

// headerOpList is one list of a Headers block's operations.
type headerOpList struct {
	path    string            // under the block: ".request.set", ".response.remove", ...
	request bool              // of the request
	values  map[string]string // a set or add list
	remove  []string          // a remove list
}

// headerOpLists are h's operation lists in the order problems are
// reported: the request's before the response's, and set, add, remove
// within each.
func headerOpLists(h *networkingv1.Headers) [6]headerOpList {
	req, resp := h.GetRequest(), h.GetResponse()
	return [6]headerOpList{
		{path: ".request.set", request: true, values: req.GetSet()},
		{path: ".request.add", request: true, values: req.GetAdd()},
		{path: ".request.remove", request: true, remove: req.GetRemove()},
		{path: ".response.set", values: resp.GetSet()},
		{path: ".response.add", values: resp.GetAdd()},
		{path: ".response.remove", remove: resp.GetRemove()},
	}
}

// ProxyOwnedHeader reports a header a proxy does not let config set or
// remove: a pseudo-header or Host.
func ProxyOwnedHeader(name string) bool {
	return strings.HasPrefix(name, ":") || strings.EqualFold(name, "host")
}

// HostRewriteHeader reports a request header whose set or add is a host
// rewrite instead: :authority or Host.
func HostRewriteHeader(name string) bool {
	return strings.EqualFold(name, ":authority") || strings.EqualFold(name, "host")
}

// ignoredHeaderOps are the header operations of a route and its
// destinations that the generators leave out, as reasons under their
// paths: a proxy does not let config set or remove pseudo-headers or
// remove Host (a request's :authority or host set is a host rewrite
// instead). Istio's webhook refuses them.
func ignoredHeaderOps(h *networkingv1.HTTPRoute) []string {
	var out []string
	check := func(where string, hs *networkingv1.Headers) {
		for _, l := range headerOpLists(hs) {
			ignored := func(name string) bool {
				return ProxyOwnedHeader(name) && !(l.request && HostRewriteHeader(name))
			}
			for name := range l.values {
				if !ignored(name) {
					continue
				}
				// One is left out: report them all, sorted by name.
				for _, name := range slices.Sorted(maps.Keys(l.values)) {
					if ignored(name) {
						out = append(out, where+l.path+"["+name+"]: a proxy does not let config set it")
					}
				}
				break
			}
			for _, name := range l.remove {
				if ProxyOwnedHeader(name) {
					out = append(out, where+l.path+"["+name+"]: a proxy does not let config remove it")
				}
			}
		}
	}
	check(".headers", h.GetHeaders())
	for j, d := range h.GetRoute() {
		if d.GetHeaders() != nil {
			check(fmt.Sprintf(".route[%d].headers", j), d.GetHeaders())
		}
	}
	return out
}

// checkMatchMap covers a match's headers, withoutHeaders or queryParams,
// in the order of their names.
func checkMatchMap(m map[string]*networkingv1.StringMatch, header bool) string {
	return firstByName(m, func(name string, v *networkingv1.StringMatch) string {
		var why string
		switch {
		case !header && name == "":
			why = "parameter name is empty"
		case header && !strings.HasPrefix(name, "@request.auth.claims"):
			why = checkHeaderName(name)
		}
		if why == "" && !presence(v) {
			why = checkStringMatch(v)
		}
		return why
	})
}

// firstByName is check's first failure over m in the order of the names,
// under "[name]": the same on every build. Only a map that fails is
// sorted.
func firstByName[V any](m map[string]V, check func(string, V) string) string {
	failed := false
	for name, v := range m {
		if check(name, v) != "" {
			failed = true
			break
		}
	}
	if !failed {
		return ""
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if why := check(name, m[name]); why != "" {
			return at("["+name+"]", why)
		}
	}
	return ""
}

// httpRouteProblem says why the HTTP route h cannot be given to a proxy,
// "" when it can: a reason under h's path ("[2].match[0].uri: prefix is
// empty"; validRoutes puts "http" before it).
func httpRouteProblem(h *networkingv1.HTTPRoute) string {
	for i, m := range h.GetMatch() {
		if why := firstField(
			part{".uri", checkStringMatch(m.GetUri())},
			part{".scheme", checkStringMatch(m.GetScheme())},
			part{".method", checkStringMatch(m.GetMethod())},
			part{".authority", checkStringMatch(m.GetAuthority())},
			part{".headers", checkMatchMap(m.GetHeaders(), true)},
			part{".withoutHeaders", checkMatchMap(m.GetWithoutHeaders(), true)},
			part{".queryParams", checkMatchMap(m.GetQueryParams(), false)},
		); why != "" {
			return at(fmt.Sprintf(".match[%d]", i), why)
		}
	}
	var weightsWhy string
	if len(h.GetRoute()) > 1 {
		weightsWhy = checkWeights(len(h.GetRoute()), func(j int) int32 { return h.GetRoute()[j].GetWeight() })
	} else if len(h.GetRoute()) == 1 && h.GetRoute()[0].GetWeight() < 0 {
		weightsWhy = checkWeights(1, func(int) int32 { return h.GetRoute()[0].GetWeight() })
	}
	if why := firstField(part{".route", weightsWhy}, part{".headers", checkHeaderOps(h.GetHeaders())}); why != "" {
		return why
	}
	for j, d := range h.GetRoute() {
		if why := checkHeaderOps(d.GetHeaders()); why != "" {
			return at(fmt.Sprintf(".route[%d].headers", j), why)
		}
	}
	r, rw, rr := h.GetRedirect(), h.GetRewrite(), h.GetRewrite().GetUriRegexRewrite()
	delay, abort := h.GetFault().GetDelay(), h.GetFault().GetAbort()
	var status, abortStatus, regexMatch string
	if d := h.GetDirectResponse(); d != nil {
		status = checkHTTPStatus(int64(d.GetStatus()))
	}
	if _, ok := abort.GetErrorType().(*networkingv1.HTTPFaultInjection_Abort_HttpStatus); ok {
		abortStatus = checkHTTPStatus(int64(abort.GetHttpStatus()))
	}
	if rr != nil {
		regexMatch = checkRegex(rr.GetMatch())
	}
	if why := firstField(
		part{".redirect.uri", checkHeaderValue(r.GetUri())},
		part{".redirect.authority", checkHeaderValue(r.GetAuthority())},
		part{".rewrite.uri", checkHeaderValue(rw.GetUri())},
		part{".rewrite.authority", checkHeaderValue(rw.GetAuthority())},
		part{".rewrite.uriRegexRewrite.match", regexMatch},
		part{".rewrite.uriRegexRewrite.rewrite", checkHeaderValue(rr.GetRewrite())},
		part{".directResponse.status", status},
		part{".fault.abort.httpStatus", abortStatus},
		part{".fault.delay.fixedDelay", checkDuration(delay.GetFixedDelay())},
		part{".fault.delay.percentage", checkPercent(delay.GetPercentage())},
		part{".fault.abort.percentage", checkPercent(abort.GetPercentage())},
		part{".retries", retryProblem(h.GetRetries())},
	); why != "" {
		return why
	}
	for i, o := range h.GetCorsPolicy().GetAllowOrigins() {
		if why := checkStringMatch(o); why != "" {
			return at(fmt.Sprintf(".corsPolicy.allowOrigins[%d]", i), why)
		}
	}
	return ""
}

// checkWeights says why n destinations with these weights cannot be split
// between (Istio's rule): a weight is negative, or there are several and
// they sum to 0 (a proxy takes no split with nothing to split).
func checkWeights(n int, weight func(int) int32) string {
	var sum int64
	for j := range n {
		w := weight(j)
		if w < 0 {
			return fmt.Sprintf("[%d].weight: %d is negative", j, w)
		}
		sum += int64(w)
	}
	if n > 1 && sum == 0 {
		return "the weights of the destinations sum to 0"
	}
	return ""
}

// l4RouteProblem says why a TCP or TLS route's destinations cannot be
// given to a proxy (a reason under ".route").
func l4RouteProblem(route []*networkingv1.RouteDestination) string {
	if why := checkWeights(len(route), func(j int) int32 { return route[j].GetWeight() }); why != "" {
		return at(".route", why)
	}
	return ""
}

// retryProblem says why a retry policy cannot be given to a proxy.
func retryProblem(r *networkingv1.HTTPRetry) string {
	return firstField(part{".perTryTimeout", checkDuration(r.GetPerTryTimeout())}, part{".backoff", checkDuration(r.GetBackoff())})
}

// checkHost says why host cannot name a service or a gateway's virtual
// host: a DNS name, optionally with a leading "*." wildcard, "*", or an
// IP address.
func checkHost(host string) string {
	name := strings.TrimPrefix(host, "*")
	if host == "*" || net.ParseIP(host) != nil {
		return ""
	}
	if host == "" || len(host) > 253 {
		return fmt.Sprintf("%q is not a host name", host)
	}
	if name != host && !strings.HasPrefix(name, ".") {
		return fmt.Sprintf("%q: a wildcard must be a whole leading label", host)
	}
	for _, label := range strings.Split(strings.TrimPrefix(name, "."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Sprintf("%q is not a host name", host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("%q is not a host name", host)
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
		problems = append(problems, at(part, why)+": "+part+" ignored")
		if out == tp {
			out = proto.Clone(tp).(*networkingv1.TrafficPolicy)
		}
		clear(out)
	}
	// The parts' paths are built only when one fails (drop).
	if why := connectionPoolProblem(tp.GetConnectionPool()); why != "" {
		drop(why, where+"connectionPool", func(p *networkingv1.TrafficPolicy) { p.ConnectionPool = nil })
	}
	if why := outlierProblem(tp.GetOutlierDetection()); why != "" {
		drop(why, where+"outlierDetection", func(p *networkingv1.TrafficPolicy) { p.OutlierDetection = nil })
	}
	if why := loadBalancerProblem(tp.GetLoadBalancer()); why != "" {
		drop(why, where+"loadBalancer", func(p *networkingv1.TrafficPolicy) { p.LoadBalancer = nil })
	}
	if why := clientTLSProblem(tp.GetTls()); why != "" {
		drop(why, where+"tls", func(p *networkingv1.TrafficPolicy) { p.Tls = nil })
	}
	for i, pl := range tp.GetPortLevelSettings() {
		for _, c := range []struct {
			why, part string
			clear     func(*networkingv1.TrafficPolicy_PortTrafficPolicy)
		}{
			{connectionPoolProblem(pl.GetConnectionPool()), "connectionPool",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.ConnectionPool = nil }},
			{outlierProblem(pl.GetOutlierDetection()), "outlierDetection",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.OutlierDetection = nil }},
			{loadBalancerProblem(pl.GetLoadBalancer()), "loadBalancer",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.LoadBalancer = nil }},
			{clientTLSProblem(pl.GetTls()), "tls",
				func(p *networkingv1.TrafficPolicy_PortTrafficPolicy) { p.Tls = nil }},
		} {
			if c.why != "" {
				drop(c.why, fmt.Sprintf("%sportLevelSettings[%d].%s", where, i, c.part),
					func(p *networkingv1.TrafficPolicy) { c.clear(p.PortLevelSettings[i]) })
			}
		}
	}
	return out, problems
}

func connectionPoolProblem(cp *networkingv1.ConnectionPoolSettings) string {
	t, h := cp.GetTcp(), cp.GetHttp()
	var idle string
	// 0s turns the TCP idle timeout off (Istio's rule).
	if d := t.GetIdleTimeout(); d != nil && d.AsDuration() != 0 {
		idle = checkDuration(d)
	}
	return firstField(
		part{".tcp.connectTimeout", checkDuration(t.GetConnectTimeout())},
		part{".tcp.maxConnectionDuration", checkDuration(t.GetMaxConnectionDuration())},
		part{".tcp.tcpKeepalive.time", checkDuration(t.GetTcpKeepalive().GetTime())},
		part{".tcp.tcpKeepalive.interval", checkDuration(t.GetTcpKeepalive().GetInterval())},
		part{".tcp.idleTimeout", idle},
		part{".http.idleTimeout", checkDuration(h.GetIdleTimeout())},
	)
}

func outlierProblem(od *networkingv1.OutlierDetection) string {
	if od == nil {
		return ""
	}
	var maxEject, minHealth string
	if p := od.GetMaxEjectionPercent(); p < 0 || p > 100 {
		maxEject = fmt.Sprintf("%d is not in 0-100", p)
	}
	if p := od.GetMinHealthPercent(); p < 0 || p > 100 {
		minHealth = fmt.Sprintf("%d is not in 0-100", p)
	}
	return firstField(
		part{".interval", checkDuration(od.GetInterval())},
		part{".baseEjectionTime", checkDuration(od.GetBaseEjectionTime())},
		part{".maxEjectionPercent", maxEject},
		part{".minHealthPercent", minHealth},
	)
}

// maxRingSize is Envoy's bound on a ring hash's size (and gRPC's).
const maxRingSize = 8 << 20

func loadBalancerProblem(lb *networkingv1.LoadBalancerSettings) string {
	ch := lb.GetConsistentHash()
	if ch == nil {
		return ""
	}
	switch k := ch.GetHashKey().(type) {
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		if why := checkHeaderName(k.HttpHeaderName); why != "" {
			return at(".consistentHash.httpHeaderName", why)
		}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		if k.HttpCookie.GetName() == "" {
			return ".consistentHash.httpCookie: name is empty"
		}
		for _, a := range k.HttpCookie.GetAttributes() {
			if a.GetName() == "" {
				return ".consistentHash.httpCookie.attributes: a name is empty"
			}
		}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if k.HttpQueryParameterName == "" {
			return ".consistentHash.httpQueryParameterName is empty"
		}
	}
	//lint:ignore SA1019 the deprecated field still applies, as in Istio
	if n := max(ch.GetRingHash().GetMinimumRingSize(), ch.GetMinimumRingSize()); n > maxRingSize {
		return fmt.Sprintf(".consistentHash: minimumRingSize %d is above %d", n, maxRingSize)
	}
	if ml := ch.GetMaglev(); ml != nil && ml.GetTableSize() >= 5000011 {
		return fmt.Sprintf(".consistentHash.maglev.tableSize: %d is not below 5000011", ml.GetTableSize())
	}
	return ""
}

func clientTLSProblem(t *networkingv1.ClientTLSSettings) string {
	if t.GetMode() == networkingv1.ClientTLSSettings_MUTUAL && t.GetCredentialName() == "" &&
		(t.GetClientCertificate() == "" || t.GetPrivateKey() == "") {
		return "mode MUTUAL needs clientCertificate and privateKey (or credentialName)"
	}
	return ""
}
