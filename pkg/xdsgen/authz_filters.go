package xdsgen

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthztcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbactcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// The security filters of a sidecar's inbound chains, in Istio's order
// (networking/core listener_builder.go and networkfilter.go): CUSTOM
// (an RBAC filter whose shadow rules mark the requests the provider must
// check, then ext_authz), the JWT filter (HTTP only), then RBAC for
// AUDIT (action LOG), DENY and ALLOW. Dry-run policies are shadow rules.

const (
	rbacHTTPName     = "envoy.filters.http.rbac"
	rbacTCPName      = "envoy.filters.network.rbac"
	extAuthzHTTPName = "envoy.filters.http.ext_authz"
	extAuthzTCPName  = "envoy.filters.network.ext_authz"
	// extAuthzPrefix starts the names of CUSTOM rules: ext_authz runs when
	// the RBAC filter's shadow engine matched one of its provider.
	extAuthzPrefix = "istio-ext-authz"
	// badCustomSuffix ends the names of CUSTOM rules denied because their
	// provider cannot be used.
	badCustomSuffix = "-deny-due-to-bad-CUSTOM-action"
)

// inboundSecurity are the filters a workload's inbound chains run before
// the router (http) or tcp_proxy (tcp).
type inboundSecurity struct {
	http []*hcmv3.HttpFilter
	tcp  []*listenerv3.Filter
}

// inboundSecurityFor builds the filters of the policies that apply to a
// workload in ns with labels (nil: none).
func inboundSecurityFor(m *model.Mesh, ns string, labels map[string]string) *inboundSecurity {
	az := m.AuthorizationPolicies(ns, labels)
	jwt := m.RequestAuthentications(ns, labels)
	if az.Empty() && len(jwt.Rules) == 0 {
		return nil
	}
	out := &inboundSecurity{}
	customHTTP, customTCP := customFilters(m, az.Custom)
	out.http = append(out.http, customHTTP...)
	out.tcp = append(out.tcp, customTCP...)
	if f := jwtFilter(jwt.Rules); f != nil {
		out.http = append(out.http, f)
	}
	for _, g := range []struct {
		ps     []*model.AuthzPolicy
		action rbacv3.RBAC_Action
	}{{az.Audit, rbacv3.RBAC_LOG}, {az.Deny, rbacv3.RBAC_DENY}, {az.Allow, rbacv3.RBAC_ALLOW}} {
		if len(g.ps) == 0 {
			continue
		}
		rules, shadow := rbacRules(g.ps, g.action, rbacHTTP, "")
		out.http = append(out.http, rbacHTTPFilter(rbacHTTPName, &rbachttpv3.RBAC{Rules: rules, ShadowRules: shadow, ShadowRulesStatPrefix: shadowPrefix(shadow)}))
		rules, shadow = rbacRules(g.ps, g.action, rbacTCP, "")
		out.tcp = append(out.tcp, rbacTCPFilter(&rbactcpv3.RBAC{Rules: rules, StatPrefix: "tcp.", ShadowRules: shadow, ShadowRulesStatPrefix: shadowPrefix(shadow)}))
	}
	return out
}

// httpFilters are s's HTTP filters (nil s: none).
func (s *inboundSecurity) httpFilters() []*hcmv3.HttpFilter {
	if s == nil {
		return nil
	}
	return s.http
}

// network puts s's network filters in front of terminal.
func (s *inboundSecurity) network(terminal *listenerv3.Filter) []*listenerv3.Filter {
	if s == nil {
		return []*listenerv3.Filter{terminal}
	}
	return append(slices.Clip(s.tcp), terminal)
}

// rbacRules are the enforced and the dry-run rules of policies ps (each
// nil when no policy is of that kind), named
// <prefix>ns[<ns>]-policy[<name>]-rule[<i>].
func rbacRules(ps []*model.AuthzPolicy, action rbacv3.RBAC_Action, t rbacTarget, prefix string) (rules, shadow *rbacv3.RBAC) {
	for _, p := range ps {
		set := &rules
		if p.DryRun {
			set = &shadow
		}
		if *set == nil {
			*set = &rbacv3.RBAC{Action: action, Policies: map[string]*rbacv3.Policy{}}
		}
		name := func(i int) string { return fmt.Sprintf("%sns[%s]-policy[%s]-rule[%d]", prefix, p.Namespace, p.Name, i) }
		if p.NoRules {
			(*set).Policies[name(0)] = matchNever()
			continue
		}
		a := p.Action
		if a == model.AuthzCustom {
			a = model.AuthzDeny // CUSTOM rules are built as a DENY's
		}
		for i, r := range p.Rules {
			if pol := rulePolicy(r, a, t); pol != nil {
				(*set).Policies[name(i)] = pol
			}
		}
	}
	return rules, shadow
}

func shadowPrefix(shadow *rbacv3.RBAC) string {
	switch shadow.GetAction() {
	case rbacv3.RBAC_ALLOW:
		return "istio_dry_run_allow_"
	case rbacv3.RBAC_DENY:
		if shadow != nil {
			return "istio_dry_run_deny_"
		}
	}
	return ""
}

func rbacHTTPFilter(name string, c *rbachttpv3.RBAC) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(c)}}
}

func rbacTCPFilter(c *rbactcpv3.RBAC) *listenerv3.Filter {
	return &listenerv3.Filter{Name: rbacTCPName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(c)}}
}

// customFilters are the CUSTOM policies' filters, a pair per provider
// (sorted by name). Istio allows one provider per workload by default:
// with several, or with one it cannot use, the requests the rules match
// are denied.
func customFilters(m *model.Mesh, ps []*model.AuthzPolicy) (http []*hcmv3.HttpFilter, tcp []*listenerv3.Filter) {
	byProvider := map[string][]*model.AuthzPolicy{}
	for _, p := range ps {
		byProvider[p.Provider] = append(byProvider[p.Provider], p)
	}
	names := make([]string, 0, len(byProvider))
	for n := range byProvider {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, provider := range names {
		group := byProvider[provider]
		prefix := extAuthzPrefix + "-" + provider + "-"
		ext, err := m.ExtAuthzProvider(provider)
		if err != nil || len(names) > 1 {
			// Deny what the enforced (not dry-run) rules match.
			for _, t := range []rbacTarget{rbacHTTP, rbacTCP} {
				rules, _ := rbacRules(group, rbacv3.RBAC_DENY, t, prefix)
				if rules == nil {
					continue
				}
				bad := &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{}}
				for k, v := range rules.Policies {
					bad.Policies[k+badCustomSuffix] = v
				}
				if t == rbacHTTP {
					http = append(http, rbacHTTPFilter(rbacHTTPName, &rbachttpv3.RBAC{Rules: bad}))
				} else {
					tcp = append(tcp, rbacTCPFilter(&rbactcpv3.RBAC{Rules: bad, StatPrefix: "tcp."}))
				}
			}
			continue
		}
		// The RBAC filter only marks: the enforced rules are its shadow
		// rules, the dry-run ones its rules (Istio's shape; ext_authz
		// still runs for a dry-run match).
		enforce, dry := rbacRules(group, rbacv3.RBAC_DENY, rbacHTTP, prefix)
		c := &rbachttpv3.RBAC{ShadowRules: enforce, ShadowRulesStatPrefix: "istio_ext_authz_"}
		if dry != nil && len(dry.Policies) > 0 {
			c.Rules = dry
		}
		http = append(http, rbacHTTPFilter(rbacHTTPName, c), extAuthzHTTP(ext, rbacHTTPName, prefix))
		if ext.GRPC == nil {
			continue // an HTTP provider cannot check TCP connections
		}
		enforce, dry = rbacRules(group, rbacv3.RBAC_DENY, rbacTCP, prefix)
		ct := &rbactcpv3.RBAC{ShadowRules: enforce, StatPrefix: "tcp.", ShadowRulesStatPrefix: "istio_ext_authz_"}
		if dry != nil && len(dry.Policies) > 0 {
			ct.Rules = dry
		}
		tcp = append(tcp, rbacTCPFilter(ct), &listenerv3.Filter{Name: extAuthzTCPName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&extauthztcpv3.ExtAuthz{
			StatPrefix:            "tcp.",
			FailureModeAllow:      ext.GRPC.GetFailOpen(),
			TransportApiVersion:   corev3.ApiVersion_V3,
			GrpcService:           extAuthzGRPCService(ext),
			FilterEnabledMetadata: extAuthzEnabled(rbacTCPName, prefix),
		})}})
	}
	return http, tcp
}

// extAuthzEnabled matches the RBAC filter's metadata when its shadow
// engine matched a rule of the provider (names starting with prefix).
func extAuthzEnabled(rbacFilter, prefix string) *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: rbacFilter,
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: "istio_ext_authz_shadow_effective_policy_id"}}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
			MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(prefix, "-")},
		}}},
	}
}

// extAuthzTimeout is Istio's default ext_authz timeout.
var extAuthzTimeout = durationpb.New(600e9)

func extAuthzGRPCService(ext *model.ExtAuthz) *corev3.GrpcService {
	return &corev3.GrpcService{
		TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ext.Cluster, Authority: ext.Hostname}},
		Timeout:         orDuration(ext.GRPC.GetTimeout(), extAuthzTimeout),
	}
}

func orDuration(d, def *durationpb.Duration) *durationpb.Duration {
	if d != nil {
		return d
	}
	return def
}

// extAuthzHTTP is the HTTP ext_authz filter of a provider, as Istio's
// extauthz.go builds it.
func extAuthzHTTP(ext *model.ExtAuthz, rbacFilter, prefix string) *hcmv3.HttpFilter {
	c := &extauthzhttpv3.ExtAuthz{
		TransportApiVersion:   corev3.ApiVersion_V3,
		FilterEnabledMetadata: extAuthzEnabled(rbacFilter, prefix),
	}
	status := ""
	if g := ext.GRPC; g != nil {
		status = g.GetStatusOnError()
		c.FailureModeAllow = g.GetFailOpen()
		c.Services = &extauthzhttpv3.ExtAuthz_GrpcService{GrpcService: extAuthzGRPCService(ext)}
		c.WithRequestBody = bufferSettings(g.GetIncludeRequestBodyInCheck().GetMaxRequestBytes(), g.GetIncludeRequestBodyInCheck().GetAllowPartialMessage(), g.GetIncludeRequestBodyInCheck().GetPackAsBytes(), g.GetIncludeRequestBodyInCheck() != nil)
	} else {
		h := ext.HTTP
		status = h.GetStatusOnError()
		c.FailureModeAllow = h.GetFailOpen()
		svc := &extauthzhttpv3.HttpService{
			PathPrefix: h.GetPathPrefix(),
			ServerUri: &corev3.HttpUri{
				Uri:              "http://" + ext.Hostname,
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: ext.Cluster},
				Timeout:          orDuration(h.GetTimeout(), extAuthzTimeout),
			},
		}
		var add []*corev3.HeaderValue
		for _, k := range sortedKeys(h.GetIncludeAdditionalHeadersInCheck()) {
			add = append(add, &corev3.HeaderValue{Key: k, Value: h.GetIncludeAdditionalHeadersInCheck()[k]})
		}
		if len(add) > 0 {
			svc.AuthorizationRequest = &extauthzhttpv3.AuthorizationRequest{HeadersToAdd: add}
		}
		if len(h.GetHeadersToUpstreamOnAllow())+len(h.GetHeadersToDownstreamOnDeny())+len(h.GetHeadersToDownstreamOnAllow()) > 0 {
			svc.AuthorizationResponse = &extauthzhttpv3.AuthorizationResponse{
				AllowedUpstreamHeaders:        headerList(h.GetHeadersToUpstreamOnAllow()),
				AllowedClientHeaders:          headerList(h.GetHeadersToDownstreamOnDeny()),
				AllowedClientHeadersOnSuccess: headerList(h.GetHeadersToDownstreamOnAllow()),
			}
		}
		c.Services = &extauthzhttpv3.ExtAuthz_HttpService{HttpService: svc}
		include := h.GetIncludeRequestHeadersInCheck()
		if len(include) == 0 {
			//lint:ignore SA1019 the deprecated field still applies when the new one is unset, as in Istio
			include = h.GetIncludeHeadersInCheck()
		}
		c.AllowedHeaders = headerList(include)
		b := h.GetIncludeRequestBodyInCheck()
		c.WithRequestBody = bufferSettings(b.GetMaxRequestBytes(), b.GetAllowPartialMessage(), b.GetPackAsBytes(), b != nil)
	}
	if status != "" {
		var code int
		_, _ = fmt.Sscanf(status, "%d", &code) // the model checked it
		c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(code)}
	}
	return &hcmv3.HttpFilter{Name: extAuthzHTTPName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(c)}}
}

func bufferSettings(max uint32, partial, bytes, set bool) *extauthzhttpv3.BufferSettings {
	if !set {
		return nil
	}
	return &extauthzhttpv3.BufferSettings{MaxRequestBytes: max, AllowPartialMessage: partial, PackAsBytes: bytes}
}

// headerList matches header names case-insensitively: "*x" a suffix, "x*"
// a prefix, else exactly (nil without names).
func headerList(names []string) *matcherv3.ListStringMatcher {
	if len(names) == 0 {
		return nil
	}
	out := &matcherv3.ListStringMatcher{}
	for _, n := range names {
		out.Patterns = append(out.Patterns, affixMatcher(n, true))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// securityKey names the security policies of a workload in ns with
// labels, for the memo keys of the sets they change.
func securityKey(m *model.Mesh, ns string, labels map[string]string) string {
	az := m.AuthorizationPolicies(ns, labels)
	jwt := m.RequestAuthentications(ns, labels)
	if az.Key == "" && jwt.Key == "" {
		return ""
	}
	return az.Key + "|" + jwt.Key
}
