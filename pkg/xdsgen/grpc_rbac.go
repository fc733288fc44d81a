package xdsgen

import (
	"slices"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Authorization on proxyless gRPC servers: grpc-go's xDS server runs the
// RBAC HTTP filter (gRPC A41) with actions ALLOW and DENY only, so, as
// Istio's grpcgen, a DENY filter then an ALLOW filter, with unique names
// (grpc-go refuses two filters of one name). grpc-go has no ext_authz,
// no jwt_authn and no shadow rules, and ignores LOG, so:
//   - AUDIT and dry-run policies are left out (they refuse nothing);
//   - CUSTOM rules deny what they match (nothing can ask the provider);
//   - JWT fields (requestPrincipals, audiences, presenter, claims) and
//     grpc-* or :scheme headers, which grpc-go cannot match, make an
//     ALLOW rule match nothing and are dropped from a DENY rule;
//   - with RequestAuthentications, a request bearing a token in a header
//     their rules read is denied: the token cannot be validated.
// The model reports each of these on the policy.

const grpcRBACDenyName = "envoy.filters.http.rbac.DENY"

// grpcServerFilters are the HTTP filters of a gRPC server of a workload in
// ns with labels, before the router (nil: none).
func grpcServerFilters(m *model.Mesh, ns string, labels map[string]string) []*hcmv3.HttpFilter {
	az := m.AuthorizationPolicies(ns, labels)
	jwt := m.RequestAuthentications(ns, labels)
	var out []*hcmv3.HttpFilter
	// rbacRules sets dry-run policies apart (its second result): gRPC
	// servers enforce only the others.
	deny, _ := rbacRules(append(slices.Clip(az.Deny), az.Custom...), rbacv3.RBAC_DENY, rbacGRPC, "")
	if p := tokenBearerDeny(jwt.Rules); p != nil {
		if deny == nil {
			deny = &rbacv3.RBAC{Action: rbacv3.RBAC_DENY, Policies: map[string]*rbacv3.Policy{}}
		}
		deny.Policies["request-authentication-token-not-verifiable"] = p
	}
	if deny != nil && len(deny.Policies) > 0 {
		out = append(out, rbacHTTPFilter(grpcRBACDenyName, &rbachttpv3.RBAC{Rules: deny}))
	}
	if allow, _ := rbacRules(az.Allow, rbacv3.RBAC_ALLOW, rbacGRPC, ""); allow != nil {
		// An ALLOW policy whose rules all match nothing refuses every
		// request, as on Envoy (Istio's grpcgen leaves it out).
		out = append(out, rbacHTTPFilter(rbacHTTPName, &rbachttpv3.RBAC{Rules: allow}))
	}
	return out
}
