package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

func authzIn(ns, name, created string, spec map[string]any) *unstructuredObj {
	o := configObj(GroupSecurity, KindAuthorizationPolicy, ns, name, nil, spec)
	o.body["metadata"].(map[string]any)["creationTimestamp"] = created
	return o
}

// TestAuthorizationPolicySelection: the policies of the root namespace
// and of the workload's, oldest first, whose selector the workload's
// labels satisfy; targetRefs policies apply to no workload; the CUSTOM
// provider resolves against the mesh config and the services.
func TestAuthorizationPolicySelection(t *testing.T) {
	mc, err := meshconfig.Parse([]byte(`
extensionProviders:
- name: ext
  envoyExtAuthzGrpc: {service: authz.shop.svc.cluster.local, port: 9000}
- name: gone
  envoyExtAuthzHttp: {service: other/missing.example, port: 80}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(WithMeshConfig(mc))
	sel := func(labels map[string]string) map[string]any {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		return map[string]any{"matchLabels": l}
	}
	applyAll(t, s,
		add("c1", service("shop", "authz", "10.0.0.9", svcPort{name: "grpc", port: 9000})),
		add("c1", authzIn("istio-system", "mesh-deny", "2024-01-02T00:00:00Z", map[string]any{"action": "DENY", "rules": []any{map[string]any{}}})),
		add("c1", authzIn("shop", "ns-allow-new", "2024-01-03T00:00:00Z", map[string]any{"rules": []any{map[string]any{}}})),
		add("c1", authzIn("shop", "ns-allow-old", "2024-01-01T00:00:00Z", map[string]any{"rules": []any{map[string]any{}}})),
		add("c1", authzIn("shop", "web-only", "2024-01-01T00:00:00Z", map[string]any{"action": "AUDIT", "selector": sel(map[string]string{"app": "web"})})),
		add("c1", authzIn("istio-system", "mesh-web", "2024-01-01T00:00:00Z", map[string]any{"action": "CUSTOM", "provider": map[string]any{"name": "ext"}, "selector": sel(map[string]string{"app": "web"}), "rules": []any{map[string]any{}}})),
		add("c1", authzIn("shop", "ref", "2024-01-01T00:00:00Z", map[string]any{"action": "DENY", "targetRefs": []any{map[string]any{"kind": "Service", "name": "web"}}, "rules": []any{map[string]any{}}})),
		add("c1", authzIn("other", "elsewhere", "2024-01-01T00:00:00Z", map[string]any{"action": "DENY"})),
		add("c1", authzIn("shop", "bad-provider", "2024-01-04T00:00:00Z", map[string]any{"action": "CUSTOM", "provider": map[string]any{"name": "gone"}, "selector": sel(map[string]string{"app": "none"})})),
	)
	m := s.Snapshot()
	names := func(ps []*AuthzPolicy) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name                      string
		labels                    map[string]string
		allow, deny, audit, custm []string
	}{
		{name: "web", labels: map[string]string{"app": "web", "v": "1"},
			allow: []string{"shop/ns-allow-old", "shop/ns-allow-new"}, deny: []string{"istio-system/mesh-deny"},
			audit: []string{"shop/web-only"}, custm: []string{"istio-system/mesh-web"}},
		{name: "db", labels: map[string]string{"app": "db"},
			allow: []string{"shop/ns-allow-old", "shop/ns-allow-new"}, deny: []string{"istio-system/mesh-deny"}},
	} {
		got := m.AuthorizationPolicies("shop", tc.labels)
		for _, c := range []struct {
			what      string
			got, want []string
		}{{"allow", names(got.Allow), tc.allow}, {"deny", names(got.Deny), tc.deny}, {"audit", names(got.Audit), tc.audit}, {"custom", names(got.Custom), tc.custm}} {
			if diff := cmp.Diff(c.want, c.got); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", tc.name, c.what, diff)
			}
		}
	}
	if a, b := m.AuthorizationPolicies("shop", map[string]string{"app": "web"}), m.AuthorizationPolicies("shop", map[string]string{"app": "db"}); a.Key == b.Key {
		t.Errorf("two selections share key %q", a.Key)
	}
	p, err := m.ExtAuthzProvider("ext")
	if err != nil || p.Cluster != "outbound|9000||authz.shop.svc.cluster.local" || p.GRPC == nil {
		t.Errorf("provider ext = %+v, %v", p, err)
	}
	if _, err := m.ExtAuthzProvider("gone"); err == nil {
		t.Error("provider gone (service not in the mesh): no error")
	}
	want := []Problem{
		{Object: "c1/AuthorizationPolicy/istio-system/mesh-web", Reason: "on proxyless gRPC servers (no ext_authz) action CUSTOM denies the requests its rules match"},
		{Object: "c1/AuthorizationPolicy/shop/bad-provider", Reason: `extension provider "gone": service "other/missing.example" is not in the mesh: the requests its rules match are denied, as Istio does`},
		{Object: "c1/AuthorizationPolicy/shop/ref", Severity: SeverityError,
			Reason: "targetRefs attach a policy to gateways and waypoints, to which pilotwire applies no policy (AuthorizationPolicies are applied to sidecars and proxyless gRPC servers only): not applied to any workload"},
	}
	if diff := cmp.Diff(want, m.Problems()); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// TestRequestAuthenticationSelection: JWT rules of the selected policies,
// sorted by issuer; a jwksUri whose host is not a service is reported.
func TestRequestAuthenticationSelection(t *testing.T) {
	s := NewStore()
	ra := func(ns, name string, spec map[string]any) *unstructuredObj {
		return configObj(GroupSecurity, KindRequestAuthentication, ns, name, nil, spec)
	}
	applyAll(t, s,
		add("c1", service("auth", "keys", "10.0.0.7", svcPort{name: "http", port: 8080})),
		add("c1", ra("istio-system", "mesh", map[string]any{"jwtRules": []any{map[string]any{"issuer": "z-issuer", "jwksUri": "http://keys.auth.svc.cluster.local:8080/jwks"}}})),
		add("c1", ra("shop", "web", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"jwtRules": []any{map[string]any{"issuer": "a-issuer", "jwksUri": "https://example.com/jwks"}}})),
	)
	m := s.Snapshot()
	var issuers []string
	for _, r := range m.RequestAuthentications("shop", map[string]string{"app": "web"}).Rules {
		issuers = append(issuers, r.GetIssuer())
	}
	if diff := cmp.Diff([]string{"a-issuer", "z-issuer"}, issuers); diff != "" {
		t.Errorf("issuers (-want +got):\n%s", diff)
	}
	if n := len(m.RequestAuthentications("shop", map[string]string{"app": "db"}).Rules); n != 1 {
		t.Errorf("db: %d rules, want the mesh's 1", n)
	}
	const grpcWarning = "on proxyless gRPC servers (no jwt_authn) tokens cannot be validated: requests bearing one in a header are denied"
	want := []Problem{
		{Object: "c1/RequestAuthentication/istio-system/mesh", Reason: grpcWarning},
		{Object: "c1/RequestAuthentication/shop/web",
			Reason: "jwtRule of issuer a-issuer: jwksUri host example.com is not a mesh service, so Envoy has no cluster outbound|443||example.com to fetch its keys from and refuses its tokens (add a ServiceEntry for it, as Istio needs)"},
		{Object: "c1/RequestAuthentication/shop/web", Reason: grpcWarning},
	}
	if diff := cmp.Diff(want, m.Problems()); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestJWKSCluster(t *testing.T) {
	for _, tc := range []struct {
		uri, cluster string
		bad          bool
	}{
		{uri: "https://example.com/.well-known/jwks.json", cluster: "outbound|443||example.com"},
		{uri: "http://keys.auth.svc.cluster.local:8080/jwks", cluster: "outbound|8080||keys.auth.svc.cluster.local"},
		{uri: "http://example.com", cluster: "outbound|80||example.com"},
		{uri: "ftp://example.com/jwks", bad: true},
		{uri: "https://example.com:99999/jwks", bad: true},
		{uri: "example.com/jwks", bad: true},
	} {
		_, _, got, err := JWKSCluster(tc.uri)
		if (err != nil) != tc.bad || got != tc.cluster {
			t.Errorf("JWKSCluster(%q) = %q, %v", tc.uri, got, err)
		}
	}
}
