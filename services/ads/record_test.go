package ads

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

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
			r := newRecorder(js, names, "fe", slog.New(slog.DiscardHandler), newMetrics(reg))
			r.maxPending = tc.maxPending
			r.maxBytes = 1 // a batch per record: as many messages awaiting acks as records
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

// TestRecordsKeptInABurst (5,000-proxy benchmark: 35,060 delivery records
// dropped over two initial syncs): when thousands of proxies connect at
// once, their loops record responses and ACKs faster than the DELIVERIES
// stream acknowledges one message per record, and the recorder dropped
// most of the initial sync's history, the part an operator reads to find
// out why a proxy got its first config.
func TestRecordsKeptInABurst(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names := bus.Names{Prefix: "pw"}
	ctx := t.Context()
	if _, err := bus.EnsureStream(ctx, js, names.DeliveriesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := newRecorder(js, names, "fe", slog.New(slog.DiscardHandler), newMetrics(reg))
	s := &Server{id: "fe", recorder: r}
	const loops, connsPerLoop, perConn = 50, 100, 8
	var wg sync.WaitGroup
	for l := range loops {
		wg.Go(func() {
			for i := range connsPerLoop {
				c := &conn{id: fmt.Sprintf("c%d-%d", l, i), proxy: &proxy{ID: fmt.Sprintf("sidecar~10.0.%d.%d~a.ns~ns.svc.cluster.local", l, i)},
					watches: map[string]*watch{resource.ClusterType: {}}}
				for k := range perConn {
					s.record(c, pb.DeliveryRecord_RESPONSE, resource.ClusterType, fmt.Sprint(k), "n", nil, uint64(k), "")
				}
			}
		})
	}
	wg.Wait()
	r.flush()
	<-js.PublishAsyncComplete()
	if got := testutil.Metric(reg, "pilotwire_ads_delivery_records_dropped_total"); got != 0 {
		t.Errorf("pilotwire_ads_delivery_records_dropped_total = %v, want 0", got)
	}
	// Every record is in the stream, each connection's in order.
	recs, _ := storedRecords(t, js, names)
	next := map[string]uint64{}
	total := 0
	for _, rec := range recs {
		if rec.GetPushId() != next[rec.GetConnId()] {
			t.Fatalf("%s: record of push %d after %d", rec.GetConnId(), rec.GetPushId(), next[rec.GetConnId()])
		}
		next[rec.GetConnId()]++
		total++
	}
	if want := loops * connsPerLoop * perConn; total != want {
		t.Errorf("the stream holds %d records, want %d", total, want)
	}
}

// TestRecordBatchPublishedAfterItsDelay: a lone record is not held until a
// batch fills, and records after close are published at once.
func TestRecordBatchPublishedAfterItsDelay(t *testing.T) {
	url := natstest.Start(t)
	nc, js := natstest.Connect(t, url)
	names := bus.Names{Prefix: "pw"}
	got := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(names.Prefix+".deliveries.>", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	reg := prometheus.NewRegistry()
	r := newRecorder(js, names, "fe", slog.New(slog.DiscardHandler), newMetrics(reg))
	r.delay = 50 * time.Millisecond
	s := &Server{id: "fe", recorder: r}
	c := &conn{id: "c1", proxy: &proxy{ID: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}, watches: map[string]*watch{resource.ClusterType: {}}}
	next := func(what string) []*pb.DeliveryRecord {
		t.Helper()
		select {
		case msg := <-got:
			if msg.Subject != names.DeliveryBatchSubject("fe") {
				t.Fatalf("%s: published on %s, want %s", what, msg.Subject, names.DeliveryBatchSubject("fe"))
			}
			recs, err := bus.DecodeDeliveries(names, msg.Subject, msg.Data)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return recs
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing published", what)
			return nil
		}
	}
	start := time.Now()
	s.record(c, pb.DeliveryRecord_RESPONSE, resource.ClusterType, "v1", "n1", nil, 1, "")
	s.record(c, pb.DeliveryRecord_ACK, resource.ClusterType, "v1", "n1", nil, 0, "")
	recs := next("two records, no flush")
	if took := time.Since(start); took < r.delay {
		t.Errorf("the batch was published after %s, before its %s delay: it was not gathered", took, r.delay)
	}
	if len(recs) != 2 || recs[0].GetKind() != pb.DeliveryRecord_RESPONSE || recs[1].GetKind() != pb.DeliveryRecord_ACK {
		t.Fatalf("batch = %v, want the response then the ACK", recs)
	}
	r.close(5 * time.Second)
	s.record(c, pb.DeliveryRecord_NACK, resource.ClusterType, "v1", "n2", nil, 0, "bad")
	if recs := next("a record after close"); len(recs) != 1 || recs[0].GetError() != "bad" {
		t.Fatalf("batch after close = %v, want the NACK alone", recs)
	}
}

// BenchmarkRecord: delivery records into a DELIVERIES stream on an
// embedded NATS server (its CPU is this process's), waiting for the
// stream's acks every 1,000 records so none is dropped. names=100 is the
// record of an initial sync's load assignments: a response of 100 names,
// shared by the fleet.
func BenchmarkRecord(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			url := natstest.Start(b)
			_, js := natstest.Connect(b, url)
			names := bus.Names{Prefix: "pw"}
			if _, err := bus.EnsureStream(b.Context(), js, names.DeliveriesConfig(bus.StreamOptions{})); err != nil {
				b.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			r := newRecorder(js, names, "fe", slog.New(slog.DiscardHandler), newMetrics(reg))
			s := &Server{id: "fe", recorder: r}
			c := &conn{id: "fe-mx5ddmeb-1", proxy: &proxy{ID: "sidecar~10.244.1.5~web-0.shop~shop.svc.cluster.local"}, watches: map[string]*watch{resource.EndpointType: {}}}
			resp := &response{version: "9da3e7ff2da4bf738dda33b06a6e8195", shared: true}
			for i := range n {
				resp.names = append(resp.names, fmt.Sprintf("outbound|80||echo-%03d.default.svc.cluster.local", i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%1000 == 999 {
					r.flush()
					<-js.PublishAsyncComplete()
				}
				s.recordResponse(c, resource.EndpointType, resp, "fe-mx5ddmeb-1-5", uint64(i))
			}
			r.flush()
			<-js.PublishAsyncComplete()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			if d := testutil.Metric(reg, "pilotwire_ads_delivery_records_dropped_total"); d != 0 {
				b.Fatalf("%v records dropped", d)
			}
		})
	}
}

// TestRecordNamesAsMarshalled: a record's resource names are written apart
// from the rest (encoded once per shared response), and what the stream
// holds decodes to the record itself: every name, in order, for a shared
// response, a connection's own, none, and many over several batches. A
// record with a name that is not UTF-8 is refused as proto.Marshal
// refuses it: counted as dropped, and nowhere in the stream.
func TestRecordNamesAsMarshalled(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names := bus.Names{Prefix: "pw"}
	ctx := t.Context()
	if _, err := bus.EnsureStream(ctx, js, names.DeliveriesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := newRecorder(js, names, "fe", slog.New(slog.DiscardHandler), newMetrics(reg))
	s := &Server{id: "fe", recorder: r}
	c := &conn{id: "c1", proxy: &proxy{ID: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}, watches: map[string]*watch{resource.EndpointType: {genSeq: 42}}}
	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprintf("outbound|80||svc-%03d.ns.svc.cluster.local", i)
	}
	shared := &response{version: "v1", names: many, shared: true}
	own := &response{version: "v2", names: []string{"outbound|80||a.ns.svc.cluster.local", "ünïcode"}}
	var want []*pb.DeliveryRecord
	for i := range 200 {
		var rr *response
		switch i % 4 {
		case 0, 1:
			rr = shared
		case 2:
			rr = own
		case 3:
			rr = &response{version: "v3"}
		}
		s.recordResponse(c, resource.EndpointType, rr, fmt.Sprint("n", i), uint64(i))
		want = append(want, &pb.DeliveryRecord{Kind: pb.DeliveryRecord_RESPONSE, Frontend: "fe", ConnId: "c1", NodeId: c.proxy.ID,
			TypeUrl: resource.EndpointType, Version: rr.version, Nonce: fmt.Sprint("n", i), ResourceNames: rr.names, ThroughSeq: 42, PushId: uint64(i)})
	}
	s.record(c, pb.DeliveryRecord_RESPONSE, resource.EndpointType, "bad", "nbad", []string{"ok", "\xff"}, 999, "")
	s.record(c, pb.DeliveryRecord_ACK, resource.EndpointType, "v1", "n0", nil, 0, "")
	want = append(want, &pb.DeliveryRecord{Kind: pb.DeliveryRecord_ACK, Frontend: "fe", ConnId: "c1", NodeId: c.proxy.ID,
		TypeUrl: resource.EndpointType, Version: "v1", Nonce: "n0", ThroughSeq: 42})
	r.flush()
	<-js.PublishAsyncComplete()

	if got := testutil.Metric(reg, "pilotwire_ads_delivery_records_dropped_total"); got != 1 {
		t.Errorf("pilotwire_ads_delivery_records_dropped_total = %v, want the record that could not be marshalled", got)
	}
	got, batches := storedRecords(t, js, names)
	if batches < 2 {
		t.Fatalf("%d batches, want the records over several", batches)
	}
	if len(got) != len(want) {
		t.Fatalf("the stream holds %d records, want %d", len(got), len(want))
	}
	for i, g := range got {
		if g.GetAt() == nil {
			t.Errorf("record %d has no time", i)
		}
		g.At = nil
		if !proto.Equal(g, want[i]) {
			t.Fatalf("record %d = %v, want %v", i, g, want[i])
		}
	}
}

// storedRecords reads every delivery record the DELIVERIES stream holds,
// in stream order, and the number of batches they came in.
func storedRecords(t *testing.T, js jetstream.JetStream, names bus.Names) ([]*pb.DeliveryRecord, int) {
	t.Helper()
	msgs := natstest.ReadStream(t, js, names.DeliveriesStream())
	var out []*pb.DeliveryRecord
	for _, m := range msgs {
		recs, err := bus.DecodeDeliveries(names, m.Subject, m.Data)
		if err != nil {
			t.Fatalf("record on %s: %v", m.Subject, err)
		}
		out = append(out, recs...)
	}
	return out, len(msgs)
}
