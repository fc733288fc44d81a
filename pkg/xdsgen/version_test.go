package xdsgen

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

type genType struct {
	gen     Generator
	typeURL string
}

func allGenTypes() []genType {
	var out []genType
	for _, g := range []Generator{Envoy, GRPC} {
		for _, t := range TypeURLs() {
			out = append(out, genType{g, t})
		}
	}
	return out
}

func TestVersionsAreContentHashes(t *testing.T) {
	recs := meshRecords(t, 5)
	// Two replicas: separate stores, separate meshes, nothing shared.
	a, b := storeWith(t, recs).Snapshot(), storeWith(t, recs).Snapshot()
	for _, gt := range allGenTypes() {
		sa, sb := generate(t, a, gt.gen, gt.typeURL), generate(t, b, gt.gen, gt.typeURL)
		if sa == sb {
			t.Fatalf("%v %s: two meshes share a set; the replicas are not independent", gt.gen, gt.typeURL)
		}
		if sa.Version != sb.Version {
			t.Errorf("%v %s: set versions %s and %s differ", gt.gen, gt.typeURL, sa.Version, sb.Version)
		}
		if diff := cmp.Diff(names(sa), names(sb)); diff != "" {
			t.Errorf("%v %s: names differ:\n%s", gt.gen, gt.typeURL, diff)
		}
		for i, ra := range sa.Resources {
			rb := sb.Resources[i]
			if ra.Version != rb.Version || !bytes.Equal(ra.Any.Value, rb.Any.Value) {
				t.Errorf("%v %s %s: versions %s/%s or bytes differ", gt.gen, gt.typeURL, ra.Name, ra.Version, rb.Version)
			}
		}
	}

	// One endpoint changes in replica a: exactly that load assignment and the
	// EDS set version change; nothing else does.
	sa := storeWith(t, recs)
	before := sa.Snapshot()
	beforeSets := make(map[genType]*Set)
	for _, gt := range allGenTypes() {
		beforeSets[gt] = generate(t, before, gt.gen, gt.typeURL)
	}
	if err := sa.Apply(record(t, "c2", pb.Op_OP_UPDATE, k8sSlice("ns", "svc-3-grpc", "svc-3", "grpc", 9090, "zone-c2", "10.2.3.1", "10.2.3.99")), uint64(len(recs)+1)); err != nil {
		t.Fatal(err)
	}
	after := sa.Snapshot()
	const changed = "outbound|9090||svc-3.ns.svc.cluster.local"
	for _, gt := range allGenTypes() {
		old, cur := beforeSets[gt], generate(t, after, gt.gen, gt.typeURL)
		if gt.typeURL != resource.EndpointType {
			if cur != old {
				t.Errorf("%v %s: an endpoint change rebuilt the set", gt.gen, gt.typeURL)
			}
			continue
		}
		if cur.Version == old.Version {
			t.Errorf("EDS set version unchanged after an endpoint change")
		}
		for _, r := range cur.Resources {
			same := r.Version == old.Get(r.Name).Version
			if same == (r.Name == changed) {
				t.Errorf("%s: version changed = %v, want %v", r.Name, !same, r.Name == changed)
			}
		}
	}
	// ...and the other replica, given the same change, agrees.
	sb := storeWith(t, recs)
	if err := sb.Apply(record(t, "c2", pb.Op_OP_UPDATE, k8sSlice("ns", "svc-3-grpc", "svc-3", "grpc", 9090, "zone-c2", "10.2.3.1", "10.2.3.99")), uint64(len(recs)+1)); err != nil {
		t.Fatal(err)
	}
	if va, vb := generate(t, after, GRPC, resource.EndpointType).Version, generate(t, sb.Snapshot(), GRPC, resource.EndpointType).Version; va != vb {
		t.Errorf("replicas disagree after the same change: %s vs %s", va, vb)
	}
}

func TestMemoization(t *testing.T) {
	recs := meshRecords(t, 10)
	s := storeWith(t, recs)
	m := s.Snapshot()

	// First generation marshals each resource once: 10 services x 2 ports.
	tests := []struct {
		name         string
		gen          Generator
		typeURL      string
		wantMarshals uint64
	}{
		{name: "envoy EDS", gen: Envoy, typeURL: resource.EndpointType, wantMarshals: 20},
		{name: "grpc EDS is the envoy EDS", gen: GRPC, typeURL: resource.EndpointType, wantMarshals: 0},
		{name: "envoy CDS", gen: Envoy, typeURL: resource.ClusterType, wantMarshals: 20},
		{name: "grpc CDS", gen: GRPC, typeURL: resource.ClusterType, wantMarshals: 20},
		{name: "envoy LDS: two port listeners and virtualInbound", gen: Envoy, typeURL: resource.ListenerType, wantMarshals: 3},
		{name: "envoy RDS: two route configs", gen: Envoy, typeURL: resource.RouteType, wantMarshals: 2},
		{name: "grpc LDS", gen: GRPC, typeURL: resource.ListenerType, wantMarshals: 20},
		{name: "grpc RDS", gen: GRPC, typeURL: resource.RouteType, wantMarshals: 20},
	}
	// The listeners and clusters every sidecar has are built once per process.
	_, _ = virtualOutbound(meshconfig.AllowAny), staticClusters()
	sets := make(map[genType]*Set)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := Marshals()
			set := generate(t, m, tc.gen, tc.typeURL)
			if got := Marshals() - before; got != tc.wantMarshals {
				t.Errorf("first generation: %d marshals, want %d", got, tc.wantMarshals)
			}
			before = Marshals()
			if again := generate(t, m, tc.gen, tc.typeURL); again != set {
				t.Error("second generation returned another set")
			}
			if got := Marshals() - before; got != 0 {
				t.Errorf("second generation: %d marshals, want 0", got)
			}
			sets[genType{tc.gen, tc.typeURL}] = set
		})
	}
	if sets[genType{Envoy, resource.EndpointType}] != sets[genType{GRPC, resource.EndpointType}] {
		t.Error("EDS sets of the two generators are not shared")
	}

	// A change to one service's endpoints: that service's load assignments
	// (one per port; output is memoised per service) are re-marshalled; the
	// other resources are the very same objects.
	if err := s.Apply(record(t, "c1", pb.Op_OP_UPDATE, k8sSlice("ns", "svc-4-http", "svc-4", "http", 8080, "zone-c1", "10.2.4.7")), uint64(len(recs)+1)); err != nil {
		t.Fatal(err)
	}
	m2 := s.Snapshot()
	before := Marshals()
	eds := generate(t, m2, Envoy, resource.EndpointType)
	if got := Marshals() - before; got != 2 {
		t.Errorf("after one endpoint change: %d marshals, want 2", got)
	}
	old := sets[genType{Envoy, resource.EndpointType}]
	for _, r := range eds.Resources {
		if shared := r == old.Get(r.Name); shared != !strings.HasSuffix(r.Name, "||svc-4.ns.svc.cluster.local") {
			t.Errorf("%s: shared with the previous set = %v", r.Name, shared)
		}
	}
	for _, gt := range allGenTypes() {
		if gt.typeURL == resource.EndpointType {
			continue
		}
		if generate(t, m2, gt.gen, gt.typeURL) != sets[gt] {
			t.Errorf("%v %s: set rebuilt after an endpoint change", gt.gen, gt.typeURL)
		}
	}
	if got := Marshals() - before; got != 2 {
		t.Errorf("after one endpoint change, all types: %d marshals, want 2", got)
	}

	// A port change rebuilds that service's clusters, nothing else's.
	if err := s.Apply(record(t, "c1", pb.Op_OP_UPDATE, k8sService("ns", "svc-4", "10.96.0.5",
		corev1ServicePort("http", 81), corev1ServicePort("grpc", 9090))), uint64(len(recs)+2)); err != nil {
		t.Fatal(err)
	}
	before = Marshals()
	cds := generate(t, s.Snapshot(), Envoy, resource.ClusterType)
	if got := Marshals() - before; got != 2 {
		t.Errorf("after a port change: %d cluster marshals, want 2 (svc-4's two ports)", got)
	}
	if cds.Get("outbound|81||svc-4.ns.svc.cluster.local") == nil || cds.Get("outbound|80||svc-4.ns.svc.cluster.local") != nil {
		t.Errorf("clusters after the port change: %v", names(cds))
	}
}

func TestSelect(t *testing.T) {
	m := variedMesh(t)
	set := generate(t, m, GRPC, resource.ListenerType)
	a, b := "web.shop.svc.cluster.local:80", "api.shop.svc.cluster.local:6379"
	tests := []struct {
		name      string
		requested []string
		want      []string
	}{
		{name: "no names: everything", want: names(set)},
		{name: "wildcard", requested: []string{"*", a}, want: names(set)},
		{name: "sorted and deduplicated", requested: []string{a, b, a}, want: []string{b, a}},
		{name: "unknown names left out", requested: []string{"nope:1", a}, want: []string{a}},
		{name: "nothing known", requested: []string{"nope:1"}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, version := set.Select(tc.requested)
			if diff := cmp.Diff(tc.want, names(&Set{Resources: got})); diff != "" {
				t.Errorf("selected (-want +got):\n%s", diff)
			}
			if want := VersionOf(got); version != want {
				t.Errorf("version %s, want VersionOf = %s", version, want)
			}
		})
	}

	// The response version depends on the resources, not the order asked.
	_, v1 := set.Select([]string{a, b})
	_, v2 := set.Select([]string{b, a})
	_, v3 := set.Select([]string{a})
	if v1 != v2 || v1 == v3 {
		t.Errorf("versions: {a,b}=%s {b,a}=%s {a}=%s; want the first two equal, the third different", v1, v2, v3)
	}
	if VersionOf(nil) == v3 {
		t.Error("empty selection has the version of a non-empty one")
	}
	// VersionOf does not care about input order either.
	rs, _ := set.Select([]string{a, b})
	if VersionOf([]*Resource{rs[1], rs[0]}) != v1 {
		t.Error("VersionOf depends on input order")
	}
}
