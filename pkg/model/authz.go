package model

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityv1 "istio.io/api/security/v1"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

// AuthorizationPolicy and RequestAuthentication (security.istio.io, v1
// or v1beta1: one schema), selected for a workload as Istio's
// AuthorizationPolicies.ListAuthorizationPolicies and its JWT policies
// select them: the policies of the root namespace and of the workload's
// namespace, oldest first (then by name, then namespace), whose selector
// is a subset of the workload's labels (no selector: all of the
// namespace, or of the mesh in the root namespace). A policy with
// targetRefs attaches to gateways and waypoints only, so it applies to no
// sidecar or proxyless server: it is reported, as what pilotwire does not
// apply.
//
// The model reads each rule into conditions ([AuthzRule]) whose values
// are checked once, here; generators turn them into Envoy RBAC, as
// Istio's authz/model does. A value that cannot be enforced (a CIDR that
// does not parse, a path template, an experimental.envoy.filters key)
// makes an ALLOW rule match nothing and is dropped from a DENY, AUDIT or
// CUSTOM rule, so that what is left out refuses more, never less (Istio's
// rule for its own generation errors); a rule with an unknown when key is
// skipped whole, as in Istio.

// The security kinds the model translates, in group GroupSecurity.
const (
	KindAuthorizationPolicy   = "AuthorizationPolicy"
	KindRequestAuthentication = "RequestAuthentication"
)

func (k ObjectKey) isAuthPolicy() bool {
	return k.Group == GroupSecurity && (k.Kind == KindAuthorizationPolicy || k.Kind == KindRequestAuthentication)
}

// AuthzAction is an AuthorizationPolicy's action.
type AuthzAction uint8

// Actions. The zero value is ALLOW, the API's default.
const (
	AuthzAllow AuthzAction = iota
	AuthzDeny
	AuthzAudit
	AuthzCustom
)

func (a AuthzAction) String() string {
	switch a {
	case AuthzAllow:
		return "ALLOW"
	case AuthzDeny:
		return "DENY"
	case AuthzAudit:
		return "AUDIT"
	case AuthzCustom:
		return "CUSTOM"
	}
	return "AuthzAction(" + strconv.Itoa(int(a)) + ")"
}

// AuthzField is what a condition of a rule matches.
type AuthzField uint8

// Fields of the source (principals, in Envoy's RBAC) and of the operation
// (permissions). HTTPOnly says which an Envoy TCP filter cannot match.
const (
	// Principals.
	FieldPrincipals        AuthzField = iota // source.principal: peer identity (mTLS)
	FieldRequestPrincipals                   // request.auth.principal: iss/sub of the JWT
	FieldServiceAccounts                     // source.serviceAccount
	FieldTrustDomains                        // source.trustDomain
	FieldNamespaces                          // source.namespace
	FieldRemoteIPBlocks                      // remote.ip (X-Forwarded-For)
	FieldIPBlocks                            // source.ip (the peer's address)
	FieldRequestHeader                       // request.headers[Key[0]]
	FieldAudiences                           // request.auth.audiences
	FieldPresenter                           // request.auth.presenter
	FieldClaims                              // request.auth.claims[Key...]
	// Permissions.
	FieldHosts // :authority
	FieldMethods
	FieldPaths
	FieldPorts // destination.port
	FieldDestIP
	FieldSNI
)

// HTTPOnly reports whether only an HTTP filter can match f.
func (f AuthzField) HTTPOnly() bool {
	switch f {
	case FieldRequestPrincipals, FieldRequestHeader, FieldAudiences, FieldPresenter, FieldClaims,
		FieldHosts, FieldMethods, FieldPaths:
		return true
	}
	return false
}

// Permission reports whether f is matched on the operation (an RBAC
// permission) rather than on the source (a principal).
func (f AuthzField) Permission() bool { return f >= FieldHosts }

// JWT reports whether f reads the claims of the request's JWT (the
// jwt_authn filter's metadata).
func (f AuthzField) JWT() bool {
	switch f {
	case FieldRequestPrincipals, FieldAudiences, FieldPresenter, FieldClaims:
		return true
	}
	return false
}

// AuthzCondition is one field of a rule: it matches when the request
// matches one of Values (if any) and none of NotValues.
type AuthzCondition struct {
	Field AuthzField
	// Key is the header name of FieldRequestHeader, the claim path of
	// FieldClaims; nil otherwise.
	Key []string
	// Values and NotValues are the valid values, checked for their field
	// (CIDRs, ports, header-safe strings). Read-only.
	Values, NotValues []string
	// Dropped: some value could not be enforced and is not in Values or
	// NotValues. An ALLOW rule with such a condition matches nothing;
	// other actions match without the value.
	Dropped bool
}

// AuthzRule is one rule of a policy: it matches a request that one of
// Principals (each an AND of conditions; one empty entry matches every
// source) and one of Permissions match.
type AuthzRule struct {
	Principals  [][]AuthzCondition
	Permissions [][]AuthzCondition
}

// AuthzPolicy is one AuthorizationPolicy as generators read it. Shared,
// read-only.
type AuthzPolicy struct {
	Namespace, Name string
	Action          AuthzAction
	// Provider is the CUSTOM action's extension provider name.
	Provider string
	// DryRun: the istio.io/dry-run annotation is true, so the policy is
	// only evaluated (Envoy's shadow rules), never enforced.
	DryRun bool
	// Rules are the rules to enforce, the invalid ones left out (nil
	// Rules when the spec has none: such a policy matches no request).
	// NoRules is true when the spec has none.
	Rules   []AuthzRule
	NoRules bool
}

// AuthzPolicies are the AuthorizationPolicies that apply to one
// workload, by action, each oldest first (root namespace first).
type AuthzPolicies struct {
	Custom, Deny, Allow, Audit []*AuthzPolicy
	// Key names the selection: two workloads with the same Key have the
	// same policies (in one mesh).
	Key string
}

// Empty reports whether no policy applies.
func (p AuthzPolicies) Empty() bool {
	return len(p.Custom)+len(p.Deny)+len(p.Allow)+len(p.Audit) == 0
}

// JWTRules are the JWT rules of the RequestAuthentications that apply to
// one workload, sorted by issuer (Istio's order), and a Key naming them.
type JWTRules struct {
	Rules []*securityv1.JWTRule // read-only
	Key   string
}

// storedPolicy is one AuthorizationPolicy or RequestAuthentication as
// stored.
type storedPolicy struct {
	key     ObjectKey
	created time.Time
	dryRun  bool
	authz   *securityv1.AuthorizationPolicy // nil for a RequestAuthentication
	authn   *securityv1.RequestAuthentication
}

// decodePolicy decodes an AuthorizationPolicy or RequestAuthentication.
func decodePolicy(key ObjectKey, raw []byte) (*entry, error) {
	st := &storedPolicy{key: key}
	var err error
	if key.Kind == KindAuthorizationPolicy {
		st.authz = &securityv1.AuthorizationPolicy{}
		st.created, err = decodeIstio(raw, st.authz)
		var meta struct {
			Metadata policyMeta `json:"metadata"`
		}
		if err == nil {
			err = json.Unmarshal(raw, &meta)
		}
		if dry, perr := strconv.ParseBool(meta.Metadata.Annotations[dryRunAnnotation]); perr == nil {
			st.dryRun = dry
		}
	} else {
		st.authn = &securityv1.RequestAuthentication{}
		st.created, err = decodeIstio(raw, st.authn)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", key.Kind, err)
	}
	return &entry{policy: st}, nil
}

// securedPolicy is a policy as the index selects it.
type securedPolicy struct {
	object   string
	ns       string
	selector map[string]string
	authz    *AuthzPolicy
	jwt      []*securityv1.JWTRule
}

// authzIndex holds the AuthorizationPolicies and RequestAuthentications
// that apply to workloads.
type authzIndex struct {
	root string
	// byNS are each namespace's policies, oldest first.
	byNS     map[string][]*securedPolicy
	jwtByNS  map[string][]*securedPolicy
	problems []Problem
	// custom are the CUSTOM policies, whose providers problems() checks
	// against the services.
	custom []*securedPolicy
	// jwks are the jwksUris of the rules, by object, which problems()
	// checks against the services.
	jwks []jwksRef
	// providers are the mesh config's extensionProviders.
	providers []*meshv1alpha1.MeshConfig_ExtensionProvider
}

type jwksRef struct {
	object, issuer, uri string
}

// emptyAuthz is the index without policies.
var emptyAuthz = &authzIndex{}

func buildAuthzIndex(stored []*storedPolicy, root string, providers []*meshv1alpha1.MeshConfig_ExtensionProvider) *authzIndex {
	if len(stored) == 0 {
		return emptyAuthz
	}
	slices.SortFunc(stored, func(a, b *storedPolicy) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Name, b.key.Name),
			strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Cluster, b.key.Cluster))
	})
	x := &authzIndex{root: root, providers: providers, byNS: make(map[string][]*securedPolicy), jwtByNS: make(map[string][]*securedPolicy)}
	for _, st := range stored {
		obj := objectName(st.key)
		p := &securedPolicy{object: obj, ns: st.key.Namespace}
		if st.authz != nil {
			spec := st.authz
			if len(spec.GetTargetRefs()) > 0 || spec.GetTargetRef() != nil {
				sev, _ := authorizationPolicySeverity(st.dryRun, spec)
				x.problems = append(x.problems, Problem{Object: obj, Severity: sev,
					Reason: "targetRefs attach a policy to gateways and waypoints, to which pilotwire applies no policy (AuthorizationPolicies are applied to sidecars and proxyless gRPC servers only): not applied to any workload"})
				continue
			}
			ap, problems := readAuthzPolicy(obj, st)
			x.problems = append(x.problems, problems...)
			if ap == nil {
				continue
			}
			p.selector = spec.GetSelector().GetMatchLabels()
			p.authz = ap
			x.byNS[p.ns] = append(x.byNS[p.ns], p)
			if ap.Action == AuthzCustom {
				if !st.dryRun && !ap.NoRules {
					x.problems = append(x.problems, Problem{Object: obj,
						Reason: "on proxyless gRPC servers (no ext_authz) action CUSTOM denies the requests its rules match"})
				}
				x.custom = append(x.custom, p)
				if _, err := x.provider(ap.Provider, nil); err != nil {
					x.problems = append(x.problems, Problem{Object: obj,
						Reason: err.Error() + ": the requests its rules match are denied, as Istio does"})
				}
			}
			continue
		}
		spec := st.authn
		if len(spec.GetTargetRefs()) > 0 || spec.GetTargetRef() != nil {
			sev := SeverityWarning
			if len(spec.GetJwtRules()) > 0 {
				sev = SeverityError
			}
			x.problems = append(x.problems, Problem{Object: obj, Severity: sev,
				Reason: "targetRefs attach a policy to gateways and waypoints, to which pilotwire applies no policy (AuthorizationPolicies are applied to sidecars and proxyless gRPC servers only): tokens are not validated"})
			continue
		}
		p.selector = spec.GetSelector().GetMatchLabels()
		for _, r := range spec.GetJwtRules() {
			if r.GetIssuer() == "" {
				x.problems = append(x.problems, Problem{Object: obj, Reason: "a jwtRule without issuer is not valid: ignored (tokens it would accept are refused)"})
				continue
			}
			p.jwt = append(p.jwt, r)
			x.problems = append(x.problems, jwtRuleProblems(obj, r)...)
			if r.GetJwks() == "" && r.GetJwksUri() != "" {
				x.jwks = append(x.jwks, jwksRef{object: obj, issuer: r.GetIssuer(), uri: r.GetJwksUri()})
			}
		}
		if len(p.jwt) > 0 {
			x.problems = append(x.problems, Problem{Object: obj,
				Reason: "on proxyless gRPC servers (no jwt_authn) tokens cannot be validated: requests bearing one in a header are denied"})
		}
		x.jwtByNS[p.ns] = append(x.jwtByNS[p.ns], p)
	}
	return x
}

// authPolicyProblems are the problems of one AuthorizationPolicy or
// RequestAuthentication that its record and the mesh config give, without
// the services (those [Unsupported] lists for the CLI).
func authPolicyProblems(key ObjectKey, raw []byte, mc *meshconfig.MeshConfig) []Problem {
	e, err := decodePolicy(key, raw)
	if err != nil {
		return nil // the model keeps the previous version, and says so
	}
	return sortProblems(slices.Clone(buildAuthzIndex([]*storedPolicy{e.policy}, mc.RootNamespace(), mc.Proto().GetExtensionProviders()).problems))
}

// authorizationPolicySeverity is how bad not applying a policy is (the
// rules of unsupported.go: a policy that refuses nothing is a warning).
func authorizationPolicySeverity(dryRun bool, spec *securityv1.AuthorizationPolicy) (Severity, string) {
	if dryRun {
		return SeverityWarning, ""
	}
	matchesAll := slices.ContainsFunc(spec.GetRules(), func(r *securityv1.Rule) bool {
		return len(r.GetFrom()) == 0 && len(r.GetTo()) == 0 && len(r.GetWhen()) == 0
	})
	switch spec.GetAction() {
	case securityv1.AuthorizationPolicy_ALLOW:
		if len(spec.GetRules()) > 0 && matchesAll {
			return SeverityWarning, ""
		}
		return SeverityError, ""
	case securityv1.AuthorizationPolicy_DENY, securityv1.AuthorizationPolicy_CUSTOM:
		if len(spec.GetRules()) == 0 {
			return SeverityWarning, ""
		}
		return SeverityError, ""
	}
	return SeverityWarning, ""
}

// jwtRuleProblems are what generators leave out of a JWT rule.
func jwtRuleProblems(obj string, r *securityv1.JWTRule) []Problem {
	var out []Problem
	iss := "jwtRule of issuer " + r.GetIssuer() + ": "
	switch {
	case r.GetJwks() != "" && r.GetJwksUri() != "":
		out = append(out, Problem{Object: obj, Reason: iss + "jwks and jwksUri are both set: the inline jwks is used, jwksUri is ignored"})
	case r.GetJwks() == "" && r.GetJwksUri() == "":
		out = append(out, Problem{Object: obj, Reason: iss + "no jwks and no jwksUri: pilotwire does not discover keys from the issuer (OpenID discovery), so its tokens are refused"})
	}
	return out
}

// JWKSCluster is the cluster Envoy fetches a jwksUri from: Istio's
// outbound|<port>||<host>, the port the URI's or its scheme's (80 for
// http, 443 for https).
func JWKSCluster(uri string) (host string, port int, cluster string, err error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return "", 0, "", fmt.Errorf("jwksUri %q is not a URL", uri)
	}
	switch scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", 0, "", fmt.Errorf("jwksUri %q: scheme %q is not http or https", uri, scheme)
	}
	hostport, _, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		p, perr := strconv.Atoi(hostport[i+1:])
		if perr != nil || p < 1 || p > 65535 {
			return "", 0, "", fmt.Errorf("jwksUri %q: port %q is not valid", uri, hostport[i+1:])
		}
		host, port = hostport[:i], p
	} else {
		host = hostport
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return "", 0, "", fmt.Errorf("jwksUri %q has no host", uri)
	}
	return host, port, OutboundClusterName(int32(port), "", host), nil
}

// readAuthzPolicy reads a policy into an AuthzPolicy (nil when it applies
// to nothing) and its problems.
func readAuthzPolicy(obj string, st *storedPolicy) (*AuthzPolicy, []Problem) {
	spec := st.authz
	var problems []Problem
	report := func(sev Severity, why string) {
		problems = append(problems, Problem{Object: obj, Severity: sev, Reason: why})
	}
	ap := &AuthzPolicy{Namespace: st.key.Namespace, Name: st.key.Name, DryRun: st.dryRun, NoRules: len(spec.GetRules()) == 0}
	switch spec.GetAction() {
	case securityv1.AuthorizationPolicy_ALLOW:
		ap.Action = AuthzAllow
	case securityv1.AuthorizationPolicy_DENY:
		ap.Action = AuthzDeny
	case securityv1.AuthorizationPolicy_AUDIT:
		ap.Action = AuthzAudit
	case securityv1.AuthorizationPolicy_CUSTOM:
		ap.Action = AuthzCustom
		ap.Provider = spec.GetProvider().GetName()
	default:
		report(SeverityError, fmt.Sprintf("action %v is unknown: the policy is not applied", spec.GetAction()))
		return nil, problems
	}
	// What leaving a value out does: an ALLOW rule matches nothing, the
	// others match without it.
	dropped := "the rule matches without it (it refuses more)"
	if ap.Action == AuthzAllow {
		dropped = "the rule matches no request"
	}
	for i, r := range spec.GetRules() {
		where := "rule " + strconv.Itoa(i) + ": "
		rule, why := readAuthzRule(r, ap.Namespace)
		if why != "" && rule == nil {
			sev := SeverityWarning
			if ap.Action == AuthzDeny || ap.Action == AuthzCustom {
				sev = SeverityError
			}
			if st.dryRun {
				sev = SeverityWarning
			}
			report(sev, where+why+": the rule is skipped, as Istio does")
			ap.Rules = append(ap.Rules, AuthzRule{}) // keeps rule indexes; generators skip it
			continue
		}
		for _, d := range rule.drops {
			report(SeverityWarning, where+d+": "+dropped)
		}
		if ap.Action != AuthzAudit && !st.dryRun {
			for _, f := range rule.grpcUnmatchable() {
				report(SeverityWarning, where+"on proxyless gRPC servers "+f+": "+dropped)
			}
		}
		ap.Rules = append(ap.Rules, rule.AuthzRule)
	}
	return ap, problems
}

// readRule is a rule read, with the values it left out.
type readRule struct {
	AuthzRule
	drops []string
}

// readAuthzRule reads one rule; nil and why for a rule Istio skips.
func readAuthzRule(r *securityv1.Rule, ns string) (*readRule, string) {
	out := &readRule{}
	var basePrincipal, basePermission []AuthzCondition
	add := func(list *[]AuthzCondition, f AuthzField, key []string, values, notValues []string) {
		if len(values) == 0 && len(notValues) == 0 {
			return
		}
		if f == FieldServiceAccounts {
			// <name> is of the policy's namespace.
			values, notValues = qualifySA(values, ns), qualifySA(notValues, ns)
		}
		c := AuthzCondition{Field: f, Key: key}
		name := fieldName(f, key)
		c.Values, c.Dropped = out.check(name, f, values, false)
		var dropped bool
		c.NotValues, dropped = out.check(name, f, notValues, true)
		c.Dropped = c.Dropped || dropped
		*list = append(*list, c)
	}
	for _, w := range r.GetWhen() {
		k := w.GetKey()
		switch {
		case k == "destination.ip":
			add(&basePermission, FieldDestIP, nil, w.GetValues(), w.GetNotValues())
		case k == "destination.port":
			add(&basePermission, FieldPorts, nil, w.GetValues(), w.GetNotValues())
		case k == "connection.sni":
			add(&basePermission, FieldSNI, nil, w.GetValues(), w.GetNotValues())
		case strings.HasPrefix(k, "experimental.envoy.filters."):
			out.drops = append(out.drops, "when "+k+" (Envoy filter metadata) is not translated by pilotwire")
			basePermission = append(basePermission, AuthzCondition{Field: FieldSNI, Dropped: true})
		case k == "source.ip":
			add(&basePrincipal, FieldIPBlocks, nil, w.GetValues(), w.GetNotValues())
		case k == "remote.ip":
			add(&basePrincipal, FieldRemoteIPBlocks, nil, w.GetValues(), w.GetNotValues())
		case k == "source.namespace":
			add(&basePrincipal, FieldNamespaces, nil, w.GetValues(), w.GetNotValues())
		case k == "source.trustDomain":
			add(&basePrincipal, FieldTrustDomains, nil, w.GetValues(), w.GetNotValues())
		case k == "source.serviceAccount":
			add(&basePrincipal, FieldServiceAccounts, nil, w.GetValues(), w.GetNotValues())
		case k == "source.principal":
			add(&basePrincipal, FieldPrincipals, nil, w.GetValues(), w.GetNotValues())
		case k == "request.auth.principal":
			add(&basePrincipal, FieldRequestPrincipals, nil, w.GetValues(), w.GetNotValues())
		case k == "request.auth.audiences":
			add(&basePrincipal, FieldAudiences, nil, w.GetValues(), w.GetNotValues())
		case k == "request.auth.presenter":
			add(&basePrincipal, FieldPresenter, nil, w.GetValues(), w.GetNotValues())
		case strings.HasPrefix(k, "request.headers"):
			name, ok := inBrackets(strings.TrimPrefix(k, "request.headers"))
			if !ok || !isHeaderName(name) {
				return nil, "when key " + strconv.Quote(k) + " does not name a header"
			}
			add(&basePrincipal, FieldRequestHeader, []string{name}, w.GetValues(), w.GetNotValues())
		case strings.HasPrefix(k, "request.auth.claims"):
			claims, ok := claimPath(strings.TrimPrefix(k, "request.auth.claims"))
			if !ok {
				return nil, "when key " + strconv.Quote(k) + " does not name a claim"
			}
			add(&basePrincipal, FieldClaims, claims, w.GetValues(), w.GetNotValues())
		default:
			return nil, "when key " + strconv.Quote(k) + " is unknown"
		}
	}
	for _, from := range r.GetFrom() {
		s := from.GetSource()
		var cs []AuthzCondition
		// Istio's order: each field in front of the previous ones, the
		// when conditions last.
		add(&cs, FieldPrincipals, nil, s.GetPrincipals(), s.GetNotPrincipals())
		add(&cs, FieldRequestPrincipals, nil, s.GetRequestPrincipals(), s.GetNotRequestPrincipals())
		add(&cs, FieldServiceAccounts, nil, s.GetServiceAccounts(), s.GetNotServiceAccounts())
		add(&cs, FieldTrustDomains, nil, s.GetTrustDomains(), s.GetNotTrustDomains())
		add(&cs, FieldNamespaces, nil, s.GetNamespaces(), s.GetNotNamespaces())
		add(&cs, FieldRemoteIPBlocks, nil, s.GetRemoteIpBlocks(), s.GetNotRemoteIpBlocks())
		add(&cs, FieldIPBlocks, nil, s.GetIpBlocks(), s.GetNotIpBlocks())
		out.Principals = append(out.Principals, append(cs, basePrincipal...))
	}
	if len(r.GetFrom()) == 0 {
		out.Principals = [][]AuthzCondition{basePrincipal}
	}
	for _, to := range r.GetTo() {
		o := to.GetOperation()
		var cs []AuthzCondition
		add(&cs, FieldHosts, nil, o.GetHosts(), o.GetNotHosts())
		add(&cs, FieldMethods, nil, o.GetMethods(), o.GetNotMethods())
		add(&cs, FieldPaths, nil, o.GetPaths(), o.GetNotPaths())
		add(&cs, FieldPorts, nil, o.GetPorts(), o.GetNotPorts())
		out.Permissions = append(out.Permissions, append(cs, basePermission...))
	}
	if len(r.GetTo()) == 0 {
		out.Permissions = [][]AuthzCondition{basePermission}
	}
	return out, ""
}

// grpcUnmatchable says which conditions of r grpc-go's RBAC cannot match.
func (r *readRule) grpcUnmatchable() []string {
	var out []string
	seen := map[string]bool{}
	for _, list := range r.Principals {
		for _, c := range list {
			why := ""
			switch {
			case c.Field.JWT():
				why = fieldName(c.Field, c.Key) + " cannot be matched (no jwt_authn)"
			case c.Field == FieldRequestHeader && !GRPCHeader(c.Key[0]):
				why = fieldName(c.Field, c.Key) + " cannot be matched (grpc-go refuses grpc-* and :scheme header matchers)"
			}
			if why != "" && !seen[why] {
				seen[why] = true
				out = append(out, why)
			}
		}
	}
	return out
}

// GRPCHeader reports whether grpc-go's RBAC takes a matcher on header
// name.
func GRPCHeader(name string) bool {
	n := strings.ToLower(name)
	return n != ":scheme" && !strings.HasPrefix(n, "grpc-")
}

// qualifySA writes each service account as <namespace>/<name>.
func qualifySA(vs []string, ns string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if !strings.Contains(v, "/") {
			v = ns + "/" + v
		}
		out[i] = v
	}
	return out
}

// check keeps the values of field f that generators can enforce and
// notes the others.
func (r *readRule) check(name string, f AuthzField, values []string, not bool) ([]string, bool) {
	var kept []string
	dropped := false
	for _, v := range values {
		why := ""
		switch f {
		case FieldIPBlocks, FieldRemoteIPBlocks, FieldDestIP:
			if _, ok := ParseCIDR(v); !ok {
				why = "is not an IP address or CIDR"
			}
		case FieldPorts:
			if p, err := strconv.ParseUint(v, 10, 32); err != nil || p > 65535 {
				why = "is not a port"
			}
		case FieldPaths:
			if strings.Contains(v, "{") {
				why = "is a path template ({*}, {**}), which pilotwire does not translate"
			}
		}
		if v == "" {
			why = "is empty"
		}
		if why != "" {
			prefix := ""
			if not {
				prefix = "not"
			}
			r.drops = append(r.drops, prefix+name+" value "+strconv.Quote(v)+" "+why)
			dropped = true
			continue
		}
		kept = append(kept, v)
	}
	return kept, dropped
}

// ParseCIDR parses an IP address (a host prefix) or a CIDR, as Istio's
// ipBlocks accept them.
func ParseCIDR(v string) (netip.Prefix, bool) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		return p, err == nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

func fieldName(f AuthzField, key []string) string {
	switch f {
	case FieldPrincipals:
		return "principals"
	case FieldRequestPrincipals:
		return "requestPrincipals"
	case FieldServiceAccounts:
		return "serviceAccounts"
	case FieldTrustDomains:
		return "trustDomains"
	case FieldNamespaces:
		return "namespaces"
	case FieldRemoteIPBlocks:
		return "remoteIpBlocks"
	case FieldIPBlocks:
		return "ipBlocks"
	case FieldRequestHeader:
		return "request.headers[" + strings.Join(key, "") + "]"
	case FieldAudiences:
		return "request.auth.audiences"
	case FieldPresenter:
		return "request.auth.presenter"
	case FieldClaims:
		return "request.auth.claims[" + strings.Join(key, "][") + "]"
	case FieldHosts:
		return "hosts"
	case FieldMethods:
		return "methods"
	case FieldPaths:
		return "paths"
	case FieldPorts:
		return "ports"
	case FieldDestIP:
		return "destination.ip"
	case FieldSNI:
		return "connection.sni"
	}
	return "field"
}

// inBrackets is the name of "[name]".
func inBrackets(s string) (string, bool) {
	if len(s) < 3 || s[0] != '[' || s[len(s)-1] != ']' {
		return "", false
	}
	return s[1 : len(s)-1], true
}

// claimPath reads "[a][b]" (a nested claim) or "[a.b]" (one claim).
func claimPath(s string) ([]string, bool) {
	var out []string
	for s != "" {
		if s[0] != '[' {
			return nil, false
		}
		end := strings.IndexByte(s, ']')
		if end < 2 || strings.IndexByte(s[1:end], '[') >= 0 {
			return nil, false
		}
		out = append(out, s[1:end])
		s = s[end+1:]
	}
	return out, len(out) > 0
}

// forWorkload lists the AuthorizationPolicies that apply to a workload
// in ns with labels.
func (x *authzIndex) forWorkload(ns string, labels map[string]string) AuthzPolicies {
	var out AuthzPolicies
	var key strings.Builder
	x.each(x.byNS, ns, labels, func(p *securedPolicy) {
		ap := p.authz
		switch ap.Action {
		case AuthzAllow:
			out.Allow = append(out.Allow, ap)
		case AuthzDeny:
			out.Deny = append(out.Deny, ap)
		case AuthzAudit:
			out.Audit = append(out.Audit, ap)
		case AuthzCustom:
			out.Custom = append(out.Custom, ap)
		}
		key.WriteString(p.object + ";")
	})
	out.Key = key.String()
	return out
}

// jwtForWorkload lists the JWT rules that apply to a workload in ns with
// labels.
func (x *authzIndex) jwtForWorkload(ns string, labels map[string]string) JWTRules {
	var out JWTRules
	var key strings.Builder
	x.each(x.jwtByNS, ns, labels, func(p *securedPolicy) {
		out.Rules = append(out.Rules, p.jwt...)
		key.WriteString(p.object + ";")
	})
	slices.SortStableFunc(out.Rules, func(a, b *securityv1.JWTRule) int { return strings.Compare(a.GetIssuer(), b.GetIssuer()) })
	out.Key = key.String()
	return out
}

func (x *authzIndex) each(byNS map[string][]*securedPolicy, ns string, labels map[string]string, fn func(*securedPolicy)) {
	for i, n := range []string{x.root, ns} {
		if i == 1 && n == x.root {
			break
		}
		for _, p := range byNS[n] {
			if selects(p.selector, labels) {
				fn(p)
			}
		}
	}
}

// AuthorizationPolicies returns the AuthorizationPolicies that apply to a
// workload in namespace ns with labels.
func (m *Mesh) AuthorizationPolicies(ns string, labels map[string]string) AuthzPolicies {
	return m.content.authzIdx().forWorkload(ns, labels)
}

// RequestAuthentications returns the JWT rules of the
// RequestAuthentications that apply to a workload in namespace ns with
// labels.
func (m *Mesh) RequestAuthentications(ns string, labels map[string]string) JWTRules {
	return m.content.authzIdx().jwtForWorkload(ns, labels)
}

func (c *meshContent) authzIdx() *authzIndex {
	if c.authz == nil {
		return emptyAuthz
	}
	return c.authz
}
