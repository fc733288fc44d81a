package ads

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/startupstream"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// BenchmarkFrontendStartup: a frontend's time from Run to listening (its
// model caught up with the stream) on a change stream of 1,000,000
// records of which 20,000 are live (startupstream, cached under .cache/),
// starting from the last record of every subject, or from the snapshot.
//
//	go test ./services/ads -run '^$' -bench BenchmarkFrontendStartup -benchtime 3x
func BenchmarkFrontendStartup(b *testing.B) {
	store := startupstream.Dir(b)
	srv, err := natsembed.Start(natsembed.Options{Addr: "127.0.0.1:0", StoreDir: store})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	for _, v := range []struct {
		name   string
		ignore bool
	}{{"last_per_subject", true}, {"from_snapshot", false}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var total, cpu time.Duration
			for range b.N {
				wall, c := startOnce(b, srv.URL(), v.ignore)
				total, cpu = total+wall, cpu+c
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s-to-ready")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// startOnce runs a frontend until it listens and returns how long that
// took, in wall and CPU time.
func startOnce(b *testing.B, url string, ignoreSnapshots bool) (time.Duration, time.Duration) {
	nc, js := natstest.Connect(b, url)
	defer nc.Close()
	ready := make(chan struct{})
	cfg := Config{
		Common:          svc.Common{NATSURL: url, Prefix: startupstream.Names.Prefix},
		ADSAddr:         "127.0.0.1:0",
		FrontendID:      "bench",
		OnListen:        func(string) { close(ready) },
		ignoreSnapshots: ignoreSnapshots,
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start, cpu0 := time.Now(), startupstream.CPUTime()
	go func() {
		errc <- Run(ctx, cfg, svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler), Reg: prometheus.NewRegistry(), Health: &svc.Health{}})
	}()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		b.Fatalf("Run: %v", err)
	}
	took, cpu := time.Since(start), startupstream.CPUTime()-cpu0
	cancel()
	if err := <-errc; err != nil {
		b.Fatalf("Run: %v", err)
	}
	return took, cpu
}
