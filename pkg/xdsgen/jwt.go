package xdsgen

import (
	"slices"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	securityv1 "istio.io/api/security/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// RequestAuthentication as Envoy's jwt_authn filter, after Istio's
// security/authn policy_applier.go: a provider origins-<i> per JWT rule
// (sorted by issuer), the verified payload in the filter's metadata under
// "payload" (what requestPrincipals and claims match), and one
// requirement for every path: each token present must be valid for its
// issuer, a request without one passes (AuthorizationPolicies decide).
// Keys come inline (jwks) or from jwksUri, fetched by Envoy itself
// (remote_jwks) through Istio's cluster for the URI's host,
// outbound|<port>||<host>: pilotwire never fetches keys. A rule with
// neither, or with a jwksUri that is not a URL, gets a key set no token
// verifies against (Istio's fake JWKS), so its tokens are refused.

// unusableJWKS is a JWKS with one RSA public key whose private key was
// never kept: no token verifies against it.
const unusableJWKS = `{"keys":[{"kty":"RSA","alg":"RS256","kid":"pilotwire-unusable","e":"AQAB","n":"t3lirKhZwJAIwfhNA-_PcPfyhKXXNnb0SPckwS0H3TcgrJ5Cv9d0U0k6OryoUbaUSbk732of9m7BCRrOhdch6zzelPkzEg8itxOChM2CO5xnQ5UE5TaJB2CRZMH4tlapYLVGW2_sqzkMCYZijWZSD9MafnxJ-gawY2p9CNRr0LVdcYRzh3cS831GZGWPpNGOYTbv2RKF11yOxDlzsX7Pj-fPtD-8K5AX-5Jz21PRzXwctR7b_HMEmwpQZEWWtpQApHh8PXpf7zbukWOMv_dn5vIUrgVBItLG-eF9Vr9t5DV4Uygg4Erf1ddtv9gQDasCYH-_RbgVuDZhFZGRgSOIrQ"}]}`

// jwksFetchTimeout and jwksCacheDuration are Istio's.
var (
	jwksFetchTimeout  = durationpb.New(5e9)
	jwksCacheDuration = durationpb.New(300e9)
)

// jwtFilter is the jwt_authn filter of rules (nil without rules).
func jwtFilter(rules []*securityv1.JWTRule) *hcmv3.HttpFilter {
	if len(rules) == 0 {
		return nil
	}
	providers := make(map[string]*jwtv3.JwtProvider, len(rules))
	var each, anyOf []*jwtv3.JwtRequirement
	for i, r := range rules {
		name := "origins-" + strconv.Itoa(i)
		providers[name] = jwtProvider(r)
		byName := &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_ProviderName{ProviderName: name}}
		each = append(each, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{
			Requirements: []*jwtv3.JwtRequirement{byName, {RequiresType: &jwtv3.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}}},
		}}})
		anyOf = append(anyOf, byName)
	}
	req := each[0]
	if len(each) > 1 {
		// A valid token of any provider, or each provider's token valid
		// or missing (providers sharing a location would fail the AND).
		req = &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAny{RequiresAny: &jwtv3.JwtRequirementOrList{
			Requirements: append(anyOf, &jwtv3.JwtRequirement{RequiresType: &jwtv3.JwtRequirement_RequiresAll{RequiresAll: &jwtv3.JwtRequirementAndList{Requirements: each}}}),
		}}}
	}
	c := &jwtv3.JwtAuthentication{
		Providers: providers,
		Rules: []*jwtv3.RequirementRule{{
			Match:           &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtv3.RequirementRule_Requires{Requires: req},
		}},
		BypassCorsPreflight: true,
	}
	return &hcmv3.HttpFilter{Name: jwtAuthnFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(c)}}
}

func jwtProvider(r *securityv1.JWTRule) *jwtv3.JwtProvider {
	p := &jwtv3.JwtProvider{
		Issuer:                     r.GetIssuer(),
		Audiences:                  r.GetAudiences(),
		Forward:                    r.GetForwardOriginalToken(),
		ForwardPayloadHeader:       r.GetOutputPayloadToHeader(),
		PayloadInMetadata:          jwtPayloadKey,
		NormalizePayloadInMetadata: &jwtv3.JwtProvider_NormalizePayload{SpaceDelimitedClaims: spaceDelimitedClaims(r.GetSpaceDelimitedClaims())},
		FromParams:                 r.GetFromParams(),
		FromCookies:                r.GetFromCookies(),
	}
	for _, ch := range r.GetOutputClaimToHeaders() {
		p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtv3.JwtClaimToHeader{HeaderName: ch.GetHeader(), ClaimName: ch.GetClaim()})
	}
	for _, h := range r.GetFromHeaders() {
		p.FromHeaders = append(p.FromHeaders, &jwtv3.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
	}
	local := func(jwks string) {
		p.JwksSourceSpecifier = &jwtv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: jwks}}}
	}
	switch {
	case r.GetJwks() != "":
		local(r.GetJwks())
	case r.GetJwksUri() != "":
		_, _, cluster, err := model.JWKSCluster(r.GetJwksUri())
		if err != nil {
			local(unusableJWKS)
			break
		}
		p.JwksSourceSpecifier = &jwtv3.JwtProvider_RemoteJwks{RemoteJwks: &jwtv3.RemoteJwks{
			HttpUri: &corev3.HttpUri{
				Uri:              r.GetJwksUri(),
				HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster},
				Timeout:          orDuration(r.GetTimeout(), jwksFetchTimeout),
			},
			CacheDuration: jwksCacheDuration,
		}}
	default:
		local(unusableJWKS)
	}
	return p
}

// spaceDelimitedClaims are the claims read as space-separated lists:
// scope and permission, and the rule's, sorted (Istio's).
func spaceDelimitedClaims(extra []string) []string {
	out := append([]string{"permission", "scope"}, extra...)
	slices.Sort(out)
	return slices.Compact(out)
}

// tokenBearerDeny is, for a proxyless gRPC server (no jwt_authn), the
// DENY policy of requests carrying a token where rules look for one in a
// header: such a token cannot be validated, so the request is refused
// rather than let through with it (nil when no rule reads a header gRPC
// can match).
func tokenBearerDeny(rules []*securityv1.JWTRule) *rbacv3.Policy {
	var ids []*rbacv3.Principal
	seen := map[string]bool{}
	for _, r := range rules {
		hs := r.GetFromHeaders()
		if len(hs) == 0 && len(r.GetFromParams()) == 0 && len(r.GetFromCookies()) == 0 {
			// Envoy's default location: Authorization: Bearer <token>.
			hs = []*securityv1.JWTHeader{{Name: "authorization", Prefix: "Bearer "}}
		}
		for _, h := range hs {
			if !model.GRPCHeader(h.GetName()) || seen[h.GetName()+"\x00"+h.GetPrefix()] {
				continue
			}
			seen[h.GetName()+"\x00"+h.GetPrefix()] = true
			hm := headerMatcher(h.GetName(), "*", false)
			if h.GetPrefix() != "" {
				hm = headerMatcher(h.GetName(), h.GetPrefix()+"*", false)
			}
			ids = append(ids, &rbacv3.Principal{Identifier: &rbacv3.Principal_Header{Header: hm}})
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return &rbacv3.Policy{
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
		Principals:  []*rbacv3.Principal{principalOr(ids)},
	}
}
