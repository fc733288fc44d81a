package pusher

import (
	"context"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// watchRegistry follows the registry bucket: frontend heartbeats and
// connections. After the initial values it queues every connection that is
// behind the latest PushRequest.
func (p *Pusher) watchRegistry(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := p.kv.WatchAll(ctx)
		if err != nil {
			p.log.Warn("watch registry", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				p.initialSynced()
				continue
			}
			p.applyEntry(e)
		}
		_ = w.Stop()
	}
}

func (p *Pusher) initialSynced() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.synced = true
	behind := 0
	for id, c := range p.conns {
		if c.synced < p.latest {
			behind++
		}
		p.catchUpLocked(id, c)
	}
	p.log.Info("registry loaded", "frontends", len(p.frontends), "connections", len(p.conns), "behind", behind, "latest_seq", p.latest)
}

func (p *Pusher) applyEntry(e jetstream.KeyValueEntry) {
	kind, fe, conn, ok := parseKey(e.Key())
	if !ok {
		return
	}
	deleted := e.Operation() != jetstream.KeyValuePut
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch kind {
	case "fe":
		if deleted {
			p.forgetFrontendLocked(fe)
			return
		}
		info := &pb.FrontendInfo{}
		if err := proto.Unmarshal(e.Value(), info); err != nil {
			p.m.badMessages.WithLabelValues("registry").Inc()
			return
		}
		p.frontends[fe] = now
		p.m.frontends.Set(float64(len(p.frontends)))
	case "conn":
		if deleted {
			p.forgetConnLocked(conn)
			return
		}
		info := &pb.ConnectionInfo{}
		if err := proto.Unmarshal(e.Value(), info); err != nil {
			p.m.badMessages.WithLabelValues("registry").Inc()
			return
		}
		if _, known := p.frontends[fe]; !known {
			// Give a frontend whose heartbeat has not been seen yet one
			// timeout to show up.
			p.frontends[fe] = now
		}
		c, ok := p.conns[conn]
		if !ok {
			c = &connState{}
			p.conns[conn] = c
			p.m.connections.Set(float64(len(p.conns)))
		}
		if ok && !sameWatches(c.info, info) {
			// Pushes scoped against the old watches may have skipped what
			// the new ones need (an entry written after a push for a
			// service it just subscribed to): the entry's own synced_seq
			// holds, even below what done reports said.
			c.synced = min(c.synced, info.GetSyncedSeq())
		} else {
			c.synced = max(c.synced, info.GetSyncedSeq())
		}
		c.info = info
		p.catchUpLocked(conn, c)
	}
}

// sameWatches reports whether two entries of a connection watch the same
// things (what the pusher scopes by).
func sameWatches(a, b *pb.ConnectionInfo) bool {
	aw, bw := a.GetWatches(), b.GetWatches()
	if len(aw) != len(bw) {
		return false
	}
	for i := range aw {
		if aw[i].GetTypeUrl() != bw[i].GetTypeUrl() || aw[i].GetWildcard() != bw[i].GetWildcard() || !slices.Equal(aw[i].GetNames(), bw[i].GetNames()) {
			return false
		}
	}
	return true
}

// forgetFrontendLocked drops a frontend and every connection it held.
func (p *Pusher) forgetFrontendLocked(fe string) []string {
	delete(p.frontends, fe)
	var gone []string
	for id, c := range p.conns {
		if c.info.GetFrontend() == fe {
			p.forgetConnLocked(id)
			gone = append(gone, id)
		}
	}
	p.queues.drop(fe)
	p.m.frontends.Set(float64(len(p.frontends)))
	return gone
}

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
			if err := p.kv.Delete(ctx, k); err != nil && ctx.Err() == nil {
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

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
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
