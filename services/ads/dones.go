package ads

import (
	"context"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Completions of orders whose batch named a done_batch_subject are not
// published one by one: connection loops append them here, and one
// goroutine (flushDones) publishes whatever has gathered as one
// PushDoneBatch per subject. While it publishes, the next completions
// gather, so a push to thousands of connections costs a few messages back
// to the pusher and a lone push still goes out at once (no timer).

// queueDone adds a completion for the flusher; false if the flusher has
// stopped (the caller then publishes it alone).
func (r *orderRouter) queueDone(subject string, d *pb.PushDone) bool {
	r.dmu.Lock()
	if r.doneStopped {
		r.dmu.Unlock()
		return false
	}
	if r.pendingDones == nil {
		r.pendingDones = make(map[string][]*pb.PushDone)
	}
	r.pendingDones[subject] = append(r.pendingDones[subject], d)
	r.dmu.Unlock()
	select {
	case r.doneNotify <- struct{}{}:
	default:
	}
	return true
}

// flushDones publishes gathered completions until ctx ends, then publishes
// what is left and hands later completions to their callers.
func (r *orderRouter) flushDones(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			r.dmu.Lock()
			r.doneStopped = true
			r.dmu.Unlock()
			r.flush()
			return
		case <-r.doneNotify:
			r.flush()
		}
	}
}

// flush publishes every gathered completion, split into messages no larger
// than the server's max payload.
func (r *orderRouter) flush() {
	r.dmu.Lock()
	pending := r.pendingDones
	r.pendingDones = nil
	r.dmu.Unlock()
	limit := int(r.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	for subject, dones := range pending {
		batch := &pb.PushDoneBatch{Frontend: r.s.id}
		size := proto.Size(batch)
		for _, d := range dones {
			n := protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(d))
			if len(batch.Dones) > 0 && size+n > limit {
				r.publishDones(subject, batch)
				batch = &pb.PushDoneBatch{Frontend: r.s.id}
				size = proto.Size(batch)
			}
			batch.Dones = append(batch.Dones, d)
			size += n
		}
		r.publishDones(subject, batch)
	}
}

func (r *orderRouter) publishDones(subject string, batch *pb.PushDoneBatch) {
	b, err := proto.Marshal(batch)
	if err == nil {
		err = r.nc.PublishMsg(&nats.Msg{Subject: subject, Data: b})
	}
	if err != nil {
		r.s.metrics.doneErrors.Add(float64(len(batch.Dones)))
		r.log.Warn("publish push done batch", "subject", subject, "dones", len(batch.Dones), "err", err)
		return
	}
	r.s.metrics.doneMessages.Inc()
}
