package ads

import (
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/bus"
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
}

func (s *Server) record(c *conn, kind pb.DeliveryRecord_Kind, typeURL, version, nonce string, names []string, pushID uint64, errText string) {
	r := s.recorder
	if r == nil {
		return
	}
	if r.js.PublishAsyncPending() >= r.maxPending {
		r.metrics.deliveryDrops.Inc()
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
	if _, err := r.js.PublishAsync(r.names.DeliverySubject(s.id, c.id), b); err != nil {
		r.metrics.deliveryDrops.Inc()
	}
}
