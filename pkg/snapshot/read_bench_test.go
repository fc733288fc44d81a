package snapshot_test

import (
	"context"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/startupstream"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
)

// BenchmarkReadSnapshot: reading the start-up benchmarks' snapshot (20,000
// live records among 120,000 entries; startupstream, cached under .cache/)
// from the object store and decoding it, with nothing done per record:
// the part of a start from a snapshot that is not the consumer's work.
//
//	go test ./pkg/snapshot -run '^$' -bench BenchmarkReadSnapshot -benchtime 5x
func BenchmarkReadSnapshot(b *testing.B) {
	srv, err := natsembed.Start(natsembed.Options{Addr: "127.0.0.1:0", StoreDir: startupstream.Dir(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	_, js := natstest.Connect(b, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := snapshot.Open(ctx, js, startupstream.Names)
	if err != nil || st == nil {
		b.Fatalf("open the snapshot bucket: %v", err)
	}
	in, err := st.Latest(ctx, 0, time.Time{})
	if err != nil || in == nil {
		b.Fatalf("latest snapshot: %v, %v", in, err)
	}
	b.SetBytes(int64(in.Size))
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := st.ReadSubjects(ctx, *in, "", func(snapshot.Record, bool) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		if n != startupstream.Live+startupstream.Churn {
			b.Fatalf("read %d entries, want %d", n, startupstream.Live+startupstream.Churn)
		}
	}
}
