package ads

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
	mu  sync.Mutex
	buf []byte // a DeliveryBatch in wire form, records appended as they come
	// lastLen: the length of the last batch published
	lastLen int
	n       int  // records in buf
	armed   bool // a flush is due within delay
	closed  bool
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
	if s.recorder == nil {
		return
	}
	s.recordWith(c, kind, typeURL, version, nonce, names, nil, pushID, errText)
}

// recordResponse records the send of r: a shared response's names are
// encoded once for every connection it is sent to (response.namesWire).
func (s *Server) recordResponse(c *conn, typeURL string, r *response, nonce string, pushID uint64) {
	if s.recorder == nil {
		return
	}
	var wire []byte
	if r.shared {
		wire = r.namesWire()
	}
	s.recordWith(c, pb.DeliveryRecord_RESPONSE, typeURL, r.version, nonce, r.names, wire, pushID, "")
}

// recordWith records one exchange. The record is marshalled without its
// resource names, which follow it in the batch already encoded (namesWire
// when given, else encoded here): protobuf concatenates a message's
// fields, so the batch holds the record proto.Marshal would have written,
// with its names last.
func (s *Server) recordWith(c *conn, kind pb.DeliveryRecord_Kind, typeURL, version, nonce string, names []string, namesWire []byte, pushID uint64, errText string) {
	r := s.recorder
	var through uint64 // secrets (sds.go) have no watch: they follow no model sequence
	if w := c.watches[typeURL]; w != nil {
		through = w.genSeq
	}
	rec := &pb.DeliveryRecord{
		Kind:       kind,
		Frontend:   s.id,
		ConnId:     c.id,
		NodeId:     c.proxy.ID,
		TypeUrl:    typeURL,
		Version:    version,
		Nonce:      nonce,
		ThroughSeq: through,
		PushId:     pushID,
		Error:      errText,
		At:         timestamppb.Now(),
	}
	if namesWire == nil && len(names) > 0 {
		var ok bool
		if namesWire, ok = appendNames(nil, names); !ok {
			rec.ResourceNames = names // proto.Marshal says what is wrong
		}
	}
	b, err := proto.Marshal(rec)
	if err != nil {
		r.drop("record cannot be marshalled", err, 1)
		return
	}
	r.add(b, namesWire)
}

// recordNamesField is DeliveryRecord's resource_names field number.
var recordNamesField = (&pb.DeliveryRecord{}).ProtoReflect().Descriptor().Fields().ByName("resource_names").Number()

// appendNames appends names as DeliveryRecord's resource_names field. It
// reports false, leaving b as it was, if a name is not valid UTF-8 (which
// proto.Marshal refuses).
func appendNames(b []byte, names []string) ([]byte, bool) {
	n := len(b)
	for _, name := range names {
		if !utf8.ValidString(name) {
			return b[:n], false
		}
		b = protowire.AppendTag(b, recordNamesField, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	return b, true
}

// namesWire returns r's names encoded as a DeliveryRecord's
// resource_names, kept on the shared response r for every connection it
// is sent to; nil when they cannot be encoded (the record is then
// marshalled with them, as proto.Marshal decides).
func (r *response) namesWire() []byte {
	return encodeOnce(&r.encodedNames, func() []byte {
		b, ok := appendNames(make([]byte, 0, namesSize(r.names)), r.names)
		if !ok {
			return nil
		}
		return b
	})
}

// namesSize is the encoded size of names as resource_names.
func namesSize(names []string) int {
	n := 0
	for _, name := range names {
		n += protowire.SizeTag(recordNamesField) + protowire.SizeBytes(len(name))
	}
	return n
}

// add appends one record, marshalled in two parts, to the batch being
// filled.
func (r *recorder) add(rec, names []byte) {
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(rec)+len(names))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 && len(r.buf)+size > r.maxBytes {
		r.publishLocked()
	}
	if r.buf == nil {
		// As large as the last batch (a burst fills batch after batch),
		// so appending does not grow it step by step.
		r.buf = make([]byte, 0, max(size, min(r.lastLen, r.maxBytes), 4<<10))
	}
	r.buf = protowire.AppendTag(r.buf, 1, protowire.BytesType)
	r.buf = protowire.AppendVarint(r.buf, uint64(len(rec)+len(names)))
	r.buf = append(r.buf, rec...)
	r.buf = append(r.buf, names...)
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
	r.buf, r.n, r.lastLen = nil, 0, len(buf)
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
