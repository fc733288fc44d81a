package xdsgen

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gocmp "github.com/google/go-cmp/cmp"
)

// TestRouterTargetPorts: a router binds each Gateway server on the target
// port of the Service port with the server's number, of the Services
// whose endpoints are the router's pod (Istio's mergeGateways and
// resolvePorts, for gateways that select by labels); a server port no such
// Service has is bound as it is. The listener (0.0.0.0_<bound port>) and
// the HTTP route configuration (http.<bound port>) are named by the bound
// port; HTTPS route configurations, virtual hosts and VirtualService port
// matches keep the server's port.
func TestRouterTargetPorts(t *testing.T) {
	const gatewaySvc = `apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.9.1
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
  - {name: http-alt, port: 81, targetPort: 8080}
---
apiVersion: v1
kind: Pod
metadata: {name: ingress-0, namespace: istio-system, labels: {istio: ingressgateway}}
status: {podIP: 10.244.5.1}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ingress-0, namespace: istio-system, labels: {kubernetes.io/service-name: istio-ingressgateway}}
addressType: IPv4
ports:
- {name: http, port: 8080}
- {name: https, port: 8443}
- {name: http-alt, port: 8080}
endpoints:
- addresses: ["10.244.5.1"]
  targetRef: {kind: Pod, namespace: istio-system, name: ingress-0}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.9.2
  ports:
  - {name: http, port: 8080}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: shop}
spec:
  hosts: [shop.example.com]
  gateways: [istio-system/ingress]
  http:
  - match: [{port: 80}]
    route: [{destination: {host: web}}]
  tcp:
  - route: [{destination: {host: web}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
`
	type listener struct {
		Port int32
		RDS  []string
	}
	for _, tc := range []struct {
		name    string
		servers string
		ip      string
		// want: listeners by name, and per route configuration its virtual
		// hosts with the number of routes each has.
		wantListeners map[string]listener
		wantRoutes    map[string]map[string]int
	}{
		{name: "HTTP server on the service's target port",
			servers: `  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["shop/shop.example.com"]`,
			ip:            "10.244.5.1",
			wantListeners: map[string]listener{"0.0.0.0_8080": {8080, []string{"http.8080"}}},
			wantRoutes:    map[string]map[string]int{"http.8080": {"shop.example.com:80": 1}}},
		{name: "without the pod's address the server port is bound",
			servers: `  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["shop/shop.example.com"]`,
			wantListeners: map[string]listener{"0.0.0.0_80": {80, []string{"http.80"}}},
			wantRoutes:    map[string]map[string]int{"http.80": {"shop.example.com:80": 1}}},
		{name: "HTTPS keeps the server port in its route name",
			servers: `  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["shop/shop.example.com"]
    tls: {mode: SIMPLE, credentialName: shop-cert}`,
			ip:            "10.244.5.1",
			wantListeners: map[string]listener{"0.0.0.0_8443": {8443, []string{"https.443.https.ingress.istio-system"}}},
			// The VirtualService's route matches port 80 only.
			wantRoutes: map[string]map[string]int{"https.443.https.ingress.istio-system": {"blackhole:443": 0}}},
		{name: "a port the service does not have is bound as it is",
			servers: `  - port: {number: 31400, name: tcp, protocol: TCP}
    hosts: ["*"]`,
			ip:            "10.244.5.1",
			wantListeners: map[string]listener{"0.0.0.0_31400": {31400, nil}},
			wantRoutes:    map[string]map[string]int{}},
		{name: "two server ports on one target port share its listener",
			servers: `  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["shop/shop.example.com"]
  - port: {number: 8080, name: http-alt, protocol: HTTP}
    hosts: ["shop/shop.example.com"]`,
			ip:            "10.244.5.1",
			wantListeners: map[string]listener{"0.0.0.0_8080": {8080, []string{"http.8080"}}},
			// The virtual host is named by the first server's port; the
			// route matching port 80 comes from that server only.
			wantRoutes: map[string]map[string]int{"http.8080": {"shop.example.com:80": 1}}},
		{name: "a second Service port to the same target port is not translated",
			// Istio keeps one service target per target port and protocol:
			// that of the first port (80).
			servers: `  - port: {number: 81, name: http, protocol: HTTP}
    hosts: ["shop/shop.example.com"]`,
			ip:            "10.244.5.1",
			wantListeners: map[string]listener{"0.0.0.0_81": {81, []string{"http.81"}}},
			wantRoutes:    map[string]map[string]int{"http.81": {"blackhole:81": 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gw.yaml")
			if err := os.WriteFile(path, []byte(gatewaySvc+tc.servers+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			m := manifestStore(t, path).Snapshot()
			if p := m.Problems(); len(p) > 0 {
				t.Fatalf("problems: %v", p)
			}
			p := Proxy{Generator: Envoy, Type: Router, Namespace: "istio-system", IP: tc.ip, Labels: map[string]string{"istio": "ingressgateway"}}
			gotListeners := map[string]listener{}
			gen := func(typeURL string) *Set {
				set, err := GenerateFor(m, p, typeURL)
				if err != nil {
					t.Fatal(err)
				}
				return set
			}
			for _, r := range gen(resource.ListenerType).Resources {
				if err := validateDeep(r.Msg); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
				l := r.Msg.(*listenerv3.Listener)
				got := listener{Port: int32(l.GetAddress().GetSocketAddress().GetPortValue())}
				for _, fc := range l.GetFilterChains() {
					for _, f := range fc.GetFilters() {
						if f.GetName() != hcmFilterName {
							continue
						}
						hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
						got.RDS = append(got.RDS, hcm.GetRds().GetRouteConfigName())
					}
				}
				gotListeners[r.Name] = got
			}
			if diff := gocmp.Diff(tc.wantListeners, gotListeners); diff != "" {
				t.Errorf("listeners (-want +got):\n%s", diff)
			}
			gotRoutes := map[string]map[string]int{}
			for _, r := range gen(resource.RouteType).Resources {
				if err := validateDeep(r.Msg); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
				vhs := map[string]int{}
				for _, vh := range r.Msg.(*routev3.RouteConfiguration).GetVirtualHosts() {
					vhs[vh.GetName()] = len(vh.GetRoutes())
				}
				gotRoutes[r.Name] = vhs
			}
			if diff := gocmp.Diff(tc.wantRoutes, gotRoutes); diff != "" {
				t.Errorf("route configurations (-want +got):\n%s", diff)
			}
			// Every RDS name a listener uses is served.
			for name, l := range gotListeners {
				for _, rds := range l.RDS {
					if _, ok := gotRoutes[rds]; !ok {
						t.Errorf("listener %s routes by %s, not among %v", name, rds, slices.Sorted(maps.Keys(gotRoutes)))
					}
				}
			}
		})
	}
}
