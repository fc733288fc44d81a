package ads

import (
	"context"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestLoadAssignmentsFollowNodeLocality: with a DestinationRule that has
// outlier detection (so the mesh default locality LB fails over), each
// sidecar's load assignment puts its own zone first, from the locality of
// its xDS node; two sidecars in one zone get the same response version.
func TestLoadAssignmentsFollowNodeLocality(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "web", 80))
		sl := slice("default", "web", 8080, "10.1.0.1", "10.1.0.2")
		eps := sl["endpoints"].([]any)
		eps[0].(map[string]any)["zone"] = "z1"
		eps[1].(map[string]any)["zone"] = "z2"
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", sl)
		f.publish(t, pb.Op_OP_ADD, "networking.istio.io", "DestinationRule", map[string]any{
			"metadata": map[string]any{"name": "web", "namespace": "default"},
			"spec":     map[string]any{"host": "web", "trafficPolicy": map[string]any{"outlierDetection": map[string]any{"consecutive5xxErrors": 5}}},
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const cluster = "outbound|80||web.default.svc.cluster.local"
	eds := func(id, zone string) (map[string]uint32, string) {
		t.Helper()
		c := dial(ctx, t, f.addr, &core.Node{Id: "sidecar~10.0.0.9~" + id + ".default~default.svc.cluster.local", Locality: &core.Locality{Zone: zone}})
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{cluster}})
		r := c.recv()
		if len(r.GetResources()) != 1 {
			t.Fatalf("%s: %d load assignments, want 1", id, len(r.GetResources()))
		}
		cla := &endpoint.ClusterLoadAssignment{}
		if err := r.GetResources()[0].UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		out := map[string]uint32{}
		for _, lle := range cla.GetEndpoints() {
			out[lle.GetLocality().GetZone()] = lle.GetPriority()
		}
		return out, r.GetVersionInfo()
	}
	a, va := eds("a-0", "z1")
	b, _ := eds("b-0", "z2")
	a2, va2 := eds("a-1", "z1")
	if diff := cmp.Diff(map[string]uint32{"z1": 0, "z2": 1}, a); diff != "" {
		t.Errorf("sidecar in z1: priorities by zone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]uint32{"z1": 1, "z2": 0}, b); diff != "" {
		t.Errorf("sidecar in z2: priorities by zone (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(a, a2); diff != "" || va != va2 {
		t.Errorf("two sidecars in z1: versions %s and %s, diff:\n%s", va, va2, diff)
	}
}
