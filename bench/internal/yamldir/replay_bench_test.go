package yamldir

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// BenchmarkModelReplay applies the change records of the benchmark's
// 1000x10 mesh to a fresh pkg/model store as a replaying ADS frontend
// does (protobuf decode, Apply, Snapshot), without NATS: the CPU bound of
// replay. Profile it with -cpuprofile to see where replay time goes.
func BenchmarkModelReplay(b *testing.B) {
	raw := meshRecords(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		s := model.NewStore()
		for i, data := range raw {
			var r pb.ChangeRecord
			if err := proto.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
			if err := s.Apply(&r, uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
		s.Snapshot()
	}
	b.ReportMetric(float64(len(raw)*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(len(raw)*b.N)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
}

// BenchmarkModelReplayDecodeAhead is BenchmarkModelReplay the way the ADS
// follower replays: one goroutine decodes each record (protobuf, then
// model.Decode) and hands it over a bounded channel to another that
// applies them in order (ApplyDecoded), then one Snapshot. records/s is
// per wall second, so on more than one core it shows what the overlap
// gains; records/cpu-s what it costs.
func BenchmarkModelReplayDecodeAhead(b *testing.B) {
	raw := meshRecords(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		s := model.NewStore()
		q := make(chan model.Decoded, 256)
		errc := make(chan error, 1)
		go func() {
			defer close(q)
			for _, data := range raw {
				r := &pb.ChangeRecord{}
				if err := proto.Unmarshal(data, r); err != nil {
					errc <- err
					return
				}
				q <- model.Decode(r)
			}
			errc <- nil
		}()
		seq := uint64(0)
		for d := range q {
			seq++
			if err := s.ApplyDecoded(&d, seq); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		s.Snapshot()
	}
	b.ReportMetric(float64(len(raw)*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(len(raw)*b.N)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
}

// meshScan writes the services x 10 mesh and returns its change records.
func meshScan(b *testing.B, services int) []*pb.ChangeRecord {
	b.Helper()
	m, err := mesh.New(mesh.Spec{Services: services, Endpoints: 10, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := m.WriteAll(dir); err != nil {
		b.Fatal(err)
	}
	recs, errs := New(dir, "Kubernetes").Scan()
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	return recs
}

// meshRecords returns the change records of the services x 10 mesh,
// marshaled.
func meshRecords(b *testing.B, services int) [][]byte {
	b.Helper()
	recs := meshScan(b, services)
	raw := make([][]byte, len(recs))
	var err error
	for i, r := range recs {
		if raw[i], err = proto.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
	return raw
}

// BenchmarkReadManifests reads and parses the 1000x10 mesh's YAML with
// ingest's parser: the CPU bound of ingest reading a directory.
func BenchmarkReadManifests(b *testing.B) {
	m, err := mesh.New(mesh.Spec{Services: 1000, Endpoints: 10, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := m.WriteAll(dir); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		recs, errs := New(dir, "Kubernetes").Scan()
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		n += len(recs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
