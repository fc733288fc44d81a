package ads

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestDecodeAheadKeepsOrder: records come out in the order they went in,
// whichever decoder finishes first, for one decoder and for several; after
// closeInput the receiver gets every record and then the end.
func TestDecodeAheadKeepsOrder(t *testing.T) {
	const records = 5000
	for _, n := range []int{1, 3, 8} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			quit := make(chan struct{})
			defer close(quit)
			// Uneven work per record, so decoders finish out of turn.
			decode := func(r *decodedRecord, data []byte) {
				for range int(r.seq%7) * 50 {
					runtime.Gosched()
				}
				r.subject = string(data)
			}
			p := newDecodeAhead(n, 64, quit, decode)
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
	testutil.Eventually(t, "full decoders", func() bool { return p.queued() == 4 })
	close(quit)
	if n := <-sent; n < 4 {
		t.Fatalf("sent %d before blocking, want at least 4", n)
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
