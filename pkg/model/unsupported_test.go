package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

// configObj is an object of any group with a spec and annotations.
func configObj(group, kind, ns, name string, annotations map[string]any, spec map[string]any) *unstructuredObj {
	meta := map[string]any{"name": name, "namespace": ns}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	body := map[string]any{"metadata": meta}
	if spec != nil {
		body["spec"] = spec
	}
	return &unstructuredObj{group: group, kind: kind, namespace: ns, name: name, body: body}
}

func authz(name string, annotations map[string]any, spec map[string]any) *unstructuredObj {
	return configObj(GroupSecurity, "AuthorizationPolicy", "shop", name, annotations, spec)
}

// TestUnsupportedKinds: every watched kind pilotwire does not translate
// (or the part of a Sidecar it does not) is a problem naming the object,
// an error when leaving it out lets through traffic it would refuse.
func TestUnsupportedKinds(t *testing.T) {
	const (
		W = SeverityWarning
		E = SeverityError
	)
	anyRule := []any{map[string]any{"from": []any{map[string]any{"source": map[string]any{"namespaces": []any{"shop"}}}}}}
	tests := []struct {
		name string
		mesh string // mesh config YAML ("": Istio's defaults)
		obj  *unstructuredObj
		want []Severity // the object's problems' severities, in reason order
	}{
		// AuthorizationPolicies are translated: only what they leave out is reported.
		{name: "authz DENY is translated", obj: authz("deny", nil, map[string]any{"action": "DENY", "rules": anyRule}), want: nil},
		{name: "authz ALLOW is translated", obj: authz("allow", nil, map[string]any{"rules": anyRule}), want: nil},
		{name: "authz unknown action", obj: authz("bad", nil, map[string]any{"action": 7}), want: []Severity{E}},
		{name: "authz CUSTOM provider not in mesh config denies", obj: authz("custom", nil, map[string]any{"action": "CUSTOM", "provider": map[string]any{"name": "ext"}, "rules": anyRule}), want: []Severity{W, W}},
		{name: "authz DENY rule with an unknown when key is skipped", obj: authz("deny-when", nil, map[string]any{"action": "DENY", "rules": []any{map[string]any{"when": []any{map[string]any{"key": "source.color", "values": []any{"red"}}}}}}), want: []Severity{E}},
		{name: "authz ALLOW rule with an unknown when key is skipped", obj: authz("allow-when", nil, map[string]any{"rules": []any{map[string]any{"when": []any{map[string]any{"key": "source.color", "values": []any{"red"}}}}}}), want: []Severity{W}},
		{name: "authz bad CIDR is dropped", obj: authz("cidr", nil, map[string]any{"action": "DENY", "rules": []any{map[string]any{"from": []any{map[string]any{"source": map[string]any{"ipBlocks": []any{"10.0.0.0/99"}}}}}}}), want: []Severity{W}},
		{name: "authz path template is dropped", obj: authz("tmpl", nil, map[string]any{"rules": []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"paths": []any{"/v1/{*}/x"}}}}}}}), want: []Severity{W}},
		{name: "authz DENY with targetRefs applies to no sidecar", obj: authz("ref", nil, map[string]any{"action": "DENY", "targetRefs": []any{map[string]any{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "gw"}}, "rules": anyRule}), want: []Severity{E}},
		{name: "request authentication is translated", obj: configObj(GroupSecurity, "RequestAuthentication", "shop", "jwt", nil, map[string]any{"jwtRules": []any{map[string]any{"issuer": "https://issuer.example", "jwks": `{"keys":[]}`}}}), want: []Severity{W}}, // not on gRPC servers
		{name: "request authentication without keys refuses tokens", obj: configObj(GroupSecurity, "RequestAuthentication", "shop", "nokeys", nil, map[string]any{"jwtRules": []any{map[string]any{"issuer": "https://issuer.example"}}}), want: []Severity{W, W}},
		{name: "request authentication without rules", obj: configObj(GroupSecurity, "RequestAuthentication", "shop", "nojwt", nil, map[string]any{}), want: nil},
		{name: "EnvoyFilter", obj: configObj(GroupNetworking, "EnvoyFilter", "shop", "ef", nil, map[string]any{}), want: []Severity{W}},
		{name: "WorkloadGroup", obj: configObj(GroupNetworking, "WorkloadGroup", "shop", "wg", nil, map[string]any{}), want: []Severity{W}},
		{name: "ProxyConfig", obj: configObj(GroupNetworking, "ProxyConfig", "shop", "pc", nil, map[string]any{}), want: []Severity{W}},
		{name: "Telemetry", obj: configObj(groupTelemetry, "Telemetry", "shop", "tel", nil, map[string]any{}), want: []Severity{W}},
		{name: "WasmPlugin", obj: configObj(groupExtensions, "WasmPlugin", "shop", "stats", nil, map[string]any{"phase": "STATS"}), want: []Severity{W}},
		{name: "WasmPlugin AUTHZ", obj: configObj(groupExtensions, "WasmPlugin", "shop", "authz", nil, map[string]any{"phase": "AUTHZ"}), want: []Severity{E}},
		{name: "TCPRoute", obj: configObj(GroupGatewayAPI, "TCPRoute", "shop", "tcp", nil, map[string]any{}), want: []Severity{W}},
		{name: "TLSRoute", obj: configObj(GroupGatewayAPI, "TLSRoute", "shop", "tls", nil, map[string]any{}), want: []Severity{W}},
		{name: "BackendTLSPolicy", obj: configObj(GroupGatewayAPI, "BackendTLSPolicy", "shop", "btls", nil, map[string]any{}), want: []Severity{W}},
		{name: "Sidecar ingress", obj: configObj(GroupNetworking, KindSidecar, "shop", "in", nil, map[string]any{
			"ingress": []any{map[string]any{"port": map[string]any{"number": 9080, "protocol": "HTTP"}, "defaultEndpoint": "127.0.0.1:8080"}}}), want: []Severity{W}},
		{name: "Sidecar inboundConnectionPool", obj: configObj(GroupNetworking, KindSidecar, "shop", "pool", nil, map[string]any{
			"inboundConnectionPool": map[string]any{"tcp": map[string]any{"maxConnections": 10}}}), want: []Severity{W}},
		{name: "Sidecar REGISTRY_ONLY on an ALLOW_ANY mesh", obj: configObj(GroupNetworking, KindSidecar, "shop", "lock", nil, map[string]any{
			"outboundTrafficPolicy": map[string]any{"mode": "REGISTRY_ONLY"}}), want: []Severity{E}},
		{name: "Sidecar empty outboundTrafficPolicy is REGISTRY_ONLY", obj: configObj(GroupNetworking, KindSidecar, "shop", "lock0", nil, map[string]any{
			"outboundTrafficPolicy": map[string]any{}}), want: []Severity{E}},
		{name: "Sidecar ALLOW_ANY on a REGISTRY_ONLY mesh", mesh: "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n", obj: configObj(GroupNetworking, KindSidecar, "shop", "open", nil, map[string]any{
			"outboundTrafficPolicy": map[string]any{"mode": "ALLOW_ANY"}}), want: []Severity{W}},
		{name: "Sidecar ALLOW_ANY on an ALLOW_ANY mesh changes nothing", obj: configObj(GroupNetworking, KindSidecar, "shop", "same", nil, map[string]any{
			"outboundTrafficPolicy": map[string]any{"mode": "ALLOW_ANY"}}), want: nil},
		{name: "Sidecar egressProxy", obj: configObj(GroupNetworking, KindSidecar, "shop", "eproxy", nil, map[string]any{
			"outboundTrafficPolicy": map[string]any{"mode": "ALLOW_ANY", "egressProxy": map[string]any{"host": "egress.example", "port": map[string]any{"number": 443}}}}), want: []Severity{W}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mc *meshconfig.MeshConfig
			if tc.mesh != "" {
				var err error
				if mc, err = meshconfig.Parse([]byte(tc.mesh)); err != nil {
					t.Fatal(err)
				}
			}
			s := NewStore(WithMeshConfig(mc))
			applyAll(t, s, add("c1", tc.obj))
			// The CLI's reading of the record alone agrees with the model.
			if diff := cmp.Diff(s.Snapshot().Problems(), Unsupported(add("c1", tc.obj).proto(t), mc)); diff != "" {
				t.Errorf("Unsupported differs from the model's problems (-model +Unsupported):\n%s", diff)
			}
			obj := "c1/" + tc.obj.kind + "/shop/" + tc.obj.name
			var got []Severity
			for _, p := range s.Snapshot().Problems() {
				if p.Object != obj {
					t.Errorf("problem of another object: %+v", p)
					continue
				}
				if p.Reason == "" {
					t.Errorf("problem without a reason: %+v", p)
				}
				got = append(got, p.Severity)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("severities of %s (-want +got):\n%s\nproblems: %+v", obj, diff, s.Snapshot().Problems())
			}
			// Deleting the object takes its problems away.
			applyAll(t, s, del("c1", tc.obj))
			if ps := s.Snapshot().Problems(); len(ps) != 0 {
				t.Errorf("after delete: %+v", ps)
			}
		})
	}
}

// TestUnsupportedReasons: the reasons say what is not enforced and what
// that lets through.
func TestUnsupportedReasons(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", configObj(groupExtensions, "WasmPlugin", "shop", "authz", nil, map[string]any{"phase": "AUTHZ"})),
	)
	want := []Problem{
		{Object: "c1/WasmPlugin/shop/authz", Severity: SeverityError,
			Reason: "WasmPlugin is not applied (pilotwire does not configure Wasm extensions): phase AUTHZ: the requests it would refuse are allowed"},
	}
	if diff := cmp.Diff(want, s.Snapshot().Problems()); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// TestUnsupportedUndecodable: a record of an untranslated kind that is
// not JSON is reported too, and the previous version's problem stays.
func TestUnsupportedUndecodable(t *testing.T) {
	s := NewStore()
	wasm := configObj(groupExtensions, "WasmPlugin", "shop", "authz", nil, map[string]any{"phase": "AUTHZ"})
	applyAll(t, s, add("c1", wasm))
	bad := upd("c1", wasm)
	bad.raw = []byte("{not json")
	if err := s.Apply(bad.proto(t), s.AppliedSeq()+1); err == nil {
		t.Fatal("Apply of a record that is not JSON: no error")
	}
	var got []Severity
	for _, p := range s.Snapshot().Problems() {
		got = append(got, p.Severity)
	}
	if diff := cmp.Diff([]Severity{SeverityError, SeverityWarning}, got); diff != "" {
		t.Errorf("severities (-want +got):\n%s\n%+v", diff, s.Snapshot().Problems())
	}
}
