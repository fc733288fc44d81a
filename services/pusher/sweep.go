package pusher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// sweepInterval is how often sweep runs; a sweep that starts more than
// lateSweep later than that after the previous one started was held up
// (the process stopped, or starved of CPU).
const (
	sweepInterval = time.Second
	lateSweep     = 2 * time.Second
)

// sweep expires dead frontends and overdue push orders once a second.
// Each sweep reads the clock once, as it starts, and every step judges by
// that time: a pause anywhere inside a sweep (SIGSTOP, starvation) counts
// against nothing in it, and the next sweep, whose start is that much
// later than this one's, finds itself late and discounts the pause.
func (p *Pusher) sweep(ctx context.Context) {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	last := p.now() // when the previous sweep started
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := p.now()
		if late := now.Sub(last) - sweepInterval; late > lateSweep {
			p.discountPause(late)
		}
		last = now
		if p.cfg.afterLateCheck != nil {
			p.cfg.afterLateCheck()
		}
		p.expireFrontends(ctx, now)
		p.relearnFrontends(ctx)
		p.expireOrders(now)
		p.checkLatest(ctx)
		p.resync(now)
		if p.cfg.afterSweep != nil {
			p.cfg.afterSweep()
		}
	}
}

// discountPause moves every frontend's last heartbeat and every push
// deadline later by d, the time the sweep was held up: heartbeats and
// dones sent meanwhile are queued behind it, unread, and a pusher resumed
// from SIGSTOP must not declare every frontend dead before it reads them.
// A frontend silent for a timeout of running time is still forgotten.
func (p *Pusher) discountPause(d time.Duration) {
	p.mu.Lock()
	for id, seen := range p.frontends {
		p.frontends[id] = seen.Add(d)
	}
	for _, f := range p.inflight {
		f.deadline = f.deadline.Add(d)
	}
	p.mu.Unlock()
	p.m.lateSweeps.Inc()
	p.log.Warn("sweep ran late (the process was stopped or starved): the delay is not counted against frontends' heartbeats or push deadlines", "late", d.Round(time.Millisecond))
}

// forgetFor bounds how long a forgotten frontend is remembered for
// relearnFrontends (so the set stays bounded by the frontends of the last
// hour).
const forgetFor = time.Hour

func (p *Pusher) expireFrontends(ctx context.Context, now time.Time) {
	p.mu.Lock()
	for id, at := range p.forgotten {
		if now.Sub(at) > forgetFor {
			delete(p.forgotten, id)
		}
	}
	for id, c := range p.cleanups {
		if now.Sub(c.since) > forgetFor {
			delete(p.cleanups, id)
			p.log.Error("gave up removing the registry entries of a dead frontend", "frontend", id, "entries", len(c.conns)+1, "after", forgetFor)
		}
	}
	var silent []string
	quiet := 0 // frontends that missed a heartbeat: quiet for half the timeout
	for id, seen := range p.frontends {
		if now.Sub(seen) > p.cfg.FrontendTimeout {
			silent = append(silent, id)
		}
		if now.Sub(seen) > p.cfg.FrontendTimeout/2 {
			quiet++
		}
	}
	// Every frontend silent at once is the registry (PW_REGISTRY without a
	// leader takes no heartbeat), not the frontends: forgetting them all
	// would only make the pusher read every connection back when it
	// returns. Their last heartbeats are out of phase, so they pass the
	// timeout a sweep or two apart: every frontend having missed one when
	// the first passes it counts as silent at once. Expiry waits until one
	// is heard from again. With a single frontend the two cannot be told
	// apart, and a silent one is expired.
	suspend := len(silent) >= 1 && len(p.frontends) >= 2 && quiet == len(p.frontends)
	if suspend != p.expirySuspended {
		p.expirySuspended = suspend
		if suspend {
			p.m.expirySuspended.Set(1)
			p.log.Warn("every frontend missed a heartbeat and some are past the timeout: the registry is not delivering heartbeats (no leader?); no frontend is expired until one is heard from", "frontends", len(p.frontends), "past_timeout", len(silent), "timeout", p.cfg.FrontendTimeout)
		} else {
			p.m.expirySuspended.Set(0)
			p.log.Info("a frontend was heard from: frontend expiry resumes")
		}
	}
	if suspend {
		silent = nil
	}
	for _, id := range silent {
		conns := p.forgetFrontendLocked(id)
		p.forgotten[id] = now
		p.cleanups[id] = &cleanup{feRev: p.feRevs[id], conns: conns, since: now}
		p.log.Warn("frontend dead, forgetting its connections", "frontend", id, "connections", len(conns))
	}
	p.mu.Unlock()
	p.cleanFrontends(ctx)
}

// cleanup is what is left to remove of a forgotten frontend's registry
// entries: its own entry at feRev (0: none seen) and its connections'
// entries at the revisions last seen.
type cleanup struct {
	feRev uint64
	conns map[string]uint64
	since time.Time
}

// cleanFrontends removes the registry entries of forgotten frontends, so a
// restarted pusher does not see them. A frontend that is alive after all
// (its heartbeats only stopped reaching the registry) must keep them, or
// its proxies are never pushed again, so removals are conditional:
//   - its own entry first, and only at the revision last seen: a newer
//     heartbeat keeps it, and the cleanup ends there;
//   - its connections' entries only once its own is gone (which a live
//     frontend notices, and then writes them all again), each only at the
//     revision last seen, so one written again meanwhile stays.
//
// A removal that fails for another reason is logged, counted and retried
// on the next sweep.
func (p *Pusher) cleanFrontends(ctx context.Context) {
	p.mu.Lock()
	todo := make(map[string]cleanup, len(p.cleanups))
	for fe, c := range p.cleanups {
		todo[fe] = cleanup{feRev: c.feRev, conns: maps.Clone(c.conns)}
	}
	p.mu.Unlock()
	for fe, c := range todo {
		if ctx.Err() != nil {
			return
		}
		feDone, left := p.removeEntries(ctx, fe, c)
		p.mu.Lock()
		if cur, ok := p.cleanups[fe]; ok {
			if feDone {
				cur.feRev = 0
			}
			if left == nil {
				delete(p.cleanups, fe)
			} else {
				cur.conns = left
			}
		}
		p.mu.Unlock()
	}
}

// removeEntries makes one pass over a cleanup. It reports whether the
// frontend's own entry is gone and returns the connection entries still to
// remove (nil: none, the cleanup is over).
func (p *Pusher) removeEntries(ctx context.Context, fe string, c cleanup) (bool, map[string]uint64) {
	key := bus.FrontendKey(fe)
	if c.feRev != 0 {
		err := bus.RemoveKeyAt(ctx, p.kv, key, c.feRev, bus.RegistryMarkerTTL)
		switch {
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			p.log.Info("frontend wrote its registry entry again: its entries are kept", "frontend", fe)
			return false, nil
		case err != nil:
			if ctx.Err() == nil {
				p.m.registryErrors.Inc()
				p.log.Warn("clean registry entry of a dead frontend, retrying", "key", key, "err", err)
			}
			return false, c.conns
		}
	}
	left := make(map[string]uint64)
	for conn, rev := range c.conns {
		key := bus.ConnKey(fe, conn)
		err := bus.RemoveKeyAt(ctx, p.kv, key, rev, bus.RegistryMarkerTTL)
		switch {
		case err == nil, errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			// Removed, or written again since: either way not ours to remove.
		default:
			if ctx.Err() == nil {
				p.m.registryErrors.Inc()
				p.log.Warn("clean registry entry of a dead frontend, retrying", "key", key, "err", err)
			}
			left[conn] = rev
		}
	}
	if len(left) == 0 {
		return true, nil
	}
	return true, left
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

func (p *Pusher) expireOrders(now time.Time) {
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
			p.lostLocked(f.conn, c, LostTimeout)
		}
	}
	p.mu.Unlock()
	// Free their throttle slots.
	for _, f := range timedOut {
		p.markDone(f.frontend, f.conn)
	}
}

// resync queues a catch-up for every connection behind the latest request,
// with nothing in flight or queued to bring it there, whose resync is due.
// A connection found behind with none scheduled (say, its request was
// scoped out and an older one it needs has not arrived) gets one after
// BehindGrace, longer than a debounce window, so an overtaken request is
// waited for. Level-triggered and
// forever: nothing stays behind for good (issue 12 row 9).
func (p *Pusher) resync(now time.Time) {
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
		if c.pushID != 0 || c.queued >= p.latest {
			// An order in flight, or a push queued behind the throttle
			// that brings it to the latest: its done (or timeout)
			// decides, and a loss then waits ResyncInterval, not the
			// behind grace's backoff.
			continue
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
