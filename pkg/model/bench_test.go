package model

import (
	"fmt"
	"runtime"
	"testing"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// benchMesh is n services with one HTTP port and k endpoints each: a
// Service and its EndpointSlice per service.
func benchMesh(n, k int) []rec {
	recs := make([]rec, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("svc-%04d", i)
		eps := make([]ep, k)
		for j := range eps {
			eps[j] = ep{addr: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), zone: fmt.Sprintf("z%d", j%3)}
		}
		recs = append(recs,
			add("c1", service("ns", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250), svcPort{name: "http", port: 80})),
			add("c1", slice("ns", name+"-abc", name, []slicePort{named("http", 8080)}, eps...)),
		)
	}
	return recs
}

// benchStore holds benchMesh(n, k).
func benchStore(b *testing.B, n, k int) *Store {
	s := NewStore()
	applyAll(b, s, benchMesh(n, k)...)
	s.Snapshot()
	return s
}

// BenchmarkApplyAndSnapshot measures the model's hot path: one EndpointSlice
// update in a 1000-service x 10-endpoint mesh, then a snapshot.
func BenchmarkApplyAndSnapshot(b *testing.B) {
	s := benchStore(b, 1000, 10)
	flapEndpoint(b, s)
}

// benchIstioStore is benchStore's mesh plus 5,000 labelled Pods (five per
// service, named by the slices' endpoints) and 1,000 DestinationRules (one
// per service, two subsets).
func benchIstioStore(b *testing.B) *Store {
	s := NewStore()
	for i := range 1000 {
		name := fmt.Sprintf("svc-%04d", i)
		eps := make([]ep, 5)
		for j := range eps {
			eps[j] = ep{addr: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), node: fmt.Sprintf("%s-%d", name, j)}
			applyAll(b, s, add("c1", podObj("ns", eps[j].node, map[string]any{"app": name, "version": fmt.Sprintf("v%d", j%2+1)})))
		}
		applyAll(b, s,
			add("c1", service("ns", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250), svcPort{name: "http", port: 80})),
			add("c1", podSlice("ns", name+"-abc", name, eps...)),
			add("c1", benchRule(name, "ROUND_ROBIN")),
		)
	}
	s.Snapshot()
	return s
}

func benchRule(name, lb string) *unstructuredObj {
	return istioObj(KindDestinationRule, "ns", name, "2024-01-01T00:00:00Z", map[string]any{
		"host":          name,
		"trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": lb}},
		"subsets": []any{
			map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}},
			map[string]any{"name": "v2", "labels": map[string]any{"version": "v2"}},
		},
	})
}

// BenchmarkApplyAndSnapshotIstio measures apply and rebuild beside 1,000
// DestinationRules and 5,000 labelled Pods: an endpoint flap (the hot path
// of BenchmarkApplyAndSnapshot), a Pod label flip (moves an endpoint
// between subsets), and a DestinationRule change (revisits every service).
func BenchmarkApplyAndSnapshotIstio(b *testing.B) {
	s := benchIstioStore(b)
	run := func(b *testing.B, protos [2]*pb.ChangeRecord) {
		b.ReportAllocs()
		for b.Loop() {
			seq := s.AppliedSeq() + 1
			if err := s.Apply(protos[seq%2], seq); err != nil {
				b.Fatal(err)
			}
			if m := s.Snapshot(); m.Seq != seq {
				b.Fatalf("snapshot at %d, want %d", m.Seq, seq)
			}
		}
	}
	b.Run("endpoint", func(b *testing.B) {
		var protos [2]*pb.ChangeRecord
		for i := range protos {
			eps := []ep{{addr: "10.0.7.1", node: "svc-0007-0"}, {addr: "10.0.7.2", node: "svc-0007-1", ready: ptr(i == 0)}}
			protos[i] = upd("c1", podSlice("ns", "svc-0007-abc", "svc-0007", eps...)).proto(b)
		}
		run(b, protos)
	})
	b.Run("pod-label", func(b *testing.B) {
		var protos [2]*pb.ChangeRecord
		for i, v := range []string{"v1", "v2"} {
			protos[i] = upd("c1", podObj("ns", "svc-0009-0", map[string]any{"app": "svc-0009", "version": v})).proto(b)
		}
		run(b, protos)
	})
	b.Run("destination-rule", func(b *testing.B) {
		var protos [2]*pb.ChangeRecord
		for i, lb := range []string{"RANDOM", "ROUND_ROBIN"} {
			protos[i] = upd("c1", benchRule("svc-0011", lb)).proto(b)
		}
		run(b, protos)
	})
}

// BenchmarkApplyAndSnapshotGatewayAPI is BenchmarkApplyAndSnapshot's
// endpoint flap in a mesh that also holds a GAMMA route: a rebuild with a
// dirty service then asks whether what backendRefs resolve against (the
// Services and ServiceEntries) changed.
func BenchmarkApplyAndSnapshotGatewayAPI(b *testing.B) {
	s := benchStore(b, 1000, 10)
	applyAll(b, s, add("c1", gatewayAPIObj("HTTPRoute", "ns", "split", map[string]any{
		"parentRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "svc-0000", "port": 80}},
		"rules": []any{map[string]any{"backendRefs": []any{
			map[string]any{"name": "svc-0001", "port": 80, "weight": 80},
			map[string]any{"name": "svc-0002", "port": 80, "weight": 20},
		}}},
	})))
	if s.Snapshot().VirtualServiceFor("ns", Hostname("ns", "svc-0000")) == nil {
		b.Fatal("the route has no VirtualService")
	}
	flapEndpoint(b, s)
}

// flapEndpoint times one EndpointSlice update and a snapshot per
// iteration, alternating between two versions of one slice of s: one
// endpoint flaps.
func flapEndpoint(b *testing.B, s *Store) {
	b.Helper()
	var protos [2]*pb.ChangeRecord
	for i := range protos {
		eps := []ep{{addr: "10.0.7.1"}, {addr: "10.0.7.2", ready: ptr(i == 0)}}
		protos[i] = upd("c1", slice("ns", "svc-0007-abc", "svc-0007", []slicePort{named("http", 8080)}, eps...)).proto(b)
	}
	b.ReportAllocs()
	for b.Loop() {
		seq := s.AppliedSeq() + 1
		if err := s.Apply(protos[seq%2], seq); err != nil {
			b.Fatal(err)
		}
		if m := s.Snapshot(); m.Seq != seq {
			b.Fatalf("snapshot at %d, want %d", m.Seq, seq)
		}
	}
}

// BenchmarkFirstSnapshot measures the snapshot a replaying frontend builds
// once the model is bootstrapped: every service of a 5,000-service x
// 10-endpoint mesh dirty, no previous mesh. workers=1 builds them on the
// caller's goroutine; workers=max as NewStore does by default.
func BenchmarkFirstSnapshot(b *testing.B) {
	s := benchStore(b, 5000, 10)
	empty, _ := NewMesh(0, nil)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			s.buildWorkers = workers
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				s.mu.Lock()
				for sk := range s.services {
					s.dirty[sk] = struct{}{}
				}
				empty.content.rules, empty.content.routes = s.ruleIdx, s.routeIdx
				s.mesh = empty.withSeq(0)
				s.mu.Unlock()
				b.StartTimer()
				if m := s.Snapshot(); len(m.Services) != 5000 {
					b.Fatalf("%d services, want 5000", len(m.Services))
				}
			}
		})
	}
}

// BenchmarkApplyDecoded measures what a frontend's apply loop does per
// record while it bootstraps: 5,000 Services and their EndpointSlices of
// 10 endpoints, decoded beforehand (the decoders' part), applied to an
// empty store sized for them, with no snapshot built.
func BenchmarkApplyDecoded(b *testing.B) {
	const n = 5000
	var protos []*pb.ChangeRecord
	for _, r := range benchMesh(n, 10) {
		protos = append(protos, r.proto(b))
	}
	decoded := make([]Decoded, len(protos))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i, rec := range protos {
			decoded[i] = Decode(rec)
		}
		s := NewStore()
		s.Reserve(Reservation{Objects: len(protos), Services: n, EndpointSlices: n})
		b.StartTimer()
		for i := range decoded {
			if err := s.ApplyDecoded(&decoded[i], uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(protos)), "ns/record")
}
