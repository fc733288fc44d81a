package ads

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestDecodeAheadKeepsOrder: records come out in the order they went in,
// whichever decoder finishes first, for one decoder and for several; after
// closeInput the receiver gets every record and then the end.
func TestDecodeAheadKeepsOrder(t *testing.T) {
	const records = 5000
	for _, c := range []struct{ n, batch int }{{1, 1}, {3, 1}, {8, 1}, {1, 7}, {3, 64}, {8, 7}} {
		n := c.n
		t.Run(fmt.Sprintf("%d decoders, batches of %d", c.n, c.batch), func(t *testing.T) {
			quit := make(chan struct{})
			defer close(quit)
			// Uneven work per record, so decoders finish out of turn.
			decode := func(r *decodedRecord, data []byte) {
				for range int(r.seq%7) * 50 {
					runtime.Gosched()
				}
				r.subject = string(data)
			}
			p := newBatchedDecodeAhead(n, 64, c.batch, 0, quit, decode)
			go func() {
				for i := range records {
					if !p.send(decodedRecord{seq: uint64(i + 1)}, []byte("s"+strconv.Itoa(i+1))) {
						return
					}
				}
				p.closeInput()
			}()
			for i := range records {
				r, ok := p.receive()
				if !ok {
					t.Fatalf("ended after %d records, want %d", i, records)
				}
				if want := uint64(i + 1); r.seq != want || r.subject != "s"+strconv.Itoa(i+1) {
					t.Fatalf("record %d: seq %d subject %q, want seq %d decoded", i, r.seq, r.subject, want)
				}
			}
			if r, ok := p.receive(); ok {
				t.Fatalf("a record after the last: %+v", r)
			}
			p.wait()
		})
	}
}

// TestDecodeAheadFlush: a batch that is not full is handed on by flush.
func TestDecodeAheadFlush(t *testing.T) {
	quit := make(chan struct{})
	defer close(quit)
	p := newBatchedDecodeAhead(2, 64, 16, 0, quit, func(r *decodedRecord, _ []byte) { r.subject = "decoded" })
	for i := range 3 {
		p.send(decodedRecord{seq: uint64(i + 1)}, nil)
	}
	if got := p.queued(); got != 0 {
		t.Fatalf("queued before the flush = %d, want 0 (the batch is not full)", got)
	}
	p.flush()
	for i := range 3 {
		r, ok := p.receive()
		if !ok || r.seq != uint64(i+1) || r.subject != "decoded" {
			t.Fatalf("record %d after the flush: %+v, %v", i, r, ok)
		}
	}
	p.closeInput()
	if r, ok := p.receive(); ok {
		t.Fatalf("a record after the last: %+v", r)
	}
	p.wait()
}

// TestDecodeAheadFlushesAWaitingBatch: with a wait bound, a batch that is
// not full goes on without a flush (the stream's records after a lost
// connection, which no "nothing pending" record follows).
func TestDecodeAheadFlushesAWaitingBatch(t *testing.T) {
	quit := make(chan struct{})
	defer close(quit)
	p := newBatchedDecodeAhead(1, 64, 16, 5*time.Millisecond, quit, func(*decodedRecord, []byte) {})
	for i := range 3 {
		p.send(decodedRecord{seq: uint64(i + 1)}, nil)
	}
	got := make(chan uint64)
	go func() {
		for range 3 {
			r, ok := p.receive()
			if !ok {
				close(got)
				return
			}
			got <- r.seq
		}
	}()
	for want := uint64(1); want <= 3; want++ {
		select {
		case seq, ok := <-got:
			if !ok || seq != want {
				t.Fatalf("received seq %d (%v), want %d", seq, ok, want)
			}
		case <-time.After(testutil.DefaultTimeout):
			t.Fatalf("record %d never went on without a flush", want)
		}
	}
	p.closeInput()
	p.wait()
}

// TestDecodeAheadStopsOnQuit: closing quit releases a sender blocked on
// full decoders and a waiting receiver, and the decoders end.
func TestDecodeAheadStopsOnQuit(t *testing.T) {
	quit := make(chan struct{})
	p := newDecodeAhead(2, 4, quit, func(*decodedRecord, []byte) {})
	sent := make(chan int)
	go func() {
		n := 0
		for p.send(decodedRecord{}, nil) {
			n++
		}
		sent <- n
	}()
	// Nothing receives: the sender fills the decoders' queues and blocks.
	// Each decoder holds one record waiting, one decoded and one in hand
	// (blocked on its full output).
	testutil.Eventually(t, "full decoders", func() bool { return p.queued() == 6 })
	close(quit)
	if n := <-sent; n != 6 {
		t.Fatalf("sent %d before blocking, want 6", n)
	}
	p.wait() // the decoders blocked on their full output end
	// What the decoders had handed on may still be received; then the end.
	for range 3 {
		if _, ok := p.receive(); !ok {
			return
		}
	}
	t.Fatal("receive did not end after quit")
}

// BenchmarkDecodeAhead replays the change records of a 1,000-service x
// 10-endpoint mesh (2,000 records) as the follower does, without NATS:
// the decoders decode, one goroutine applies in order, then one snapshot.
// decoders=1 is the follower before decodeAhead (one goroutine decoding
// beside the one applying); decoders=max is GOMAXPROCS, as it runs now.
func BenchmarkDecodeAhead(b *testing.B) {
	var raw [][]byte
	for i := range 1000 {
		name := fmt.Sprintf("s%04d", i)
		var addrs []string
		for e := range 10 {
			addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i/250, i%250, e+1))
		}
		for _, o := range []struct {
			ref *pb.ObjectRef
			obj any
		}{
			{&pb.ObjectRef{Kind: model.KindService, Namespace: "default", Name: name}, service("default", name, 80)},
			{&pb.ObjectRef{Group: "discovery.k8s.io", Kind: model.KindEndpointSlice, Namespace: "default", Name: name + "-1"}, slice("default", name, 8080, addrs...)},
		} {
			body, err := json.Marshal(o.obj)
			if err != nil {
				b.Fatal(err)
			}
			data, err := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Ref: o.ref, Object: body, Uid: name})
			if err != nil {
				b.Fatal(err)
			}
			raw = append(raw, data)
		}
	}
	f := &follower{}
	for _, n := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("decoders=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				store := model.NewStore()
				quit := make(chan struct{})
				p := newDecodeAhead(n, followQueue, quit, f.decode)
				go func() {
					for i, data := range raw {
						p.send(decodedRecord{seq: uint64(i + 1)}, data)
					}
					p.closeInput()
				}()
				p.each(func(r *decodedRecord) {
					if r.pbErr != nil {
						b.Fatal(r.pbErr)
					}
					if err := store.ApplyDecoded(&r.d, r.seq); err != nil {
						b.Fatal(err)
					}
				})
				p.wait()
				close(quit)
				if got := len(store.Snapshot().Services); got != 1000 {
					b.Fatalf("%d services, want 1000", got)
				}
			}
			b.ReportMetric(float64(len(raw)*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
