package xdsgen

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// localityProxies are the clients of the locality golden: where they run
// and which pod they are.
var localityProxies = []struct {
	name  string
	proxy Proxy
}{
	// In us-east-a/rack1 (from its node), the pod with version v1.
	{"east-a", Proxy{Generator: Envoy, Namespace: "app", Locality: model.Locality{Region: "us-east", Zone: "us-east-a", SubZone: "rack1"}, IP: "10.1.0.1"}},
	// In eu-west, no pod of the mesh: failoverPriority compares only the
	// topology labels its locality gives it (Istio adds them to a proxy's).
	{"eu", Proxy{Generator: Envoy, Namespace: "app", Locality: model.Locality{Region: "eu-west", Zone: "eu-west-a"}}},
	// No node locality: the pod 10.1.0.4 (us-west/us-west-a, version v1) gives it.
	{"from-workload", Proxy{Generator: Envoy, Namespace: "app", IP: "10.1.0.4"}},
}

// TestGoldenLocality pins, per proxy of localityProxies, the load
// assignments and the clusters' locality LB config generated from
// testdata/locality/locality.yaml, in testdata/locality/locality.json.
// Regenerate with -update and review the diff.
func TestGoldenLocality(t *testing.T) {
	in := filepath.Join("testdata", "locality", "locality.yaml")
	m := manifestStore(t, in).Snapshot()
	out := map[string]any{}
	for _, pc := range localityProxies {
		eds, err := GenerateFor(m, pc.proxy, resource.EndpointType)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range eds.Resources {
			if err := validateDeep(r.Msg); err != nil {
				t.Errorf("%s %s: %v", pc.name, r.Name, err)
			}
		}
		var las any
		if err := json.Unmarshal(goldenJSON(t, eds), &las); err != nil {
			t.Fatal(err)
		}
		cds, err := GenerateFor(m, pc.proxy, resource.ClusterType)
		if err != nil {
			t.Fatal(err)
		}
		lbConfig := map[string]any{}
		for _, r := range cds.Resources {
			if err := validateDeep(r.Msg); err != nil {
				t.Errorf("%s %s: %v", pc.name, r.Name, err)
			}
			c := r.Msg.(*clusterv3.Cluster)
			if !strings.HasPrefix(c.Name, "outbound|") || c.GetCommonLbConfig().GetLocalityConfigSpecifier() == nil {
				continue
			}
			b, err := protojson.Marshal(c.GetCommonLbConfig())
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			lbConfig[c.Name] = v
		}
		out[pc.name] = map[string]any{"loadAssignments": las, "clusterLocalityLbConfig": lbConfig}
	}
	out["ignored"] = m.Problems()
	compareGolden(t, filepath.Join("testdata", "locality", "locality.json"), out)
}

// TestLocalitySharing: load assignments are shared by every proxy unless
// a rule or the mesh config makes them depend on the proxy, and then by
// every proxy with the same locality and rules; the services whose load
// assignments do not depend on the proxy keep the shared resources.
func TestLocalitySharing(t *testing.T) {
	m := manifestStore(t, filepath.Join("testdata", "locality", "locality.yaml")).Snapshot()
	gen := func(p Proxy) *Set {
		t.Helper()
		set, err := GenerateFor(m, p, resource.EndpointType)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	east := model.Locality{Region: "us-east", Zone: "us-east-a", SubZone: "rack1"}
	base := gen(Proxy{Generator: Envoy})
	a := gen(Proxy{Generator: Envoy, Namespace: "app", Locality: east, IP: "10.1.0.1"})
	if b := gen(Proxy{Generator: GRPC, Namespace: "app", Locality: east, IP: "10.1.0.1"}); b != a {
		t.Error("an Envoy and a gRPC proxy with the same locality, labels and rules got different sets")
	}
	// Same locality and the same labels failoverPriority reads (10.1.0.3
	// is version v1 too): shared, though the pods differ.
	if b := gen(Proxy{Generator: Envoy, Namespace: "app", Locality: east, IP: "10.1.0.3"}); b != a {
		t.Error("a proxy differing only in what no load assignment reads got another set")
	}
	if c := gen(Proxy{Generator: Envoy, Namespace: "app", Locality: east, IP: "10.1.0.2"}); c == a {
		t.Error("a proxy whose version label differs shares the set of failoverPriority's v1 proxies")
	}
	for _, name := range []string{"outbound|80||plain.app.svc.cluster.local", "outbound|80||nooutlier.app.svc.cluster.local", "outbound|80||disabled.app.svc.cluster.local"} {
		if a.Get(name) != base.Get(name) {
			t.Errorf("%s: not the shared resource", name)
		}
	}
	if a.Get("outbound|80||failover.app.svc.cluster.local") == base.Get("outbound|80||failover.app.svc.cluster.local") {
		t.Error("failover: the shared resource, want the proxy's own")
	}

	// Without rules that localize, every proxy gets the shared set.
	plain := manifestStore(t, filepath.Join("testdata", "locality", "locality.yaml"))
	if err := plain.Apply(deleteRecord("networking.istio.io", "DestinationRule", "app", "failover"), 1000); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"distribute", "priority", "disabled"} {
		if err := plain.Apply(deleteRecord("networking.istio.io", "DestinationRule", "app", name), uint64(1001+i)); err != nil {
			t.Fatal(err)
		}
	}
	pm := plain.Snapshot()
	b1, err := GenerateFor(pm, Proxy{Generator: Envoy}, resource.EndpointType)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := GenerateFor(pm, Proxy{Generator: Envoy, Namespace: "app", Locality: east, IP: "10.1.0.1"}, resource.EndpointType)
	if err != nil {
		t.Fatal(err)
	}
	if b1 != b2 {
		t.Error("a mesh whose rules do not localize gave a proxy its own set")
	}
}

func deleteRecord(group, kind, ns, name string) *pb.ChangeRecord {
	return &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_DELETE, Ref: &pb.ObjectRef{Group: group, Version: "v1", Kind: kind, Namespace: ns, Name: name}}
}

// TestMeshLocalityLbSetting: the mesh config's localityLbSetting applies
// to destinations whose rule sets none, also without any rule; disabled,
// it turns off the default failover outlier detection brings.
func TestMeshLocalityLbSetting(t *testing.T) {
	path := filepath.Join("testdata", "locality", "locality.yaml")
	east := Proxy{Generator: Envoy, Namespace: "app", Locality: model.Locality{Region: "us-east", Zone: "us-east-a", SubZone: "rack1"}}
	priorities := func(mc string, host string, od bool) []uint32 {
		t.Helper()
		cfg, err := meshconfig.Parse([]byte(mc))
		if err != nil {
			t.Fatal(err)
		}
		s := manifestStore(t, path, model.WithMeshConfig(cfg))
		seq := s.AppliedSeq()
		// With od, a rule for plain with outlier detection and no
		// localityLbSetting.
		rule := `{"metadata":{"name":"od","namespace":"app"},"spec":{"host":"plain","trafficPolicy":{"outlierDetection":{"consecutive5xxErrors":3}}}}`
		if od {
			if err := s.Apply(&pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte(rule),
				Ref: &pb.ObjectRef{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule", Namespace: "app", Name: "od"}}, seq+1); err != nil {
				t.Fatal(err)
			}
		}
		set, err := GenerateFor(s.Snapshot(), east, resource.EndpointType)
		if err != nil {
			t.Fatal(err)
		}
		r := set.Get(host)
		if err := validateDeep(r.Msg); err != nil {
			t.Fatal(err)
		}
		var out []uint32
		for _, lle := range r.Msg.(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
			out = append(out, lle.GetPriority()*1000+lle.GetLoadBalancingWeight().GetValue())
		}
		return out
	}
	// Localities in order: eu-west, us-east-a/rack1 (2 endpoints),
	// us-east-a/rack2, us-east-b, us-west. Entries are priority*1000+weight.
	for _, tc := range []struct {
		name, mesh, host string
		od               bool
		want             []uint32
	}{
		{"default: failover with outlier detection", "", "outbound|80||plain.app.svc.cluster.local", true, []uint32{3001, 2, 1001, 2001, 3001}},
		{"default without outlier detection: nothing", "", "outbound|80||plain.app.svc.cluster.local", false, []uint32{1, 2, 1, 1, 1}},
		{"mesh disabled: no failover", "localityLbSetting: {enabled: false}", "outbound|80||plain.app.svc.cluster.local", true, []uint32{1, 2, 1, 1, 1}},
		{"mesh distribute, no rule", `localityLbSetting: {distribute: [{from: "us-east/*", to: {"us-west/*": 100}}]}`, "outbound|80||plain.app.svc.cluster.local", false, []uint32{100}},
		{"the rule's setting wins over the mesh's", `localityLbSetting: {distribute: [{from: "us-east/*", to: {"us-west/*": 100}}]}`, "outbound|80||failover.app.svc.cluster.local", false, []uint32{3001, 2, 1001, 2001, 4001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, priorities(tc.mesh, tc.host, tc.od)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestLocalityAfterEndpointChange: a localized service stays localized in
// the next mesh when only its endpoints changed (the per-mesh index of
// such services survives endpoint changes with the config memo).
func TestLocalityAfterEndpointChange(t *testing.T) {
	s := manifestStore(t, filepath.Join("testdata", "locality", "locality.yaml"))
	east := Proxy{Generator: Envoy, Namespace: "app", Locality: model.Locality{Region: "us-east", Zone: "us-east-a", SubZone: "rack1"}}
	const name = "outbound|80||failover.app.svc.cluster.local"
	priorities := func() []uint32 {
		t.Helper()
		set, err := GenerateFor(s.Snapshot(), east, resource.EndpointType)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint32
		for _, lle := range set.Get(name).Msg.(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
			out = append(out, lle.GetPriority())
		}
		return out
	}
	if diff := cmp.Diff([]uint32{3, 0, 1, 2, 4}, priorities()); diff != "" {
		t.Fatalf("before (-want +got):\n%s", diff)
	}
	sl := `{"metadata":{"name":"failover-1","namespace":"app","labels":{"kubernetes.io/service-name":"failover"}},"addressType":"IPv4",
		"ports":[{"name":"http","port":8080,"protocol":"TCP"}],
		"endpoints":[{"addresses":["10.1.0.1"],"nodeName":"n-east-a"},{"addresses":["10.1.0.4"],"nodeName":"n-west"}]}`
	if err := s.Apply(&pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Object: []byte(sl),
		Ref: &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "app", Name: "failover-1"}}, s.AppliedSeq()+1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint32{0, 1}, priorities()); diff != "" {
		t.Errorf("after an endpoint change (-want +got):\n%s", diff)
	}
}

// TestMeshLocalityLbSettingOnClusters: a mesh-wide localityLbSetting
// reaches the clusters as well as the load assignments, also for a proxy
// a Sidecar scopes. Envoy reads a load assignment's locality weights only
// on a cluster with locality_weighted_lb_config, so weights without it do
// nothing.
func TestMeshLocalityLbSettingOnClusters(t *testing.T) {
	path := filepath.Join("testdata", "locality", "locality.yaml")
	east := Proxy{Generator: Envoy, Namespace: "app", Locality: model.Locality{Region: "us-east", Zone: "us-east-a", SubZone: "rack1"}}
	for _, tc := range []struct {
		name, mesh string
		want       bool
	}{
		{"default: no weights, no config", "", false},
		{"mesh distribute", `localityLbSetting: {distribute: [{from: "us-east/*", to: {"us-west/*": 100}}]}`, true},
		{"mesh distribute, disabled", `localityLbSetting: {enabled: false, distribute: [{from: "us-east/*", to: {"us-west/*": 100}}]}`, false},
	} {
		for _, sidecar := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sidecar=%v", tc.name, sidecar), func(t *testing.T) {
				cfg, err := meshconfig.Parse([]byte(tc.mesh))
				if err != nil {
					t.Fatal(err)
				}
				s := manifestStore(t, path, model.WithMeshConfig(cfg))
				if sidecar {
					sc := `{"metadata":{"name":"default","namespace":"app"},"spec":{"egress":[{"hosts":["./*"]}]}}`
					if err := s.Apply(&pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte(sc),
						Ref: &pb.ObjectRef{Group: "networking.istio.io", Version: "v1", Kind: "Sidecar", Namespace: "app", Name: "default"}}, s.AppliedSeq()+1); err != nil {
						t.Fatal(err)
					}
				}
				set, err := GenerateFor(s.Snapshot(), east, resource.ClusterType)
				if err != nil {
					t.Fatal(err)
				}
				r := set.Get("outbound|80||plain.app.svc.cluster.local")
				if r == nil {
					t.Fatal("no cluster outbound|80||plain.app.svc.cluster.local")
				}
				if err := validateDeep(r.Msg); err != nil {
					t.Fatal(err)
				}
				got := r.Msg.(*clusterv3.Cluster).GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil
				if got != tc.want {
					t.Errorf("locality_weighted_lb_config set: %v, want %v", got, tc.want)
				}
			})
		}
	}
}
