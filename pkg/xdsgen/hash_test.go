package xdsgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gocmp "github.com/google/go-cmp/cmp"
)

// TestRouteHashPolicy pins which consistent hash a route carries, as
// Istio's route builder picks it (hashForService, HashForHTTPDestination):
// unlike the cluster's traffic policy, the rule's top-level hash applies
// unless a more specific level sets a hash of its own (a subset's
// portLevelSettings, then the subset, then the rule's portLevelSettings),
// and portLevelSettings count only for a destination that names its port.
func TestRouteHashPolicy(t *testing.T) {
	const svcYAML = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  ports:
  - {name: http, port: 80}
  - {name: http-b, port: 9090}
`
	const rule = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  host: web
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
`
	vs := func(dest string) string {
		return `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: [web]
  http:
  - route: [{destination: ` + dest + `}]
`
	}
	for _, tc := range []struct {
		name string
		rest string // the rule's portLevelSettings and subsets, then more objects
		want string // the header hashed on, "" for none
	}{
		{name: "default route, port level without a hash keeps the rule's",
			rest: `    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {simple: LEAST_REQUEST}}
`, want: "x-user"},
		{name: "default route, port level sets no load balancer",
			rest: `    portLevelSettings:
    - {port: {number: 9090}, connectionPool: {tcp: {maxConnections: 5}}}
`, want: "x-user"},
		{name: "default route, port level hash",
			rest: `    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: x-port}}}
`, want: "x-port"},
		{name: "destination without a port ignores port level",
			rest: `    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: x-port}}}
---` + vs("{host: web}"), want: "x-user"},
		{name: "destination with a port takes port level",
			rest: `    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: x-port}}}
---` + vs("{host: web, port: {number: 9090}}"), want: "x-port"},
		{name: "subset hash over port level",
			rest: `    portLevelSettings:
    - {port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: x-port}}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-subset}}}
---` + vs("{host: web, subset: v1, port: {number: 9090}}"), want: "x-subset"},
		{name: "subset port level hash first",
			rest: `  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      loadBalancer: {consistentHash: {httpHeaderName: x-subset}}
      portLevelSettings:
      - {port: {number: 9090}, loadBalancer: {consistentHash: {httpHeaderName: x-subset-port}}}
---` + vs("{host: web, subset: v1, port: {number: 9090}}"), want: "x-subset-port"},
		{name: "subset without a hash keeps the rule's",
			rest: `  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy: {loadBalancer: {simple: RANDOM}}
---` + vs("{host: web, subset: v1}"), want: "x-user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.yaml")
			if err := os.WriteFile(path, []byte(svcYAML+"---"+rule+tc.rest), 0o644); err != nil {
				t.Fatal(err)
			}
			m := manifestStore(t, path).Snapshot()
			if p := m.Problems(); len(p) > 0 {
				t.Fatalf("problems: %v", p)
			}
			set, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "shop"}, resource.RouteType)
			if err != nil {
				t.Fatal(err)
			}
			var route *routev3.Route
			for _, r := range set.Resources {
				if err := validateDeep(r.Msg); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
				for _, vh := range r.Msg.(*routev3.RouteConfiguration).GetVirtualHosts() {
					if strings.HasPrefix(vh.GetName(), "web.shop.svc.cluster.local:9090") && len(vh.GetRoutes()) > 0 {
						route = vh.GetRoutes()[0]
					}
				}
			}
			if route == nil {
				t.Fatalf("no route for web:9090 among %v", names(set))
			}
			var got []string
			for _, hp := range route.GetRoute().GetHashPolicy() {
				got = append(got, hp.GetHeader().GetHeaderName())
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("headers hashed on (-want +got):\n%s", diff)
			}
		})
	}
}
