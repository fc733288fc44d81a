package ads

import (
	"log/slog"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestRecordNeverStallsTheConnection (5,000-proxy benchmark: "delivery
// records dropped ... stalled with too many outstanding async published
// messages"): a connection's loop records every response and ACK. The
// recorder dropped records only past 4,096 awaiting their acks, but
// nats.go blocks a publish past its own bound of 4,000 for up to 200 ms
// before it fails: every record in between held a connection's loop,
// and so its pushes, for 200 ms. Records past the recorder's bound are
// now dropped at once, and a publish that still meets nats.go's bound
// (loops recording at the same moment) waits at most a millisecond.
func TestRecordNeverStallsTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxPending int // the recorder's own bound
	}{
		{"past the recorder's bound", recordMaxPending},
		// As if many loops passed the recorder's check at the same moment.
		{"past nats.go's bound", 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.Start(t)
			nc, js := natstest.Connect(t, url)
			names := bus.Names{Prefix: "pw"}
			// Something takes the records and never acknowledges one: every
			// publish stays pending, as when the DELIVERIES stream cannot
			// keep up.
			sub, err := nc.Subscribe(names.Prefix+".deliveries.>", func(*nats.Msg) {})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			reg := prometheus.NewRegistry()
			r := newRecorder(js, names, slog.New(slog.DiscardHandler), newMetrics(reg))
			r.maxPending = tc.maxPending
			s := &Server{id: "fe", recorder: r}
			c := &conn{id: "c1", proxy: &proxy{ID: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}, watches: map[string]*watch{resource.ClusterType: {}}}
			const records = 4200
			start := time.Now()
			for range records {
				s.record(c, pb.DeliveryRecord_RESPONSE, resource.ClusterType, "v1", "n1", nil, 1, "")
			}
			// Before the fix the records past nats.go's bound took 200 ms
			// each: 40 s in all.
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%d records took %v: a connection's loop was held", records, took)
			}
			if got := testutil.Metric(reg, "pilotwire_ads_delivery_records_dropped_total"); got < records-svc.PublishAsyncMaxPending {
				t.Errorf("pilotwire_ads_delivery_records_dropped_total = %v, want at least %d", got, records-svc.PublishAsyncMaxPending)
			}
		})
	}
}
