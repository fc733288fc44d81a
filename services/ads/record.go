package ads

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// recorder writes DeliveryRecords to the DELIVERIES stream without blocking
// a connection's loop: publishes are asynchronous and, past maxPending
// outstanding acks, records are dropped and counted. The delivery history is
// a debugging aid; the config itself never depends on it.
type recorder struct {
	js         jetstream.JetStream
	names      bus.Names
	log        *slog.Logger
	metrics    *metrics
	maxPending int
	drops      atomic.Uint64
}

// recordMaxPending bounds the delivery records awaiting their acks: three
// quarters of the JetStream context's bound (svc.PublishAsyncMaxPending,
// shared with the frontend's other asynchronous publishes), past which a
// publish blocks for up to 200 ms before it fails. A record past this
// bound is dropped at once instead.
const recordMaxPending = svc.PublishAsyncMaxPending * 3 / 4

// recordStallWait is the longest a record's publish may wait for room
// under nats.go's bound, which connection loops recording at the same
// moment can still reach.
const recordStallWait = time.Millisecond

// newRecorder is the frontend's recorder on js.
func newRecorder(js jetstream.JetStream, names bus.Names, log *slog.Logger, m *metrics) *recorder {
	return &recorder{js: js, names: names, log: log, metrics: m, maxPending: recordMaxPending}
}

func (s *Server) record(c *conn, kind pb.DeliveryRecord_Kind, typeURL, version, nonce string, names []string, pushID uint64, errText string) {
	r := s.recorder
	if r == nil {
		return
	}
	if r.js.PublishAsyncPending() >= r.maxPending {
		r.drop("too many delivery records awaiting their acks", nil)
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
	if _, err := r.js.PublishAsync(r.names.DeliverySubject(s.id, c.id), b, jetstream.WithStallWait(recordStallWait)); err != nil {
		r.drop("publish failed", err)
	}
}

// drop counts a delivery record not recorded and logs the first and every
// thousandth, so an overload is visible without flooding the log.
func (r *recorder) drop(why string, err error) {
	r.metrics.deliveryDrops.Inc()
	if n := r.drops.Add(1); n == 1 || n%1000 == 0 {
		r.log.Warn("delivery records dropped", "why", why, "err", err, "dropped", n)
	}
}
