package xdsgen

import (
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// fresh copies a service into a new *Service, so nothing memoised on the
// original applies to it.
func fresh(s *model.Service) *model.Service {
	return &model.Service{
		Name: s.Name, Namespace: s.Namespace, Hostname: s.Hostname,
		ClusterIP: s.ClusterIP, Headless: s.Headless, ExternalName: s.ExternalName,
		Clusters: s.Clusters, Ports: s.Ports,
	}
}

// BenchmarkGenerateEDS generates every load assignment of a 1000-service x
// 10-endpoint mesh:
//   - cold: nothing memoised (first generation for a mesh of new services);
//   - one-service-changed: a new mesh in which one service changed, the
//     steady state under endpoint churn;
//   - memoized: the same mesh again.
func BenchmarkGenerateEDS(b *testing.B) {
	base := bigMesh(b, 1000, 10)
	set, err := Generate(base, Envoy, resource.EndpointType)
	if err != nil {
		b.Fatal(err)
	}
	var bytes int64
	for _, r := range set.Resources {
		bytes += int64(len(r.Any.Value))
	}

	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(bytes)
		for b.Loop() {
			b.StopTimer()
			svcs := make([]*model.Service, len(base.Services))
			for i, s := range base.Services {
				svcs[i] = fresh(s)
			}
			m, err := model.NewMesh(2, svcs)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := Generate(m, Envoy, resource.EndpointType); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-service-changed", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			b.StopTimer()
			svcs := append([]*model.Service(nil), base.Services...)
			svcs[i%len(svcs)] = fresh(svcs[i%len(svcs)])
			i++
			m, err := model.NewMesh(2, svcs)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := Generate(m, Envoy, resource.EndpointType); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memoized", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Generate(base, Envoy, resource.EndpointType); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGenerateAllCold generates every type for both generators from a
// mesh of new services.
func BenchmarkGenerateAllCold(b *testing.B) {
	base := bigMesh(b, 1000, 10)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		svcs := make([]*model.Service, len(base.Services))
		for i, s := range base.Services {
			svcs[i] = fresh(s)
		}
		m, err := model.NewMesh(2, svcs)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, gt := range allGenTypes() {
			if _, err := Generate(m, gt.gen, gt.typeURL); err != nil {
				b.Fatal(err)
			}
		}
	}
}
