package ads

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// recorder writes DeliveryRecords to the DELIVERIES stream without blocking
// a connection's loop. Records are gathered into DeliveryBatches, one
// message per recordBatchBytes or per recordBatchDelay, on the frontend's
// batch subject: a push to thousands of connections costs the stream tens
// of messages, not one per response and one per ACK. Publishes are
// asynchronous and, past maxPending outstanding acks, a batch is dropped
// and its records counted. The delivery history is a debugging aid; the
// config itself never depends on it.
type recorder struct {
	js         jetstream.JetStream
	log        *slog.Logger
	metrics    *metrics
	subject    string
	maxPending int
	maxBytes   int
	delay      time.Duration
	drops      atomic.Uint64

	// mu orders the batches: a batch is published while it is held, so
	// the stream stores each connection's records in the order its loop
	// recorded them.
	mu     sync.Mutex
	buf    []byte // a DeliveryBatch in wire form, records appended as they come
	n      int    // records in buf
	armed  bool   // a flush is due within delay
	closed bool
}

// recordMaxPending bounds the delivery batches awaiting their acks: three
// quarters of the JetStream context's bound (svc.PublishAsyncMaxPending,
// shared with the frontend's other asynchronous publishes), past which a
// publish blocks for up to 200 ms before it fails. A batch past this
// bound is dropped at once instead.
const recordMaxPending = svc.PublishAsyncMaxPending * 3 / 4

// recordStallWait is the longest a batch's publish may wait for room
// under nats.go's bound.
const recordStallWait = time.Millisecond

// recordBatchBytes and recordBatchDelay bound a batch: it is published
// once it holds this many bytes, or this long after its first record.
const (
	recordBatchBytes = 64 << 10
	recordBatchDelay = 10 * time.Millisecond
)

// newRecorder is the recorder of frontend on js.
func newRecorder(js jetstream.JetStream, names bus.Names, frontend string, log *slog.Logger, m *metrics) *recorder {
	return &recorder{js: js, log: log, metrics: m, subject: names.DeliveryBatchSubject(frontend),
		maxPending: recordMaxPending, maxBytes: recordBatchBytes, delay: recordBatchDelay}
}

func (s *Server) record(c *conn, kind pb.DeliveryRecord_Kind, typeURL, version, nonce string, names []string, pushID uint64, errText string) {
	r := s.recorder
	if r == nil {
		return
	}
	rec := &pb.DeliveryRecord{
		Kind:          kind,
		Frontend:      s.id,
		ConnId:        c.id,
		NodeId:        c.proxy.ID,
		TypeUrl:       typeURL,
		Version:       version,
		Nonce:         nonce,
		ResourceNames: names,
		ThroughSeq:    c.watches[typeURL].genSeq,
		PushId:        pushID,
		Error:         errText,
		At:            timestamppb.Now(),
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		r.log.Error("marshal delivery record", "err", err)
		return
	}
	r.add(b)
}

// add appends one marshalled record to the batch being filled.
func (r *recorder) add(rec []byte) {
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(rec))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 && len(r.buf)+size > r.maxBytes {
		r.publishLocked()
	}
	if r.buf == nil {
		r.buf = make([]byte, 0, max(size, 4<<10))
	}
	r.buf = protowire.AppendTag(r.buf, 1, protowire.BytesType)
	r.buf = protowire.AppendBytes(r.buf, rec)
	r.n++
	switch {
	case r.closed || len(r.buf) >= r.maxBytes:
		r.publishLocked()
	case !r.armed:
		r.armed = true
		time.AfterFunc(r.delay, r.flushDue)
	}
}

// flushDue publishes the batch whose delay is up.
func (r *recorder) flushDue() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
	r.publishLocked()
}

// flush publishes what the recorder holds.
func (r *recorder) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishLocked()
}

// close publishes what the recorder holds and waits up to wait for the
// stream to acknowledge it; records that come later are published one
// batch each.
func (r *recorder) close(wait time.Duration) {
	r.mu.Lock()
	r.closed = true
	r.publishLocked()
	r.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.js.PublishAsyncComplete():
	case <-t.C:
		r.log.Warn("delivery records still awaiting their acks at shutdown", "pending", r.js.PublishAsyncPending())
	}
}

// publishLocked publishes the batch being filled, if any; r.mu is held.
func (r *recorder) publishLocked() {
	if r.n == 0 {
		return
	}
	buf, n := r.buf, r.n
	// The publish keeps buf until the stream acknowledges it.
	r.buf, r.n = nil, 0
	if r.js.PublishAsyncPending() >= r.maxPending {
		r.drop("too many delivery batches awaiting their acks", nil, n)
		return
	}
	if _, err := r.js.PublishAsync(r.subject, buf, jetstream.WithStallWait(recordStallWait)); err != nil {
		r.drop("publish failed", err, n)
	}
}

// drop counts n delivery records not recorded and logs the first drop and
// one per thousand records, so an overload is visible without flooding the
// log.
func (r *recorder) drop(why string, err error, n int) {
	r.metrics.deliveryDrops.Add(float64(n))
	after := r.drops.Add(uint64(n))
	if before := after - uint64(n); before == 0 || before/1000 != after/1000 {
		r.log.Warn("delivery records dropped", "why", why, "err", err, "records", n, "dropped", after)
	}
}
