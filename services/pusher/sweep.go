package pusher

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// sweep expires dead frontends and overdue push orders once a second.
func (p *Pusher) sweep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.expireFrontends(ctx)
		p.expireOrders()
		p.checkLatest(ctx)
	}
}

func (p *Pusher) expireFrontends(ctx context.Context) {
	now := p.now()
	type dead struct {
		fe    string
		conns []string
	}
	var deads []dead
	p.mu.Lock()
	for id, seen := range p.frontends {
		if now.Sub(seen) > p.cfg.FrontendTimeout {
			deads = append(deads, dead{fe: id, conns: p.forgetFrontendLocked(id)})
		}
	}
	p.mu.Unlock()
	for _, d := range deads {
		p.log.Warn("frontend dead, forgetting its connections", "frontend", d.fe, "connections", len(d.conns))
		// Clean its entries so a restarted pusher does not see them.
		keys := []string{bus.FrontendKey(d.fe)}
		for _, c := range d.conns {
			keys = append(keys, bus.ConnKey(d.fe, c))
		}
		for _, k := range keys {
			if err := bus.RemoveKey(ctx, p.kv, k, bus.RegistryMarkerTTL); err != nil && ctx.Err() == nil {
				p.m.registryErrors.Inc()
				p.log.Warn("clean registry entry of a dead frontend", "key", k, "err", err)
			}
		}
	}
}

func (p *Pusher) expireOrders() {
	now := p.now()
	var timedOut []*inflight
	p.mu.Lock()
	for id, f := range p.inflight {
		if !now.After(f.deadline) {
			continue
		}
		delete(p.inflight, id)
		timedOut = append(timedOut, f)
		p.m.doneTimeouts.Inc()
		c := p.conns[f.conn]
		switch {
		case c == nil:
		case !f.retried:
			// Queued while processing: MarkDone below puts it back.
			p.log.Warn("push done timed out, re-queueing once", "conn", f.conn, "through_seq", f.req.through)
			c.retried = true
			p.enqueueLocked(f.conn, f.req)
		default:
			p.log.Warn("push done timed out again; waiting for the next change or registry update", "conn", f.conn)
			c.retried = false
			c.queued = 0
		}
	}
	p.mu.Unlock()
	for _, f := range timedOut {
		p.markDone(f.frontend, f.conn)
	}
}

// checkLatest reads the newest PushRequest and, if it is newer than any the
// consumer delivered (one delivered to a pusher that died is stuck until its
// ack wait), queues every connection behind it. Level-triggered: a lost
// delivery costs at most a second.
func (p *Pusher) checkLatest(ctx context.Context) {
	last, err := bus.LastMsg(ctx, p.pushes, p.names.PushesSubject())
	if err != nil || last == nil {
		return
	}
	pr := &pb.PushRequest{}
	if proto.Unmarshal(last.Data, pr) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.GetThroughSeq() <= p.latest {
		return
	}
	p.log.Info("newer push request found by the periodic check", "through_seq", pr.GetThroughSeq(), "latest", p.latest)
	p.latest = pr.GetThroughSeq()
	p.m.latestSeq.Set(float64(p.latest))
	for id, c := range p.conns {
		p.catchUpLocked(id, c)
	}
}
