package debouncer

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// fakeMsg is a delivered change message; it records its acks.
type fakeMsg struct {
	jetstream.Msg // unused methods panic
	seq           uint64
	data          []byte
}

func (m *fakeMsg) Data() []byte    { return m.data }
func (m *fakeMsg) Subject() string { return "pw.changes.c1.Pod.ns.x" }
func (m *fakeMsg) Reply() string {
	return fmt.Sprintf("$JS.ACK.PW_CHANGES.debouncer.1.%d.%d.0.0", m.seq, m.seq)
}
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq, Consumer: m.seq}}, nil
}

// TestHeldChangesKeepNoBodies (issue 12 row 14): a change merged into a
// pending request is held until the request is published, but only by its
// sequence and reply subject, never with its body.
func TestHeldChangesKeepNoBodies(t *testing.T) {
	dcfg := debounce.DefaultConfig()
	dcfg.DebounceAfter = time.Hour
	dcfg.DebounceMax = time.Hour
	l := newLoop(dcfg, nil, slog.New(slog.DiscardHandler), newMetrics(prometheus.NewRegistry()), make(chan emitted, 1))
	const n, size = 300, 100 << 10
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	now := time.Now()
	for i := range n {
		ref := &pb.ObjectRef{Version: "v1", Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("p-%d", i)}
		data, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: pb.Op_OP_UPDATE, Object: make([]byte, size)})
		if err := l.add(&fakeMsg{seq: uint64(i + 1), data: data}, now); err != nil {
			t.Fatal(err)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := l.deb.Pending(); got != n {
		t.Fatalf("%d changes pending, want %d", got, n)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > n*size/10 {
		t.Errorf("holding %d changes of %d KiB grew the heap by %d KiB, want well under their bodies (%d KiB)", n, size>>10, grown>>10, n*size>>10)
	}
	runtime.KeepAlive(l)
}
