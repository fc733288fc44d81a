package publish_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/startupstream"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// BenchmarkPublisherStartup: ingest's start on a change stream of
// 1,000,000 records of which 20,000 are live (startupstream, cached under
// .cache/): the publisher reads the last record of every subject of its
// cluster (20,000 live and 100,000 deleted subjects before compaction),
// or the newest snapshot (the same 120,000 entries) and the records after
// it.
//
//	go test ./services/ingest/publish -run '^$' -bench BenchmarkPublisherStartup -benchtime 3x
func BenchmarkPublisherStartup(b *testing.B) {
	store := startupstream.Dir(b)
	srv, err := natsembed.Start(natsembed.Options{Addr: "127.0.0.1:0", StoreDir: store})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	_, js := natstest.Connect(b, srv.URL())
	for _, v := range []struct {
		name   string
		ignore bool
	}{{"last_per_subject", true}, {"from_snapshot", false}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var total, cpu time.Duration
			for range b.N {
				reg := prometheus.NewRegistry()
				p, err := publish.New(js, publish.Options{Cluster: startupstream.Cluster, Names: startupstream.Names, IgnoreSnapshots: v.ignore, Registerer: reg})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				start, cpu0 := time.Now(), startupstream.CPUTime()
				if err := p.Start(ctx); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				cpu += startupstream.CPUTime() - cpu0
				cancel()
				if n := len(p.Live()); n != startupstream.Live {
					b.Fatalf("publisher found %d live objects, want %d", n, startupstream.Live)
				}
				if got := testutil.Metric(reg, "pilotwire_ingest_start_snapshot_seq"); (got > 0) == v.ignore {
					b.Fatalf("start_snapshot_seq = %v with IgnoreSnapshots %v", got, v.ignore)
				}
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-to-ready")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
