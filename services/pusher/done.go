package pusher

import (
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// doneBatchSubject is where frontends send this pusher PushDoneBatch
// messages (every PushOrderBatch names it): <prefix>.pusher.<id>.done.batch.
// Frontends that predate batched completions send one PushDone per order
// to the reply subject, DoneSubject, which the pusher still reads.
func doneBatchSubject(names bus.Names, pusher string) string {
	return names.DoneSubject(pusher) + ".batch"
}

// handleDone takes a frontend's PushDone report (a frontend that predates
// PushDoneBatch).
func (p *Pusher) handleDone(m *nats.Msg) {
	d := &pb.PushDone{}
	if err := proto.Unmarshal(m.Data, d); err != nil {
		p.m.badMessages.WithLabelValues("push_done").Inc()
		p.log.Error("undecodable push done", "err", err)
		return
	}
	p.mu.Lock()
	f := p.applyDoneLocked(d)
	p.mu.Unlock()
	if f != nil {
		p.markDone(f.frontend, f.conn)
	}
}

// handleDoneBatch takes a frontend's PushDoneBatch: every completion under
// one lock, then their throttle slots freed together.
func (p *Pusher) handleDoneBatch(m *nats.Msg) {
	b := &pb.PushDoneBatch{}
	if err := proto.Unmarshal(m.Data, b); err != nil {
		p.m.badMessages.WithLabelValues("push_done_batch").Inc()
		p.log.Error("undecodable push done batch", "err", err)
		return
	}
	ended := make([]*inflight, 0, len(b.GetDones()))
	p.mu.Lock()
	for _, d := range b.GetDones() {
		if f := p.applyDoneLocked(d); f != nil {
			ended = append(ended, f)
		}
	}
	p.mu.Unlock()
	p.markDoneAll(ended)
}

// applyDoneLocked applies one completion. It returns the order it ended,
// whose processing the caller must mark done once mu is released, or nil.
func (p *Pusher) applyDoneLocked(d *pb.PushDone) *inflight {
	p.m.dones.WithLabelValues(d.GetResult().String()).Inc()
	f, ok := p.inflight[d.GetPushId()]
	if !ok || f.conn != d.GetConnId() {
		// Already given up on (timed out, or done by the registry's word):
		// what it says of the connection is still true.
		if c := p.conns[d.GetConnId()]; c != nil && succeeded(d.GetResult()) {
			p.syncedLocked(c, d.GetSyncedSeq())
		}
		return nil
	}
	p.endLocked(d.GetPushId(), f)
	c := p.conns[f.conn]
	switch {
	case succeeded(d.GetResult()):
		if c != nil {
			p.syncedLocked(c, d.GetSyncedSeq())
		}
	case d.GetResult() == pb.PushDone_CONN_GONE:
		p.forgetConnLocked(f.conn)
	default:
		p.log.Warn("push failed on frontend", "conn", f.conn, "frontend", d.GetFrontend(), "err", d.GetError())
		if c != nil {
			p.lostLocked(f.conn, c, LostFailed)
		}
	}
	return f
}

// markDoneAll ends the processing of every order in fs in its frontend's
// queue, then updates the queue metrics once.
func (p *Pusher) markDoneAll(fs []*inflight) {
	if len(fs) == 0 {
		return
	}
	var q interface{ MarkDone(string) }
	fe := ""
	for _, f := range fs {
		if q == nil || f.frontend != fe {
			fe = f.frontend
			if fq := p.queues.lookup(fe); fq != nil {
				q = fq
			} else {
				q = nil
				continue
			}
		}
		q.MarkDone(f.conn)
	}
	p.updateQueueMetrics()
}
