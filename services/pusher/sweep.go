package pusher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
		p.relearnFrontends(ctx)
		p.expireOrders()
		p.checkLatest(ctx)
		p.resync()
	}
}

// forgetFor bounds how long a forgotten frontend is remembered for
// relearnFrontends (so the set stays bounded by the frontends of the last
// hour).
const forgetFor = time.Hour

func (p *Pusher) expireFrontends(ctx context.Context) {
	now := p.now()
	type dead struct {
		fe    string
		conns []string
	}
	var deads []dead
	p.mu.Lock()
	for id, at := range p.forgotten {
		if now.Sub(at) > forgetFor {
			delete(p.forgotten, id)
		}
	}
	for id, seen := range p.frontends {
		if now.Sub(seen) > p.cfg.FrontendTimeout {
			deads = append(deads, dead{fe: id, conns: p.forgetFrontendLocked(id)})
			p.forgotten[id] = now
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

// relearnFrontends reads back from the registry the connections of every
// frontend heard from again after it was forgotten. Its heartbeats stop
// reaching the registry when the bucket has no leader (a NATS node lost),
// and the cleanup of its entries then fails for the same reason: the
// frontend never sees its entry removed, so it does not register its
// connections again, and without this they would never be pushed.
func (p *Pusher) relearnFrontends(ctx context.Context) {
	p.mu.Lock()
	fes := make([]string, 0, len(p.relearn))
	for fe := range p.relearn {
		fes = append(fes, fe)
		delete(p.relearn, fe)
	}
	p.mu.Unlock()
	for _, fe := range fes {
		n, err := p.readConns(ctx, fe)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.m.registryErrors.Inc()
			p.log.Warn("read back the connections of a frontend heard from again, retrying", "frontend", fe, "err", err)
			p.mu.Lock()
			p.relearn[fe] = true
			p.mu.Unlock()
			continue
		}
		p.log.Info("frontend heard from again after it was forgotten: connections read back from the registry", "frontend", fe, "connections", n)
	}
}

// readConns applies the registry entries of every connection of fe.
func (p *Pusher) readConns(ctx context.Context, fe string) (int, error) {
	filter := bus.ConnKeyKind + "." + bus.EscapeToken(fe) + ".>"
	w, err := p.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("watch %s: %w", filter, err)
	}
	defer func() { _ = w.Stop() }()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-t.C:
			return n, fmt.Errorf("watch %s: no end of the initial values within 10s", filter)
		case e, ok := <-w.Updates():
			if !ok {
				return n, fmt.Errorf("watch %s: closed", filter)
			}
			if e == nil { // the initial values are all in
				return n, nil
			}
			p.applyEntry(e)
			n++
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
		p.endLocked(id, f)
		timedOut = append(timedOut, f)
		p.m.doneTimeouts.Inc()
		if c := p.conns[f.conn]; c != nil {
			p.lostLocked(f.conn, c, "timeout")
		}
	}
	p.mu.Unlock()
	// Free their throttle slots.
	for _, f := range timedOut {
		p.markDone(f.frontend, f.conn)
	}
}

// resync queues a catch-up for every connection behind the latest request
// with no order in flight whose resync is due. A connection found behind
// with none scheduled (say, its request was scoped out and an older one it
// needs has not arrived) gets one after BehindGrace, longer than a debounce
// window, so an overtaken request is waited for. Level-triggered and
// forever: nothing stays behind for good (issue 12 row 9).
func (p *Pusher) resync() {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.synced {
		return
	}
	behind, due := 0, 0
	for id, c := range p.conns {
		if c.synced >= p.latest {
			c.resyncAt, c.backoff = time.Time{}, 0
			continue
		}
		behind++
		if c.pushID != 0 {
			continue // its done (or timeout) decides
		}
		if c.resyncAt.IsZero() {
			wait := max(p.cfg.BehindGrace, c.backoff)
			c.resyncAt = now.Add(wait)
			c.backoff = min(2*wait, p.cfg.ResyncMax)
			continue
		}
		if now.Before(c.resyncAt) {
			continue
		}
		due++
		c.resyncAt = time.Time{}
		p.enqueueLocked(id, catchUp(p.latest, now))
	}
	p.m.behind.Set(float64(behind))
	if due > 0 {
		p.m.resyncs.Add(float64(due))
		p.log.Info("resyncing connections behind the latest request", "connections", due, "behind", behind, "latest_seq", p.latest)
	}
}

// checkLatest reads the newest PushRequest and, if the consumer has not
// delivered it for longer than its ack wait (one delivered to a pusher that
// died is stuck until then), queues every connection behind it. Before
// that, the consumer is assumed to be on its way: catching up at once would
// turn every scoped request the check happens to beat into a full push for
// every connection (issue 12 row 13). Level-triggered: a lost delivery
// costs at most the ack wait and a second.
func (p *Pusher) checkLatest(ctx context.Context) {
	last, err := bus.LastMsg(ctx, p.pushes, p.names.PushesSubject())
	if err != nil || last == nil {
		return
	}
	pr := &pb.PushRequest{}
	if proto.Unmarshal(last.Data, pr) != nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.GetThroughSeq() <= p.latest {
		p.aheadSince = time.Time{}
		return
	}
	if p.aheadSince.IsZero() {
		p.aheadSince = now
		return
	}
	if now.Sub(p.aheadSince) < pushesAckWait {
		return
	}
	p.aheadSince = time.Time{}
	p.log.Warn("consumer stalled past its ack wait: catching up with the newest push request", "through_seq", pr.GetThroughSeq(), "latest", p.latest)
	p.m.stalls.Inc()
	p.latest = pr.GetThroughSeq()
	p.m.latestSeq.Set(float64(p.latest))
	for id, c := range p.conns {
		p.catchUpLocked(id, c)
	}
}
