package model

import (
	"fmt"
	"testing"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// benchStore holds n services with one HTTP port and k endpoints each.
func benchStore(b *testing.B, n, k int) *Store {
	s := NewStore()
	for i := range n {
		name := fmt.Sprintf("svc-%04d", i)
		eps := make([]ep, k)
		for j := range eps {
			eps[j] = ep{addr: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), zone: fmt.Sprintf("z%d", j%3)}
		}
		applyAll(b, s,
			add("c1", service("ns", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250), svcPort{name: "http", port: 80})),
			add("c1", slice("ns", name+"-abc", name, []slicePort{named("http", 8080)}, eps...)),
		)
	}
	s.Snapshot()
	return s
}

// BenchmarkApplyAndSnapshot measures the model's hot path: one EndpointSlice
// update in a 1000-service x 10-endpoint mesh, then a snapshot.
func BenchmarkApplyAndSnapshot(b *testing.B) {
	s := benchStore(b, 1000, 10)
	// Alternate between two versions of one slice: one endpoint flaps.
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
