package publish_test

import (
	"context"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/startupstream"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// BenchmarkPublisherStartup: ingest's start on a change stream of
// 1,000,000 records of which 20,000 are live (startupstream, cached under
// .cache/): the publisher reads the last record of every subject of its
// cluster (20,000 live and 100,000 deleted subjects before compaction).
// Ingest does not start from snapshots (its fencing needs each subject's
// last record on the stream); compaction is what bounds its start.
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
	b.ReportAllocs()
	var total time.Duration
	for range b.N {
		p, err := publish.New(js, publish.Options{Cluster: startupstream.Cluster, Names: startupstream.Names})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		start := time.Now()
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		cancel()
		if n := len(p.Live()); n != startupstream.Live {
			b.Fatalf("publisher found %d live objects, want %d", n, startupstream.Live)
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-ready")
}
