package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func nodeObj(name string, labels map[string]any) *unstructuredObj {
	return &unstructuredObj{kind: KindNode, name: name, body: map[string]any{"metadata": map[string]any{"name": name, "labels": labels}}}
}

func podOnNode(ns, name, node string, labels map[string]any) *unstructuredObj {
	return &unstructuredObj{kind: KindPod, namespace: ns, name: name, body: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
		"spec":     map[string]any{"nodeName": node},
	}}
}

func localitiesOf(m *Mesh, host string) map[string]string {
	out := map[string]string{}
	for _, e := range m.Service(host).Port(80).Endpoints {
		out[e.Address] = e.Locality().String()
	}
	return out
}

// TestEndpointLocality: an endpoint's locality is its Pod's locality
// label, else the topology labels of its Pod's node (or the slice
// endpoint's node), else the slice's zone; a Node label change moves the
// endpoints on it, and a Node status write that keeps its labels changes
// nothing.
func TestEndpointLocality(t *testing.T) {
	s := NewStore()
	zoneA := map[string]any{LabelRegion: "us-east1", LabelZone: "us-east1-a", LabelSubZone: "rack1"}
	sl := podSlice("ns", "web-abc", "web",
		ep{addr: "10.1.0.1", node: "labelled"}, ep{addr: "10.1.0.2", node: "on-node"},
		ep{addr: "10.1.0.3", node: "slice-node"}, ep{addr: "10.1.0.4", node: "nothing"})
	sl.Endpoints[2].NodeName = ptr("n2")
	sl.Endpoints[3].Zone = ptr("z9")
	applyAll(t, s,
		add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", nodeObj("n1", zoneA)),
		add("c1", nodeObj("n2", map[string]any{"failure-domain.beta.kubernetes.io/region": "eu", "failure-domain.beta.kubernetes.io/zone": "eu-b"})),
		add("c1", podOnNode("ns", "labelled", "n1", map[string]any{LabelLocalityLegacy: "r.z.s"})),
		add("c1", podOnNode("ns", "on-node", "n1", map[string]any{"app": "web"})),
		add("c1", sl),
	)
	host := Hostname("ns", "web")
	m1 := s.Snapshot()
	want := map[string]string{
		"10.1.0.1": "r/z/s", "10.1.0.2": "us-east1/us-east1-a/rack1",
		"10.1.0.3": "eu/eu-b/", "10.1.0.4": "/z9/",
	}
	if diff := cmp.Diff(want, localitiesOf(m1, host)); diff != "" {
		t.Fatalf("localities (-want +got):\n%s", diff)
	}
	applyAll(t, s, upd("c1", nodeObj("n1", zoneA)))
	if s.Snapshot().Service(host) != m1.Service(host) {
		t.Error("a Node update with the same labels rebuilt the service")
	}
	applyAll(t, s, upd("c1", nodeObj("n1", map[string]any{LabelRegion: "us-west1", LabelZone: "us-west1-b"})))
	m2 := s.Snapshot()
	want["10.1.0.2"] = "us-west1/us-west1-b/"
	if diff := cmp.Diff(want, localitiesOf(m2, host)); diff != "" {
		t.Fatalf("localities after the node's labels changed (-want +got):\n%s", diff)
	}
	applyAll(t, s, del("c1", nodeObj("n2", nil)))
	want["10.1.0.3"] = ""
	if diff := cmp.Diff(want, localitiesOf(s.Snapshot(), host)); diff != "" {
		t.Fatalf("localities after a node went (-want +got):\n%s", diff)
	}
}

// TestWorkloadEntryLocality: a WorkloadEntry's locality field, else its
// locality label; pods a ServiceEntry selects take their node's.
func TestWorkloadEntryLocality(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", istioObj(KindServiceEntry, "ns", "vm", "", map[string]any{
			"hosts": []any{"vm.example.com"}, "location": "MESH_INTERNAL", "resolution": "STATIC",
			"ports":            []any{map[string]any{"number": 80, "name": "http", "protocol": "HTTP"}},
			"workloadSelector": map[string]any{"labels": map[string]any{"app": "vm"}},
		})),
		add("c1", istioObj(KindWorkloadEntry, "ns", "a", "", map[string]any{"address": "10.2.0.1", "locality": "r1/z1/s1", "labels": map[string]any{"app": "vm", LabelLocality: "x.y"}})),
		add("c1", istioObj(KindWorkloadEntry, "ns", "b", "", map[string]any{"address": "10.2.0.2", "labels": map[string]any{"app": "vm", LabelLocality: "r2.z2"}})),
		add("c1", nodeObj("n1", map[string]any{LabelRegion: "r3", LabelZone: "z3"})),
		add("c1", &unstructuredObj{kind: KindPod, namespace: "ns", name: "p", body: map[string]any{
			"metadata": map[string]any{"name": "p", "namespace": "ns", "labels": map[string]any{"app": "vm"}},
			"spec":     map[string]any{"nodeName": "n1"}, "status": map[string]any{"podIP": "10.2.0.3"},
		}}),
	)
	want := map[string]string{"10.2.0.1": "r1/z1/s1", "10.2.0.2": "r2/z2/", "10.2.0.3": "r3/z3/"}
	if diff := cmp.Diff(want, localitiesOf(s.Snapshot(), "vm.example.com")); diff != "" {
		t.Fatalf("localities (-want +got):\n%s", diff)
	}
	applyAll(t, s, upd("c1", nodeObj("n1", map[string]any{LabelRegion: "r4"})))
	want["10.2.0.3"] = "r4//"
	if diff := cmp.Diff(want, localitiesOf(s.Snapshot(), "vm.example.com")); diff != "" {
		t.Fatalf("localities after the node changed (-want +got):\n%s", diff)
	}
}
