package yamldir

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
)

// BenchmarkFrontendReplay is replay into a fresh frontend end to end, in
// one process: the change records of the 10000x10 mesh (20,000 records,
// the same ones `pwbench run` replays) on embedded JetStream with file
// storage, and a fresh ads.Run each iteration, timed from Run to listening
// (its model has applied the stream's last sequence and built the mesh).
// records/s is per wall second of that; records/cpu-s per CPU-second of
// the whole process.
//
//	go test ./bench/internal/yamldir -run '^$' -bench BenchmarkFrontendReplay -benchtime 5x -count 5
func BenchmarkFrontendReplay(b *testing.B) {
	n, url, nc, js, ctx := replayStream(b)
	benchReplay(ctx, b, n, nc, js, url)
}

// BenchmarkFrontendReplaySnapshot is BenchmarkFrontendReplay with a
// snapshot of the stream written first, as the snapshotter does in a
// running system: a fresh frontend loads the snapshot and follows the
// stream after it (nothing, here).
//
//	go test ./bench/internal/yamldir -run '^$' -bench BenchmarkFrontendReplaySnapshot -benchtime 5x -count 5
func BenchmarkFrontendReplaySnapshot(b *testing.B) {
	n, url, nc, js, ctx := replayStream(b)
	names, err := bus.NewNames("pw")
	if err != nil {
		b.Fatal(err)
	}
	// As the debouncer runs the snapshotter: with compact forms.
	sn := snapshot.New(snapshot.Options{JS: js, Names: names, Model: model.CompactRecord})
	defer sn.Close()
	in, err := sn.Step(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if in.Objects != n {
		b.Fatalf("snapshot holds %d objects, want %d", in.Objects, n)
	}
	benchReplay(ctx, b, n, nc, js, url)
}

// benchReplay times fresh frontends replaying the stream and reports the
// rates.
func benchReplay(ctx context.Context, b *testing.B, records int, nc *nats.Conn, js jetstream.JetStream, url string) {
	b.ReportAllocs()
	b.ResetTimer()
	var total time.Duration
	i := 0
	cpu := cpuTime()
	for b.Loop() {
		i++
		replays++ // b.Loop may run this function more than once: ids stay unique
		total += replayOnce(ctx, b, nc, js, url, fmt.Sprintf("bench-%d", replays))
	}
	b.ReportMetric(float64(records*i)/total.Seconds(), "records/s")
	b.ReportMetric(total.Seconds()/float64(i), "s-to-ready")
	// The CPU of the frontend and the NATS server, both in this process
	// (and of the frontends' shutdown, outside the timed part).
	b.ReportMetric(float64(records*i)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
}

var replays int

// replayOnce runs a fresh frontend until it listens and returns how long
// that took.
func replayOnce(ctx context.Context, b *testing.B, nc *nats.Conn, js jetstream.JetStream, url, id string) time.Duration {
	ready := make(chan struct{})
	cfg := ads.Config{
		Common:     svc.Common{NATSURL: url, Prefix: "pw"},
		ADSAddr:    "127.0.0.1:0",
		FrontendID: id,
		OnListen:   func(string) { close(ready) },
		// As the binary runs it (--bootstrap-gogc), but without
		// --bootstrap-heap: that readies a fresh process's heap, and this
		// one's is warm from the runs before (pwbench replay times fresh
		// processes).
		BootstrapGOGC: ads.DefaultConfig().BootstrapGOGC,
	}
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		errc <- ads.Run(rctx, cfg, svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler), Reg: prometheus.NewRegistry(), Health: &svc.Health{}})
	}()
	select {
	case <-ready:
	case err := <-errc:
		stop()
		b.Fatalf("Run: %v", err)
	}
	took := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-errc; err != nil {
		b.Fatalf("Run: %v", err)
	}
	b.StartTimer()
	return took
}

// replayStream publishes the change records of the 10000x10 mesh on a
// fresh embedded JetStream and returns how many there are, with the
// server's URL, a connection and a context for the benchmark. It keeps
// nothing else of the mesh: a frontend's process holds only its model, so
// the benchmark's garbage collector should find only that (and the NATS
// server's state) live.
func replayStream(b *testing.B) (int, string, *nats.Conn, jetstream.JetStream, context.Context) {
	b.Helper()
	recs := meshScan(b, 10000)
	url := natstest.Start(b)
	nc, js := natstest.Connect(b, url)
	names, err := bus.NewNames("pw")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		b.Fatal(err)
	}
	natstest.PublishRecords(b, js, names, recs)
	return len(recs), url, nc, js, ctx
}

// BenchmarkStreamReadFloor reads the same 20,000 records the way a fresh
// frontend does (an ordered consumer, last record per subject, the
// services' pull options) and does nothing with them: the floor that NATS
// delivery sets under BenchmarkFrontendReplay on this machine.
//
//	go test ./bench/internal/yamldir -run '^$' -bench BenchmarkStreamReadFloor -benchtime 5x -count 5
func BenchmarkStreamReadFloor(b *testing.B) {
	records, _, _, js, ctx := replayStream(b)
	names, err := bus.NewNames("pw")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		stream, err := js.Stream(ctx, names.ChangesStream())
		if err != nil {
			b.Fatal(err)
		}
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.ChangesAll()}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		n := 0
		cc, err := cons.Consume(func(m jetstream.Msg) {
			n++
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				close(done)
			}
		}, bus.PullConsume()...)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		cc.Stop()
		if n != records {
			b.Fatalf("read %d records, want %d", n, records)
		}
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(records*b.N)/(cpuTime()-cpu).Seconds(), "records/cpu-s")
}
