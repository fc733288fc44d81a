package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func podObj(ns, name string, labels map[string]any) *unstructuredObj {
	return &unstructuredObj{kind: KindPod, namespace: ns, name: name, body: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
	}}
}

func istioObj(kind, ns, name, created string, spec map[string]any) *unstructuredObj {
	meta := map[string]any{"name": name, "namespace": ns}
	if created != "" {
		meta["creationTimestamp"] = created
	}
	return &unstructuredObj{group: GroupNetworking, kind: kind, namespace: ns, name: name, body: map[string]any{"metadata": meta, "spec": spec}}
}

// podSlice is a slice whose endpoints name pods: ep.node is the pod name.
func podSlice(ns, name, svc string, eps ...ep) *discoveryv1.EndpointSlice {
	sl := slice(ns, name, svc, []slicePort{named("http", 8080)}, eps...)
	for i := range sl.Endpoints {
		sl.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: eps[i].node}
		sl.Endpoints[i].NodeName = nil
	}
	return sl
}

func labelsOf(m *Mesh, host string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, e := range m.Service(host).Port(80).Endpoints {
		out[e.Address] = e.Labels
	}
	return out
}

func TestPodLabelsOnEndpoints(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", podObj("ns", "web-1", map[string]any{"version": "v1"})),
		add("c1", podSlice("ns", "web-abc", "web", ep{addr: "10.1.0.1", node: "web-1"}, ep{addr: "10.1.0.2", node: "web-2"})),
	)
	host := Hostname("ns", "web")
	m1 := s.Snapshot()
	want := map[string]map[string]string{"10.1.0.1": {"version": "v1"}, "10.1.0.2": nil}
	if diff := cmp.Diff(want, labelsOf(m1, host)); diff != "" {
		t.Fatalf("labels (-want +got):\n%s", diff)
	}
	// A pod arriving after its slice, and a label change, move labels.
	applyAll(t, s,
		add("c1", podObj("ns", "web-2", map[string]any{"version": "v2"})),
		upd("c1", podObj("ns", "web-1", map[string]any{"version": "v2"})),
	)
	m2 := s.Snapshot()
	want = map[string]map[string]string{"10.1.0.1": {"version": "v2"}, "10.1.0.2": {"version": "v2"}}
	if diff := cmp.Diff(want, labelsOf(m2, host)); diff != "" {
		t.Fatalf("labels after change (-want +got):\n%s", diff)
	}
	if m1.Service(host) == m2.Service(host) || m1.Service(host).config != m2.Service(host).config {
		t.Error("a label change must make a new service version sharing its config memo")
	}
	// An update that changes no label keeps the service.
	applyAll(t, s, upd("c1", podObj("ns", "web-1", map[string]any{"version": "v2"})))
	if s.Snapshot().Service(host) != m2.Service(host) {
		t.Error("a pod update without label change rebuilt the service")
	}
	applyAll(t, s, del("c1", podObj("ns", "web-1", nil)))
	if got := labelsOf(s.Snapshot(), host)["10.1.0.1"]; got != nil {
		t.Errorf("deleted pod's labels stay: %v", got)
	}
}

func TestDestinationRulePrecedence(t *testing.T) {
	dr := func(ns, name, host string, extra map[string]any) rec {
		spec := map[string]any{"host": host, "subsets": []any{map[string]any{"name": name, "labels": map[string]any{"v": name}}}}
		for k, v := range extra {
			spec[k] = v
		}
		return add("c1", istioObj(KindDestinationRule, ns, name, "2024-01-01T00:00:00Z", spec))
	}
	s := NewStore()
	applyAll(t, s,
		add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		dr("istio-system", "root", "*.svc.cluster.local", nil),
		dr("shop", "svcns", "web", nil),
		dr("client", "local", "*.shop.svc.cluster.local", nil),
		dr("private", "hidden", "web.shop.svc.cluster.local", map[string]any{"exportTo": []any{"."}}),
	)
	m := s.Snapshot()
	web := m.Service(Hostname("shop", "web"))
	for _, tc := range []struct{ ns, want string }{
		{"client", "local"},   // the proxy's own namespace first, even a wildcard
		{"other", "svcns"},    // then the service's namespace
		{"private", "hidden"}, // a private rule in the proxy's namespace
		{"istio-system", "svcns"},
	} {
		if r := m.DestinationRule(tc.ns, web); r == nil || r.Name != tc.want {
			t.Errorf("proxy in %s: rule %v, want %s", tc.ns, r, tc.want)
		}
	}
	if got := web.Subsets(); !cmp.Equal(got, []string{"svcns", "local", "root", "hidden"}) {
		t.Errorf("subsets %v", got)
	}
	if m.DestinationRuleView("other") != "other" {
		t.Error("with a private rule, views must be per namespace")
	}
	// The service-namespace rule gone, the root rule applies.
	applyAll(t, s, del("c1", istioObj(KindDestinationRule, "shop", "svcns", "", nil)))
	if r := s.Snapshot().DestinationRule("other", s.Snapshot().Service(web.Hostname)); r == nil || r.Name != "root" {
		t.Errorf("after delete: %v, want root", r)
	}
}

func TestDestinationRuleProblems(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", istioObj(KindDestinationRule, "shop", "a", "2024-01-01T00:00:00Z", map[string]any{
			"host": "web", "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": "RANDOM"},
				"portLevelSettings": []any{map[string]any{"port": map[string]any{"number": 81}}}},
			"subsets": []any{map[string]any{"name": "v1", "labels": map[string]any{"v": "1"}}, map[string]any{"name": "nolabels"}},
		})),
		add("c1", istioObj(KindDestinationRule, "shop", "b", "2024-01-02T00:00:00Z", map[string]any{
			"host": "web.shop.svc.cluster.local", "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": "ROUND_ROBIN"}},
			"subsets": []any{map[string]any{"name": "v1", "labels": map[string]any{"v": "x"}}, map[string]any{"name": "v2", "labels": map[string]any{"v": "2"}}},
		})),
	)
	m := s.Snapshot()
	web := m.Service(Hostname("shop", "web"))
	r := m.DestinationRule("shop", web)
	if r == nil || len(r.From) != 2 || r.Spec.GetTrafficPolicy().GetLoadBalancer().GetSimple().String() != "RANDOM" {
		t.Fatalf("merged rule %+v", r)
	}
	if got := web.Subsets(); !cmp.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("subsets %v", got)
	}
	want := []Problem{
		{Object: "c1/DestinationRule/shop/a", Reason: "portLevelSettings: port 81 is not a port of web.shop.svc.cluster.local: ignored"},
		{Object: "c1/DestinationRule/shop/a", Reason: `subset "nolabels" has no labels: ignored`},
		{Object: "c1/DestinationRule/shop/b", Reason: "another DestinationRule for host web.shop.svc.cluster.local in namespace shop (shop/a) is older: its trafficPolicy wins, this one's is ignored"},
		{Object: "c1/DestinationRule/shop/b", Reason: `subset "v1" already defined for host web.shop.svc.cluster.local by shop/a: ignored`},
	}
	if diff := cmp.Diff(want, m.Problems()); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestServiceEntries(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", istioObj(KindServiceEntry, "ext", "api", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": []any{"api.example.com"}, "addresses": []any{"240.0.0.1"}, "location": "MESH_INTERNAL",
			"ports":      []any{map[string]any{"number": 443, "name": "grpc", "protocol": "GRPC", "targetPort": 8443}},
			"resolution": "STATIC",
			"endpoints": []any{
				map[string]any{"address": "10.9.0.1", "labels": map[string]any{"v": "1"}, "locality": "r1/z1/s1", "weight": 3},
				map[string]any{"address": "10.9.0.2", "ports": map[string]any{"grpc": 9443}, "network": "n2"},
				map[string]any{"address": "not-an-ip"},
			},
		})),
		add("c1", istioObj(KindServiceEntry, "ext", "dns", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": []any{"db.example.com"}, "ports": []any{map[string]any{"number": 5432, "name": "tcp", "protocol": "TCP"}},
			"resolution": "DNS",
		})),
		add("c1", istioObj(KindServiceEntry, "ext", "sel", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": []any{"vm.example.com"}, "ports": []any{map[string]any{"number": 80, "name": "http", "protocol": "HTTP"}},
			"resolution": "STATIC", "workloadSelector": map[string]any{"labels": map[string]any{"app": "vm"}},
		})),
		add("c1", istioObj(KindWorkloadEntry, "ext", "vm-1", "", map[string]any{
			"address": "10.8.0.1", "labels": map[string]any{"app": "vm"}, "ports": map[string]any{"http": 8080},
		})),
		add("c1", istioObj(KindServiceEntry, "ext2", "dup", "2024-02-01T00:00:00Z", map[string]any{
			"hosts": []any{"api.example.com"}, "ports": []any{map[string]any{"number": 80, "name": "http"}}, "resolution": "DNS",
		})),
	)
	m := s.Snapshot()
	api := m.Service("api.example.com")
	if api == nil || api.Registry != ServiceEntryRegistry || api.ClusterIP != "240.0.0.1" || api.MeshExternal || api.Namespace != "ext" {
		t.Fatalf("api %+v", api)
	}
	wantEps := []Endpoint{
		{Address: "10.9.0.1", Port: 8443, ClusterID: "c1", Labels: map[string]string{"v": "1"}, Region: "r1", Zone: "z1", SubZone: "s1", Weight: 3},
		{Address: "10.9.0.2", Port: 9443, ClusterID: "c1", Network: "n2"},
	}
	if diff := cmp.Diff(wantEps, api.Port(443).Endpoints, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("api endpoints (-want +got):\n%s", diff)
	}
	db := m.Service("db.example.com")
	if db.Resolution != DNSLB || !db.MeshExternal || len(db.Port(5432).Endpoints) != 1 || db.Port(5432).Endpoints[0].Address != "db.example.com" {
		t.Errorf("db %+v %+v", db, db.Port(5432).Endpoints)
	}
	vm := m.Service("vm.example.com")
	if eps := vm.Port(80).Endpoints; len(eps) != 1 || eps[0].Address != "10.8.0.1" || eps[0].Port != 8080 {
		t.Errorf("vm endpoints %+v", eps)
	}
	if len(m.Problems()) != 2 {
		t.Errorf("problems %+v", m.Problems())
	}
	// The WorkloadEntry's label change removes it from the selection.
	applyAll(t, s, upd("c1", istioObj(KindWorkloadEntry, "ext", "vm-1", "", map[string]any{"address": "10.8.0.1", "labels": map[string]any{"app": "other"}})))
	if eps := s.Snapshot().Service("vm.example.com").Port(80).Endpoints; len(eps) != 0 {
		t.Errorf("vm endpoints after relabel %+v", eps)
	}
	if s.Snapshot().Service("api.example.com") != api {
		t.Error("an unchanged ServiceEntry service was rebuilt")
	}
}
