package xdsgen

import (
	"regexp"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// AuthorizationPolicy rules as Envoy RBAC policies, after Istio's
// security/authz/model: a rule is one policy whose principals are its
// sources (each an AND of its fields, OR-ed values, NOT-ed notValues) and
// whose permissions are its operations; when conditions join the source
// or the operation they belong to. Peer identities match the mTLS
// principal (authenticated.principal_name, spiffe://...), request
// principals and claims the jwt_authn filter's payload metadata.

// rbacTarget is what the RBAC config is for: it decides which fields can
// be matched.
type rbacTarget uint8

const (
	rbacHTTP rbacTarget = iota // Envoy's HTTP RBAC filter
	rbacTCP                    // Envoy's network RBAC filter: no HTTP fields
	rbacGRPC                   // grpc-go's xDS server: no JWT metadata, no grpc-* or :scheme headers
)

// jwtAuthnFilter is the jwt_authn filter, whose metadata carries the
// verified token's payload under jwtPayloadKey.
const (
	jwtAuthnFilter = "envoy.filters.http.jwt_authn"
	jwtPayloadKey  = "payload"
)

// rulePolicy is the RBAC policy of rule r of a policy with action a, or nil
// when the rule matches nothing on target t (an ALLOW rule with a field
// the target cannot match, a rule the model skipped).
func rulePolicy(r model.AuthzRule, a model.AuthzAction, t rbacTarget) *rbacv3.Policy {
	if len(r.Principals) == 0 || len(r.Permissions) == 0 {
		return nil // skipped by the model
	}
	allow := a == model.AuthzAllow
	var perms []*rbacv3.Permission
	for _, conds := range r.Permissions {
		var and []*rbacv3.Permission
		for _, c := range conds {
			ps, ok := permissionsOf(c, t, allow)
			if !ok {
				return nil
			}
			and = append(and, ps...)
		}
		if len(and) == 0 {
			and = []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}}
		}
		perms = append(perms, &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: and}}})
	}
	var principals []*rbacv3.Principal
	for _, conds := range r.Principals {
		var and []*rbacv3.Principal
		for _, c := range conds {
			ps, ok := principalsOf(c, t, allow)
			if !ok {
				return nil
			}
			and = append(and, ps...)
		}
		if len(and) == 0 {
			and = []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}}
		}
		principals = append(principals, &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: and}}})
	}
	return &rbacv3.Policy{Permissions: perms, Principals: principals}
}

// matchNever is the policy of a policy without rules: it matches nothing.
func matchNever() *rbacv3.Policy {
	return &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_NotRule{NotRule: &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}}}},
		Principals:  []*rbacv3.Principal{{Identifier: &rbacv3.Principal_NotId{NotId: &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}}}},
	}
}

// unmatchable reports whether target t cannot match condition c.
func unmatchable(c model.AuthzCondition, t rbacTarget) bool {
	switch {
	case t == rbacTCP && c.Field.HTTPOnly():
		return true
	case t == rbacGRPC && c.Field.JWT():
		return true // grpc-go never matches metadata: there is no jwt_authn
	case t == rbacGRPC && c.Field == model.FieldRequestHeader:
		return !model.GRPCHeader(c.Key[0])
	}
	return false
}

// skip says whether condition c, which target t may not match or which
// lost values, makes an ALLOW rule match nothing (ok false); for other
// actions it is dropped (Istio widens a DENY rather than narrow it).
func skip(c model.AuthzCondition, t rbacTarget, allow bool) (drop, ok bool) {
	if unmatchable(c, t) {
		return true, !allow
	}
	if c.Dropped && allow {
		return true, false
	}
	return false, true
}

func permissionsOf(c model.AuthzCondition, t rbacTarget, allow bool) ([]*rbacv3.Permission, bool) {
	if drop, ok := skip(c, t, allow); drop || !ok {
		return nil, ok
	}
	one := func(v string) *rbacv3.Permission {
		switch c.Field {
		case model.FieldHosts:
			return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: headerMatcher(":authority", v, true)}}
		case model.FieldMethods:
			return &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: headerMatcher(":method", v, false)}}
		case model.FieldPaths:
			return &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: wildcardMatcher(v, "")}}}}
		case model.FieldPorts:
			return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: parsePort(v)}}
		case model.FieldDestIP:
			return &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationIp{DestinationIp: cidrRange(v)}}
		case model.FieldSNI:
			return &rbacv3.Permission{Rule: &rbacv3.Permission_RequestedServerName{RequestedServerName: wildcardMatcher(v, "")}}
		}
		return nil
	}
	var out []*rbacv3.Permission
	if or := mapValues(c.Values, one); len(or) > 0 {
		out = append(out, permOr(or))
	}
	if or := mapValues(c.NotValues, one); len(or) > 0 {
		out = append(out, &rbacv3.Permission{Rule: &rbacv3.Permission_NotRule{NotRule: permOr(or)}})
	}
	return out, true
}

func permOr(or []*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: or}}}
}

func principalOr(or []*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: or}}}
}

func mapValues[T any](vs []string, f func(string) *T) []*T {
	var out []*T
	for _, v := range vs {
		if x := f(v); x != nil {
			out = append(out, x)
		}
	}
	return out
}

func principalsOf(c model.AuthzCondition, t rbacTarget, allow bool) ([]*rbacv3.Principal, bool) {
	if drop, ok := skip(c, t, allow); drop || !ok {
		return nil, ok
	}
	var out []*rbacv3.Principal
	if c.Field.JWT() {
		// One principal for all values, as Istio's extended generators.
		if p := jwtPrincipal(c, c.Values); p != nil {
			out = append(out, p)
		}
		if p := jwtPrincipal(c, c.NotValues); p != nil {
			out = append(out, &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: p}})
		}
		return out, true
	}
	one := func(v string) *rbacv3.Principal {
		switch c.Field {
		case model.FieldPrincipals:
			return authenticated(wildcardMatcher(v, "spiffe://"))
		case model.FieldNamespaces:
			return authenticated(regexMatcher(".*/ns/" + globRegex(v) + "/.*"))
		case model.FieldServiceAccounts:
			ns, sa, _ := strings.Cut(v, "/") // the model qualified it
			return authenticated(regexMatcher("spiffe://.+/ns/" + regexp.QuoteMeta(ns) + "/(.+/|)sa/" + regexp.QuoteMeta(sa) + "(/.+)?"))
		case model.FieldTrustDomains:
			switch {
			case v == "*":
				return authenticated(prefixMatcher("spiffe://"))
			case !strings.Contains(v, "*"):
				return authenticated(prefixMatcher("spiffe://" + v + "/"))
			default:
				before, after, _ := strings.Cut(v, "*")
				return authenticated(regexMatcher("spiffe://" + regexp.QuoteMeta(before) + "[^/]*" + regexp.QuoteMeta(after) + "/.*"))
			}
		case model.FieldIPBlocks:
			return &rbacv3.Principal{Identifier: &rbacv3.Principal_DirectRemoteIp{DirectRemoteIp: cidrRange(v)}}
		case model.FieldRemoteIPBlocks:
			return &rbacv3.Principal{Identifier: &rbacv3.Principal_RemoteIp{RemoteIp: cidrRange(v)}}
		case model.FieldRequestHeader:
			return &rbacv3.Principal{Identifier: &rbacv3.Principal_Header{Header: headerMatcher(c.Key[0], v, false)}}
		}
		return nil
	}
	if or := mapValues(c.Values, one); len(or) > 0 {
		out = append(out, principalOr(or))
	}
	if or := mapValues(c.NotValues, one); len(or) > 0 {
		out = append(out, &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: principalOr(or)}})
	}
	return out, true
}

// jwtPrincipal matches the JWT payload of the request against values of
// c (nil without values).
func jwtPrincipal(c model.AuthzCondition, values []string) *rbacv3.Principal {
	if len(values) == 0 {
		return nil
	}
	switch c.Field {
	case model.FieldAudiences:
		return metadataPrincipal(claimListMatcher([]string{"aud"}, orValues(values)))
	case model.FieldPresenter:
		return metadataPrincipal(claimListMatcher([]string{"azp"}, orValues(values)))
	case model.FieldClaims:
		return metadataPrincipal(claimListMatcher(c.Key, orValues(values)))
	}
	// Request principals: <iss>/<sub>, split at the last slash.
	var or []*rbacv3.Principal
	anyValue := regexMatcher(".+")
	for _, v := range values {
		i := strings.LastIndexByte(v, '/')
		iss, sub := v, ""
		if i >= 0 {
			iss, sub = v[:i], v[i+1:]
		}
		var mIss, mSub *matcherv3.StringMatcher
		switch {
		case v == "*":
			mIss, mSub = anyValue, anyValue
		case strings.HasPrefix(v, "*") && i >= 0:
			mIss = anyValue
			if iss != "*" {
				mIss = suffixMatcher(strings.TrimPrefix(iss, "*"))
			}
			mSub = exactMatcher(sub)
		case strings.HasPrefix(v, "*"):
			mIss, mSub = anyValue, suffixMatcher(strings.TrimPrefix(v, "*"))
		case strings.HasSuffix(v, "*") && i >= 0:
			mIss = exactMatcher(iss)
			mSub = anyValue
			if sub != "*" {
				mSub = prefixMatcher(strings.TrimSuffix(sub, "*"))
			}
		case strings.HasSuffix(v, "*"):
			mIss, mSub = prefixMatcher(strings.TrimSuffix(v, "*")), anyValue
		default:
			mIss, mSub = exactMatcher(iss), exactMatcher(sub)
		}
		or = append(or, &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: []*rbacv3.Principal{
			metadataPrincipal(claimMatcher("iss", mIss)), metadataPrincipal(claimMatcher("sub", mSub)),
		}}}})
	}
	if len(or) == 1 {
		return or[0]
	}
	return principalOr(or)
}

func metadataPrincipal(m *matcherv3.MetadataMatcher) *rbacv3.Principal {
	//lint:ignore SA1019 Istio's field for the jwt_authn metadata (sourced_metadata is newer and grpc-go refuses it)
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Metadata{Metadata: m}}
}

func payloadPath(keys ...string) []*matcherv3.MetadataMatcher_PathSegment {
	out := []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: jwtPayloadKey}}}
	for _, k := range keys {
		out = append(out, &matcherv3.MetadataMatcher_PathSegment{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	return out
}

// claimMatcher matches a string claim.
func claimMatcher(claim string, m *matcherv3.StringMatcher) *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: jwtAuthnFilter,
		Path:   payloadPath(claim),
		Value:  &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: m}},
	}
}

// claimListMatcher matches a claim that is a list holding a value v
// matches, or is a value v matches.
func claimListMatcher(claims []string, v *matcherv3.ValueMatcher) *matcherv3.MetadataMatcher {
	list := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_ListMatch{ListMatch: &matcherv3.ListMatcher{
		MatchPattern: &matcherv3.ListMatcher_OneOf{OneOf: v},
	}}}
	return &matcherv3.MetadataMatcher{
		Filter: jwtAuthnFilter,
		Path:   payloadPath(claims...),
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{
			ValueMatchers: []*matcherv3.ValueMatcher{list, v},
		}}},
	}
}

// orValues matches any of values (wildcards as [wildcardMatcher]).
func orValues(values []string) *matcherv3.ValueMatcher {
	var ms []*matcherv3.ValueMatcher
	for _, v := range values {
		ms = append(ms, &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: wildcardMatcher(v, "")}})
	}
	if len(ms) == 1 {
		return ms[0]
	}
	return &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_OrMatch{OrMatch: &matcherv3.OrMatcher{ValueMatchers: ms}}}
}

func authenticated(m *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: m}}}
}

// wildcardMatcher matches v with prefix in front: "*" anything (regex .+),
// "*x" a suffix, "x*" a prefix, else exactly.
func wildcardMatcher(v, prefix string) *matcherv3.StringMatcher {
	switch {
	case v == "*":
		return regexMatcher(".+")
	case strings.HasPrefix(v, "*"):
		if prefix == "" {
			return suffixMatcher(v[1:])
		}
		return regexMatcher(regexp.QuoteMeta(prefix) + ".*" + regexp.QuoteMeta(v[1:]))
	case strings.HasSuffix(v, "*"):
		return prefixMatcher(prefix + strings.TrimSuffix(v, "*"))
	}
	return exactMatcher(prefix + v)
}

// headerMatcher matches header name against v: "*" present, "*x" a
// suffix, "x*" a prefix, else exactly; ignoreCase for hosts.
func headerMatcher(name, v string, ignoreCase bool) *routev3.HeaderMatcher {
	if v == "*" {
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	}
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: affixMatcher(v, ignoreCase)}}
}

// affixMatcher matches v as Istio's policies write values: "*x" a
// suffix, "x*" a prefix, anything else exactly.
func affixMatcher(v string, ignoreCase bool) *matcherv3.StringMatcher {
	m := &matcherv3.StringMatcher{IgnoreCase: ignoreCase}
	switch {
	case strings.HasPrefix(v, "*"):
		m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: v[1:]}
	case strings.HasSuffix(v, "*"):
		m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: strings.TrimSuffix(v, "*")}
	default:
		m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: v}
	}
	return m
}

// globRegex is v with each * any characters, the rest literal.
func globRegex(v string) string {
	parts := strings.Split(v, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, ".*")
}

func regexMatcher(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

func prefixMatcher(p string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p}}
}

func suffixMatcher(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: s}}
}

func exactMatcher(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

// cidrRange is an address or CIDR the model checked.
func cidrRange(v string) *corev3.CidrRange {
	p, _ := model.ParseCIDR(v)
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
}

// parsePort is a port the model checked.
func parsePort(v string) uint32 {
	var n uint32
	for _, c := range v {
		n = n*10 + uint32(c-'0')
	}
	return n
}
