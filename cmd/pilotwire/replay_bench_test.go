package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// BenchmarkCopyHistory measures replay's copy: a change stream of 20,000
// records (1 KiB each, 2,000 objects) copied whole into an empty one on
// another server; it reports records per second.
func BenchmarkCopyHistory(b *testing.B) {
	const records, objects = 20000, 2000
	ctx := context.Background()
	names, _ := bus.NewNames("pw")
	srcURL := natstest.Start(b)
	snc, sjs := natstest.Connect(b, srcURL)
	if _, err := bus.EnsureStream(ctx, sjs, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	for i := range records {
		if i%1000 == 0 {
			<-sjs.PublishAsyncComplete()
		}
		if _, err := sjs.PublishAsync(fmt.Sprintf("pw.changes.c1.v1.Service.ns.svc-%d", i%objects), body); err != nil {
			b.Fatal(err)
		}
	}
	<-sjs.PublishAsyncComplete()
	src := &session{nc: snc, js: sjs, names: names}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		nc, err := nats.Connect(natstest.Start(b))
		if err != nil {
			b.Fatal(err)
		}
		dst := &session{nc: nc, names: names}
		if dst.js, err = jetstream.New(nc); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := copyHistory(ctx, src, dst, point{Seq: records})
		if err != nil {
			b.Fatal(err)
		}
		if res.Records != records {
			b.Fatalf("copied %d records, want %d", res.Records, records)
		}
		b.StopTimer()
		nc.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
}
