package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func gatewayAPIObj(kind, ns, name string, spec map[string]any) *unstructuredObj {
	meta := map[string]any{"name": name, "namespace": ns, "creationTimestamp": "2024-01-01T00:00:00Z"}
	return &unstructuredObj{group: GroupGatewayAPI, kind: kind, namespace: ns, name: name,
		body: map[string]any{"apiVersion": GroupGatewayAPI + "/v1", "kind": kind, "metadata": meta, "spec": spec}}
}

// destinations lists the weighted destinations of a VirtualService's
// first http route as host:weight.
func destinations(v *VirtualService) []string {
	var out []string
	for _, d := range v.Spec.GetHttp()[len(v.Spec.GetHttp())-1].GetRoute() {
		out = append(out, d.GetDestination().GetHost()+":"+itoa(uint32(d.GetWeight())))
	}
	return out
}

// TestGatewayAPIRoutes: a GRPCRoute whose parent is a Service (GAMMA)
// becomes the mesh VirtualService of that Service's host, from the
// Gateway API; a parent Service that appears after the route is resolved
// without the route changing; deleting the route removes its
// VirtualService.
func TestGatewayAPIRoutes(t *testing.T) {
	s := NewStore()
	route := gatewayAPIObj("GRPCRoute", "ns", "split", map[string]any{
		"parentRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "web", "port": 80}},
		"rules": []any{map[string]any{"backendRefs": []any{
			map[string]any{"name": "web-v1", "port": 80, "weight": 80},
			map[string]any{"name": "web-v2", "port": 80, "weight": 20},
		}}},
	})
	applyAll(t, s,
		add("c1", service("ns", "web-v1", "10.0.0.2", svcPort{name: "grpc", port: 80})),
		add("c1", service("ns", "web-v2", "10.0.0.3", svcPort{name: "grpc", port: 80})),
		add("c1", route),
	)
	if got := vsNames(s.Snapshot().VirtualServices("ns", MeshGateway)); len(got) != 0 {
		t.Fatalf("VirtualServices before the parent Service exists: %v, want none", got)
	}

	applyAll(t, s, add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "grpc", port: 80})))
	host := Hostname("ns", "web")
	v := s.Snapshot().VirtualServiceFor("ns", host)
	if v == nil || v.Source != FromGatewayAPI {
		t.Fatalf("VirtualService for %s = %+v, want one from the Gateway API", host, v)
	}
	if v.Object() != "c1/GRPCRoute/ns/split" {
		t.Errorf("problems reported against %q, want the GRPCRoute", v.Object())
	}
	if diff := cmp.Diff([]string{"web-v1.ns.svc.cluster.local:80", "web-v2.ns.svc.cluster.local:20"}, destinations(v)); diff != "" {
		t.Errorf("destinations (-want +got):\n%s", diff)
	}

	applyAll(t, s, del("c1", route))
	if v := s.Snapshot().VirtualServiceFor("ns", host); v != nil {
		t.Errorf("VirtualService %s/%s left after the route was deleted", v.Namespace, v.Name)
	}
}

// TestGatewayAPIRoutesFollowRefs: a route's parent Service and
// ServiceEntry are looked up again whenever one comes, goes or (for an
// entry) changes its hosts, while updates that keep them change nothing;
// the route itself is never touched.
func TestGatewayAPIRoutesFollowRefs(t *testing.T) {
	s := NewStore()
	web := Hostname("ns", "web")
	applyAll(t, s,
		add("c1", service("ns", "web-v1", "10.0.0.2", svcPort{name: "http", port: 80})),
		add("c1", gatewayAPIObj("HTTPRoute", "ns", "to-web", map[string]any{
			"parentRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "web", "port": 80}},
			"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": "web-v1", "port": 80}}}},
		})),
		add("c1", gatewayAPIObj("HTTPRoute", "ns", "to-api", map[string]any{
			"parentRefs": []any{map[string]any{"group": "networking.istio.io", "kind": "ServiceEntry", "name": "api"}},
			"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": "web-v1", "port": 80}}}},
		})),
	)
	entry := func(hosts ...any) *unstructuredObj {
		return istioObj(KindServiceEntry, "ns", "api", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": hosts, "ports": []any{map[string]any{"number": 80, "name": "http", "protocol": "HTTP"}}, "resolution": "DNS",
		})
	}
	steps := []struct {
		name string
		recs []rec
		want map[string]bool // host → has a VirtualService from the Gateway API
	}{
		{"no parents yet", nil, map[string]bool{web: false, "a.example.com": false}},
		{"Service appears", []rec{add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80}))}, map[string]bool{web: true}},
		{"Service updated", []rec{upd("c1", service("ns", "web", "10.0.0.9", svcPort{name: "http", port: 80}))}, map[string]bool{web: true}},
		{"second cluster's copy", []rec{add("c2", service("ns", "web", "10.1.0.1", svcPort{name: "http", port: 80}))}, map[string]bool{web: true}},
		{"first copy deleted", []rec{del("c1", service("ns", "web", "10.0.0.9"))}, map[string]bool{web: true}},
		{"Service disappears", []rec{del("c2", service("ns", "web", "10.1.0.1"))}, map[string]bool{web: false}},
		{"Service back beside an endpoint change", []rec{
			add("c1", slice("ns", "web-v1-abc", "web-v1", []slicePort{named("http", 8080)}, ep{addr: "10.0.7.1"})),
			add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		}, map[string]bool{web: true}},
		{"ServiceEntry appears", []rec{add("c1", entry("a.example.com"))}, map[string]bool{"a.example.com": true, "b.example.com": false}},
		{"ServiceEntry hosts change", []rec{upd("c1", entry("b.example.com"))}, map[string]bool{"a.example.com": false, "b.example.com": true}},
		{"ServiceEntry updated, same hosts", []rec{upd("c1", entry("b.example.com"))}, map[string]bool{"b.example.com": true}},
		{"ServiceEntry disappears", []rec{del("c1", entry("b.example.com"))}, map[string]bool{"b.example.com": false, web: true}},
	}
	for _, st := range steps {
		applyAll(t, s, st.recs...)
		m := s.Snapshot()
		for host, want := range st.want {
			v := m.VirtualServiceFor("ns", host)
			if got := v != nil && v.Source == FromGatewayAPI; got != want {
				t.Errorf("%s: VirtualService from the Gateway API for %s: %v, want %v", st.name, host, got, want)
			}
		}
	}
}
