package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	networkingv1 "istio.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

// TestTrafficPolicyMerge pins how a rule's policy, its portLevelSettings,
// a subset's policy (and the subset's portLevelSettings) and the mesh
// config's defaultTrafficPolicy combine for one cluster, as Istio's
// cluster builder does (util.GetPortLevelTrafficPolicy,
// util.MergeSubsetTrafficPolicy, applyDefaultTrafficPolicy): port-level
// settings replace the rule's policy wholesale (nothing is inherited, an
// omitted component gets its default); a subset's policy overrides per
// component, a subset's port-level settings replace the four components
// connectionPool, outlierDetection, loadBalancer and tls wholesale; the
// mesh default fills connectionPool and outlierDetection of the rule's
// port policy, before the subset merge.
func TestTrafficPolicyMerge(t *testing.T) {
	// full sets every component at the rule's top level.
	const full = `
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
    connectionPool: {tcp: {maxConnections: 100}}
    outlierDetection: {consecutive5xxErrors: 5}
    tls: {mode: SIMPLE, sni: top.example.com}
    proxyProtocol: {version: V2}
    retryBudget: {percent: 20}`
	const fullWant = `{loadBalancer: {consistentHash: {httpHeaderName: x-user}}, connectionPool: {tcp: {maxConnections: 100}},
    outlierDetection: {consecutive5xxErrors: 5}, tls: {mode: SIMPLE, sni: top.example.com}, proxyProtocol: {version: V2},
    retryBudget: {percent: 20}}`
	for _, tc := range []struct {
		name   string
		rule   string // the rule's spec (host web), indented by two
		mesh   string // mesh config
		port   int32
		subset string
		noRule bool
		want   string // "" for none
	}{
		{name: "top level only", rule: "\n  trafficPolicy:" + full, port: 80, want: fullWant},
		{name: "port level sets loadBalancer only: nothing inherited",
			rule: "\n  trafficPolicy:" + full + `
    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {simple: LEAST_REQUEST}}`,
			port: 9090, want: `{loadBalancer: {simple: LEAST_REQUEST}}`},
		{name: "port level without loadBalancer: the default, not the top level's",
			rule: "\n  trafficPolicy:" + full + `
    portLevelSettings:
    - {port: {number: 9090}, connectionPool: {tcp: {maxConnections: 7}}}`,
			port: 9090, want: `{connectionPool: {tcp: {maxConnections: 7}}}`},
		{name: "another port's settings do not apply",
			rule: "\n  trafficPolicy:" + full + `
    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {simple: LEAST_REQUEST}}`,
			port: 80, want: fullWant},
		{name: "subset overrides per component, keeps the rest",
			rule: `
  trafficPolicy:
    loadBalancer: {simple: RANDOM}
    connectionPool: {tcp: {maxConnections: 100}}
    outlierDetection: {consecutive5xxErrors: 5}
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer: {simple: ROUND_ROBIN}
      tls: {mode: SIMPLE}
      proxyProtocol: {version: V1}`,
			port: 80, subset: "v2",
			want: `{loadBalancer: {simple: ROUND_ROBIN}, connectionPool: {tcp: {maxConnections: 100}},
        outlierDetection: {consecutive5xxErrors: 5}, tls: {mode: SIMPLE}, proxyProtocol: {version: V1}}`},
		{name: "subset port level replaces the four components, keeps the rule's proxyProtocol and retryBudget",
			rule: "\n  trafficPolicy:" + full + `
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      outlierDetection: {consecutive5xxErrors: 9}
      portLevelSettings:
      - {port: {number: 9090}, loadBalancer: {simple: LEAST_REQUEST}}`,
			port: 9090, subset: "v2",
			want: `{loadBalancer: {simple: LEAST_REQUEST}, proxyProtocol: {version: V2}, retryBudget: {percent: 20}}`},
		{name: "subset top level over the rule's port level",
			rule: `
  trafficPolicy:
    loadBalancer: {simple: RANDOM}
    connectionPool: {tcp: {maxConnections: 100}}
    portLevelSettings:
    - {port: {number: 9090}, outlierDetection: {consecutive5xxErrors: 3}}
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      tls: {mode: SIMPLE}`,
			port: 9090, subset: "v2",
			want: `{outlierDetection: {consecutive5xxErrors: 3}, tls: {mode: SIMPLE}}`},
		{name: "subset without a policy: the rule's port level",
			rule: `
  trafficPolicy:
    loadBalancer: {simple: RANDOM}
    portLevelSettings:
    - {port: {number: 9090}, connectionPool: {tcp: {maxConnections: 3}}}
  subsets:
  - {name: v1, labels: {version: v1}}`,
			port: 9090, subset: "v1", want: `{connectionPool: {tcp: {maxConnections: 3}}}`},
		{name: "rule without a policy, subset port level",
			rule: `
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer: {simple: RANDOM}
      portLevelSettings:
      - {port: {number: 9090}, tls: {mode: SIMPLE}}`,
			port: 9090, subset: "v2", want: `{tls: {mode: SIMPLE}}`},
		{name: "mesh default fills a port level policy",
			rule: `
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 100}}
    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {simple: LEAST_REQUEST}}`,
			mesh: `defaultTrafficPolicy: {connectionPool: {tcp: {maxConnections: 1}}, outlierDetection: {consecutive5xxErrors: 2}}`,
			port: 9090,
			want: `{loadBalancer: {simple: LEAST_REQUEST}, connectionPool: {tcp: {maxConnections: 1}}, outlierDetection: {consecutive5xxErrors: 2}}`},
		{name: "mesh default is applied before a subset's port level, which replaces it",
			rule: `
  trafficPolicy:
    loadBalancer: {simple: RANDOM}
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      portLevelSettings:
      - {port: {number: 9090}, loadBalancer: {simple: LEAST_REQUEST}}`,
			mesh: `defaultTrafficPolicy: {connectionPool: {tcp: {maxConnections: 1}}}`,
			port: 9090, subset: "v2", want: `{loadBalancer: {simple: LEAST_REQUEST}}`},
		{name: "mesh default survives a subset's top level policy",
			rule: `
  subsets:
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer: {simple: LEAST_REQUEST}`,
			mesh: `defaultTrafficPolicy: {connectionPool: {tcp: {maxConnections: 1}}}`,
			port: 9090, subset: "v2", want: `{loadBalancer: {simple: LEAST_REQUEST}, connectionPool: {tcp: {maxConnections: 1}}}`},
		{name: "mesh default without a rule", noRule: true,
			mesh: `defaultTrafficPolicy: {outlierDetection: {consecutive5xxErrors: 2}}`,
			port: 80, want: `{outlierDetection: {consecutive5xxErrors: 2}}`},
		{name: "nothing", noRule: true, port: 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.mesh != "" {
				cfg, err := meshconfig.Parse([]byte(tc.mesh))
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, WithMeshConfig(cfg))
			}
			s := NewStore(opts...)
			recs := []rec{add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80}, svcPort{name: "grpc", port: 9090}))}
			if !tc.noRule {
				var spec map[string]any
				if err := yaml.Unmarshal([]byte("  host: web"+tc.rule), &spec); err != nil {
					t.Fatal(err)
				}
				recs = append(recs, add("c1", istioObj(KindDestinationRule, "shop", "web", "2024-01-01T00:00:00Z", spec)))
			}
			applyAll(t, s, recs...)
			m := s.Snapshot()
			var r *DestinationRule
			if !tc.noRule {
				if r = m.DestinationRule("shop", m.Service(Hostname("shop", "web"))); r == nil {
					t.Fatal("no rule")
				}
			}
			got := m.TrafficPolicy(r, tc.port, tc.subset)
			if got == nil {
				got = &networkingv1.TrafficPolicy{}
			}
			want := &networkingv1.TrafficPolicy{}
			if tc.want != "" {
				js, err := yaml.YAMLToJSON([]byte(tc.want))
				if err != nil {
					t.Fatal(err)
				}
				if err := protojson.Unmarshal(js, want); err != nil {
					t.Fatal(err)
				}
			}
			// Settings left for other ports are documented as ignored.
			ignorePorts := protocmp.IgnoreFields(&networkingv1.TrafficPolicy{}, "port_level_settings")
			if diff := cmp.Diff(want, got, protocmp.Transform(), ignorePorts); diff != "" {
				t.Errorf("policy of port %d subset %q (-want +got):\n%s", tc.port, tc.subset, diff)
			}
		})
	}
}
