package xdsgen

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestSidecarScopeSendsNothingForOtherNamespaces: a proxy whose Sidecar
// limits egress to its own namespace gets no clusters of others, and a
// change in another namespace leaves every set it gets at the same version
// (the frontend then sends it no response). A namespace without a Sidecar
// of its own takes the root namespace's.
func TestSidecarScopeSendsNothingForOtherNamespaces(t *testing.T) {
	s := manifestStore(t, "testdata/istio/sidecar.yaml")
	scoped := Proxy{Generator: Envoy, Namespace: "default"}
	grpcScoped := Proxy{Generator: GRPC, Namespace: "default"}
	before := map[string]string{}
	m := s.Snapshot()
	for _, p := range []Proxy{scoped, grpcScoped} {
		for _, typeURL := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
			set, err := GenerateFor(m, p, typeURL)
			if err != nil {
				t.Fatal(err)
			}
			before[p.Generator.String()+typeURL] = set.Version
		}
	}
	// A namespace without its own Sidecar: the root one's "./*" means it.
	set, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "other"}, resource.ClusterType)
	if err != nil {
		t.Fatal(err)
	}
	if got := outboundNames(set); !slices.Equal(got, []string{"outbound|80||api.other.svc.cluster.local"}) {
		t.Errorf("proxy in other sees %v", got)
	}

	// other/api gains a port.
	obj, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "api", "namespace": "other"},
		"spec": map[string]any{"clusterIP": "10.96.1.4", "ports": []any{map[string]any{"name": "http", "port": 80}, map[string]any{"name": "grpc", "port": 9090}}},
	})
	rec := &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Object: obj, Ref: &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: "other", Name: "api"}}
	if err := s.Apply(rec, s.AppliedSeq()+1); err != nil {
		t.Fatal(err)
	}
	m2 := s.Snapshot()
	for _, p := range []Proxy{scoped, grpcScoped} {
		for _, typeURL := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
			set, err := GenerateFor(m2, p, typeURL)
			if err != nil {
				t.Fatal(err)
			}
			if set.Version != before[p.Generator.String()+typeURL] {
				t.Errorf("%v %s changed for a change outside its scope", p.Generator, typeURL)
			}
		}
	}
	if set, _ := GenerateFor(m2, Proxy{Generator: Envoy, Namespace: "other"}, resource.ClusterType); len(outboundNames(set)) != 2 {
		t.Errorf("proxy in other sees %v after the change", outboundNames(set))
	}
}

func outboundNames(set *Set) []string {
	var out []string
	for _, r := range set.Resources {
		if len(r.Name) > 9 && r.Name[:9] == "outbound|" {
			out = append(out, r.Name)
		}
	}
	return out
}
