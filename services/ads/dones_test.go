package ads

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestDoneBatches: a batch that names a done_batch_subject is answered
// with PushDoneBatch messages there, nothing on the reply subject: every
// order exactly once (an unknown connection's as CONN_GONE). The
// frontend's heartbeat then reports the push rate it measured.
func TestDoneBatches(t *testing.T) {
	const proxies = 60
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	for range proxies {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		c.recv()
	}
	f.waitRegistered(t, proxies)
	conns := f.connIDs(t)
	seq := f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "b", 80))
	f.waitApplied(t, seq)

	batch := &pb.PushOrderBatch{Pusher: "test", DoneBatchSubject: nats.NewInbox()}
	for i, id := range append(conns, "no-such-conn") {
		batch.Orders = append(batch.Orders, &pb.PushOrder{ConnId: id, PushId: uint64(i + 1), Full: true, ThroughSeq: seq})
	}
	reply := nats.NewInbox()
	singles := make(chan *nats.Msg, len(batch.Orders))
	batches := make(chan *nats.Msg, len(batch.Orders))
	for subj, ch := range map[string]chan *nats.Msg{reply: singles, batch.DoneBatchSubject: batches} {
		sub, err := f.nc.ChanSubscribe(subj, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	b, _ := proto.Marshal(batch)
	if err := f.nc.PublishMsg(&nats.Msg{Subject: f.names.OrdersSubject(f.id), Reply: reply, Data: b}); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]pb.PushDone_Result{}
	messages := 0
	for len(got) < len(batch.Orders) {
		select {
		case m := <-batches:
			messages++
			db := &pb.PushDoneBatch{}
			if err := proto.Unmarshal(m.Data, db); err != nil {
				t.Fatal(err)
			}
			if db.GetFrontend() != f.id {
				t.Errorf("batch frontend = %q, want %q", db.GetFrontend(), f.id)
			}
			for _, d := range db.GetDones() {
				if _, dup := got[d.GetPushId()]; dup {
					t.Errorf("push %d done twice", d.GetPushId())
				}
				got[d.GetPushId()] = d.GetResult()
			}
		case m := <-singles:
			t.Fatalf("a PushDone on the reply subject (%d bytes) though the batch asked for PushDoneBatch", len(m.Data))
		case <-ctx.Done():
			t.Fatalf("only %d of %d orders done", len(got), len(batch.Orders))
		}
	}
	for i, o := range batch.Orders {
		// The clients have not ACKed their first response: their push is
		// deferred until they do, and done as DEFERRED.
		res, last := got[o.GetPushId()], i == len(batch.Orders)-1
		if last && res != pb.PushDone_CONN_GONE || !last && res != pb.PushDone_DEFERRED && res != pb.PushDone_SENT {
			t.Errorf("order %d (%s) = %v", o.GetPushId(), o.GetConnId(), res)
		}
	}
	// The counter moves once the publish has returned, which may be just
	// after the message arrived here.
	testutil.Eventually(t, fmt.Sprintf("pilotwire_ads_push_done_batches_total = %d", messages), func() bool {
		return f.gauge("pilotwire_ads_push_done_batches_total") == float64(messages)
	})
	t.Logf("%d orders answered in %d PushDoneBatch messages", len(batch.Orders), messages)

	kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	// The meter needs a millisecond of busy time for a sample, which one
	// batch of orders to clients yet to ACK may take less than on a fast
	// machine: until the heartbeat reports a rate, the same orders come
	// again under new push ids, and the busy time adds up.
	next := uint64(len(batch.Orders))
	testutil.Eventually(t, "heartbeat with a push rate", func() bool {
		if e, err := kv.Get(ctx, bus.FrontendKey(f.id)); err == nil {
			fi := &pb.FrontendInfo{}
			if proto.Unmarshal(e.Value(), fi) == nil && fi.GetPushRate() > 0 {
				return true
			}
		}
		more := &pb.PushOrderBatch{Pusher: "test", DoneBatchSubject: nats.NewInbox()}
		for _, o := range batch.Orders {
			next++
			more.Orders = append(more.Orders, &pb.PushOrder{ConnId: o.GetConnId(), PushId: next, Full: true, ThroughSeq: seq})
		}
		b, _ := proto.Marshal(more)
		if err := f.nc.PublishMsg(&nats.Msg{Subject: f.names.OrdersSubject(f.id), Reply: nats.NewInbox(), Data: b}); err != nil {
			t.Fatal(err)
		}
		return false
	})
}

// TestPushMeter: the rate counts busy time only, and samples too small to
// say anything keep the previous rate.
func TestPushMeter(t *testing.T) {
	var m pushMeter
	t0 := testTime(0)
	m.started(100, t0)
	for i := range 100 {
		m.finished(testTime(i + 1)) // 100 orders in 100 ms
	}
	if got := m.sample(testTime(5000)); got != 1000 {
		t.Fatalf("rate = %v, want 1000/s (idle time after the push not counted)", got)
	}
	m.started(10, testTime(6000))
	for range 10 {
		m.finished(testTime(6001))
	}
	if got := m.sample(testTime(7000)); got != 1000 {
		t.Errorf("rate after a 10-order sample = %v, want 1000 kept", got)
	}
	m.started(100, testTime(8000))
	for i := range 100 {
		m.finished(testTime(8000 + (i+1)/2)) // another 100 (+10) in 50 ms
	}
	// 110 orders over 51 ms busy (1 + 50), averaged with the 1000/s.
	if got, want := m.sample(testTime(9000)), (1000+110/0.051)/2; math.Abs(got-want) > 1e-6 {
		t.Errorf("rate = %v, want %v (the average with the new window)", got, want)
	}
	m.finished(testTime(9001)) // nothing outstanding: ignored
}

// testTime is ms milliseconds after an arbitrary epoch.
func testTime(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
