package xdsgen

import (
	"fmt"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// localityRecords is 1,000 services x 10 endpoints spread over three
// zones of two regions (slice zones, no Nodes), one namespace; every
// ruled-th service has a DestinationRule with outlier detection (so the
// mesh default localityLbSetting fails over).
func localityRecords(b testing.TB, ruled int) []*pb.ChangeRecord {
	var recs []*pb.ChangeRecord
	zones := []string{"r1/z1", "r1/z2", "r2/z3"}
	for i := range 1000 {
		name := fmt.Sprintf("svc-%04d", i)
		recs = append(recs, objRecord(b, "", model.KindService, "ns", name, map[string]any{
			"spec": map[string]any{"clusterIP": fmt.Sprintf("10.96.%d.%d", i/250, i%250), "ports": []any{map[string]any{"name": "http", "port": 80}}},
		}))
		var eps []any
		for j := range 10 {
			eps = append(eps, map[string]any{"addresses": []any{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)}, "zone": zones[j%3]})
		}
		recs = append(recs, objRecord(b, "discovery.k8s.io", model.KindEndpointSlice, "ns", name+"-1", map[string]any{
			"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": name}},
			"addressType": "IPv4", "ports": []any{map[string]any{"name": "http", "port": 8080}}, "endpoints": eps,
		}))
		if ruled > 0 && i%ruled == 0 {
			recs = append(recs, objRecord(b, "networking.istio.io", model.KindDestinationRule, "ns", name, map[string]any{
				"spec": map[string]any{"host": name, "trafficPolicy": map[string]any{"outlierDetection": map[string]any{"consecutive5xxErrors": 5}}},
			}))
		}
	}
	return recs
}

// BenchmarkGenerateEDSLocality generates the load assignments of a
// 1000x10 mesh for sidecars in three localities, where every 10th service
// (ruled-10) or none (ruled-none) has a rule that makes the mesh default
// fail over:
//   - first: the three localities' sets from a fresh mesh;
//   - one-service-changed: one endpoint of a ruled service changed, all
//     three localities regenerated (the steady state under churn);
//   - memoized: the same mesh again, per proxy.
func BenchmarkGenerateEDSLocality(b *testing.B) {
	for _, tc := range []struct {
		name  string
		ruled int
	}{{"ruled-none", 0}, {"ruled-10", 10}} {
		b.Run(tc.name, func(b *testing.B) {
			recs := localityRecords(b, tc.ruled)
			proxies := []Proxy{
				{Generator: Envoy, Namespace: "ns", Locality: model.Locality{Region: "r1", Zone: "z1"}},
				{Generator: Envoy, Namespace: "ns", Locality: model.Locality{Region: "r1", Zone: "z2"}},
				{Generator: Envoy, Namespace: "ns", Locality: model.Locality{Region: "r2", Zone: "z3"}},
			}
			genAll := func(m *model.Mesh) {
				for _, p := range proxies {
					if _, err := GenerateFor(m, p, resource.EndpointType); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Run("first", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					m := storeWith(b, recs).Snapshot()
					b.StartTimer()
					genAll(m)
				}
			})
			b.Run("one-service-changed", func(b *testing.B) {
				s := storeWith(b, recs)
				genAll(s.Snapshot())
				seq := uint64(len(recs))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					b.StopTimer()
					svc := (i % 100) * 10 // a ruled service in ruled-10
					shift := 1 - i/100%2  // each update of a service changes it
					i++
					name := fmt.Sprintf("svc-%04d", svc)
					var eps []any
					for j := range 10 {
						eps = append(eps, map[string]any{"addresses": []any{fmt.Sprintf("10.%d.%d.%d", svc/250, svc%250, j+1+shift)}, "zone": "r1/z1"})
					}
					r := objRecord(b, "discovery.k8s.io", model.KindEndpointSlice, "ns", name+"-1", map[string]any{
						"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": name}},
						"addressType": "IPv4", "ports": []any{map[string]any{"name": "http", "port": 8080}}, "endpoints": eps,
					})
					r.Op = pb.Op_OP_UPDATE
					seq++
					if err := s.Apply(r, seq); err != nil {
						b.Fatal(err)
					}
					m := s.Snapshot()
					b.StartTimer()
					genAll(m)
				}
			})
			b.Run("memoized", func(b *testing.B) {
				m := storeWith(b, recs).Snapshot()
				genAll(m)
				b.ReportAllocs()
				for b.Loop() {
					genAll(m)
				}
			})
		})
	}
}
