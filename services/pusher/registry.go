package pusher

import (
	"context"
	"slices"
	"strings"
	"time"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// watchRegistry follows the registry bucket: frontend heartbeats and
// connections. After the initial values it queues every connection that is
// behind the latest PushRequest.
func (p *Pusher) watchRegistry(ctx context.Context) {
	for ctx.Err() == nil {
		var w jetstream.KeyWatcher
		err := svc.Retry(ctx, svc.RetryOptions{
			First: time.Second, Max: time.Second,
			Log: p.log, Msg: "watch registry, retrying", Failures: p.m.registryErrors,
		}, func() (err error) {
			w, err = p.kv.WatchAll(ctx)
			return err
		})
		if err != nil {
			return // ctx ended
		}
		// The watcher does not follow ctx (nats.go uses it to set up only):
		// stopping it closes Updates, so the loop ends with ctx.
		stopWatch := context.AfterFunc(ctx, func() { _ = w.Stop() })
		for e := range w.Updates() {
			if e == nil {
				p.initialSynced()
				continue
			}
			p.applyEntry(e)
		}
		stopWatch()
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
	kind, fe, conn, ok := bus.ParseRegistryKey(e.Key())
	if !ok {
		return
	}
	deleted := e.Operation() != jetstream.KeyValuePut
	// Decoded before taking the lock: a registry storm (every sidecar of
	// a frontend syncing) then holds up pushes and dones only for the
	// bookkeeping, not for protobuf.
	var (
		feInfo   *pb.FrontendInfo
		connInfo *pb.ConnectionInfo
		edsList  *nameList
		badValue bool
	)
	if !deleted {
		switch kind {
		case bus.FrontendKeyKind:
			feInfo = &pb.FrontendInfo{}
			badValue = proto.Unmarshal(e.Value(), feInfo) != nil
		case bus.ConnKeyKind:
			connInfo = &pb.ConnectionInfo{}
			if badValue = proto.Unmarshal(e.Value(), connInfo) != nil; !badValue {
				edsList = p.internInfo(connInfo)
			}
		}
	}
	now := p.now()
	var freed []*inflight // orders the entry shows completed, or lost
	p.mu.Lock()
	defer func() {
		p.mu.Unlock()
		p.markDoneAll(freed)
	}()
	switch kind {
	case bus.FrontendKeyKind:
		if deleted {
			p.forgetFrontendLocked(fe)
			delete(p.feRevs, fe)
			delete(p.feReconnects, fe)
			return
		}
		p.feRevs[fe] = e.Revision()
		if _, ok := p.cleanups[fe]; ok {
			// Alive after all: its entries stay.
			delete(p.cleanups, fe)
			p.log.Info("frontend heard from again: its registry entries are kept", "frontend", fe)
		}
		if badValue {
			p.m.badMessages.WithLabelValues("registry").Inc()
			return
		}
		info := feInfo
		if _, ok := p.forgotten[fe]; ok {
			// Forgotten for a silent heartbeat, heard from again: its
			// connections may not be written again (relearnFrontends).
			delete(p.forgotten, fe)
			p.relearn[fe] = true
		}
		if seen, ok := p.feReconnects[fe]; ok && info.GetNatsReconnects() > seen {
			freed = p.reconnectedLocked(fe)
		}
		p.feReconnects[fe] = info.GetNatsReconnects()
		p.frontends[fe] = now
		p.m.frontends.Set(float64(len(p.frontends)))
		p.queues.setCapacity(fe, info)
	case bus.ConnKeyKind:
		if deleted {
			p.forgetConnLocked(conn)
			return
		}
		if badValue {
			p.m.badMessages.WithLabelValues("registry").Inc()
			return
		}
		info := connInfo
		if _, known := p.frontends[fe]; !known {
			// Give a frontend whose heartbeat has not been seen yet one
			// timeout to show up.
			p.frontends[fe] = now
		}
		c, ok := p.conns[conn]
		if !ok {
			// Requests this pusher handled before (or a predecessor did)
			// may have changed the scope its entry reports.
			c = &connState{scopeChange: p.latest}
			p.conns[conn] = c
			p.m.connections.Set(float64(len(p.conns)))
		}
		c.rev = e.Revision()
		if ok && !sameWatches(c.info, info) {
			// Pushes scoped against the old watches may have skipped what
			// the new ones need (an entry written after a push for a
			// service it just subscribed to): the entry's own synced_seq
			// holds, even below what done reports said, and the ranges
			// scoped out against the old watches no longer count
			// (issue 11 #2).
			c.synced, c.skipped = min(c.synced, info.GetSyncedSeq()), nil
			c.reorder = true
			c.setInfo(info, edsList)
			p.syncedLocked(c, c.synced)
		} else {
			c.setInfo(info, edsList)
			p.syncedLocked(c, info.GetSyncedSeq())
		}
		if f := p.inflight[c.pushID]; f != nil && c.synced >= f.req.through {
			// The frontend pushed it (its entry says so) and the done
			// has not come: free the throttle slot now (issue 12 row 9).
			p.endLocked(c.pushID, f)
			p.m.registryDones.Inc()
			freed = append(freed, f)
		}
		p.catchUpLocked(conn, c)
	}
}

// internInfo replaces the strings a connection's registry entry shares
// with the rest of the fleet by the pusher's one copy of each: the names
// every sidecar of a mesh subscribes to (100 load assignments each on the
// benchmark's mesh), versions, type URLs, scopes. The pusher holds every
// connection's entry, so without this it held each name once per
// connection. Lists of names are shared whole (nameLists); it returns the
// list of the connection's load assignment watch when that is its only
// one and names what it watches, for the scoping index.
func (p *Pusher) internInfo(info *pb.ConnectionInfo) *nameList {
	t := &p.strings
	info.Frontend, info.Namespace, info.ClusterId = t.String(info.Frontend), t.String(info.Namespace), t.String(info.ClusterId)
	info.ProxyType, info.Generator = t.String(info.ProxyType), t.String(info.Generator)
	var eds *nameList
	edsWatches := 0
	for _, w := range info.Watches {
		w.TypeUrl, w.AckedVersion, w.SentVersion = t.String(w.TypeUrl), t.String(w.AckedVersion), t.String(w.SentVersion)
		if len(w.Names) == 0 {
			if w.TypeUrl == resource.EndpointType {
				edsWatches++
			}
			continue
		}
		l := p.lists.intern(w.Names, t)
		w.Names = l.names
		if w.TypeUrl == resource.EndpointType {
			edsWatches++
			if !w.Wildcard {
				eds = l
			}
		}
	}
	if sc := info.Scope; sc != nil {
		sc.RootNamespace = t.String(sc.RootNamespace)
		for i, n := range sc.Imports {
			sc.Imports[i] = t.String(n)
		}
		for i, n := range sc.BackedNamespaces {
			sc.BackedNamespaces[i] = t.String(n)
		}
	}
	if edsWatches != 1 {
		return nil
	}
	return eds
}

// reconnectedLocked ends every order in flight to a frontend whose NATS
// connection was re-established: one published while it was away reached
// nobody, and its done will never come. Each connection is resynced after
// its backoff (as for any lost push) instead of waiting out the push
// timeout; an order that did arrive costs a repeated order, which sends
// nothing new. It returns the ended orders, whose throttle slots the
// caller frees.
func (p *Pusher) reconnectedLocked(fe string) []*inflight {
	lost := p.loseInFlightLocked(fe, LostFrontendReconnected)
	if len(lost) > 0 {
		p.log.Info("frontend reconnected to NATS: resyncing its orders in flight", "frontend", fe, "orders", len(lost))
	}
	return lost
}

// reconnected runs when the pusher's own NATS connection is back: orders
// written to the old connection may never have left it, and dones sent
// meanwhile reached nobody, so everything in flight is resynced as lost.
// A done the frontend's registry entry shows is not needed for that; one
// that did arrive costs a repeated order.
func (p *Pusher) reconnected() {
	p.mu.Lock()
	lost := p.loseInFlightLocked("", LostPusherReconnected)
	p.mu.Unlock()
	if len(lost) > 0 {
		p.log.Info("NATS connection re-established: resyncing every order in flight", "orders", len(lost))
	}
	p.markDoneAll(lost)
}

// loseInFlightLocked ends the orders in flight to frontend fe (every
// frontend: "") as lost for reason why, and returns them; the caller frees
// their throttle slots.
func (p *Pusher) loseInFlightLocked(fe, why string) []*inflight {
	var lost []*inflight
	for id, f := range p.inflight {
		if fe != "" && f.frontend != fe {
			continue
		}
		p.endLocked(id, f)
		lost = append(lost, f)
		if c := p.conns[f.conn]; c != nil {
			p.resyncLaterLocked(c, why)
		}
	}
	slices.SortFunc(lost, func(a, b *inflight) int { return strings.Compare(a.frontend, b.frontend) })
	return lost
}

// sameWatches reports whether two entries of a connection watch the same
// things with the same scope (what the pusher scopes by).
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
	return sameScope(a.GetScope(), b.GetScope())
}

// sameScope reports whether two scopes say the same, whatever their
// sequences (a scope only renewed scopes out nothing more).
func sameScope(a, b *pb.Scope) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.GetAll() == b.GetAll() && a.GetRootNamespace() == b.GetRootNamespace() &&
		slices.Equal(a.GetImports(), b.GetImports()) && slices.Equal(a.GetBackedNamespaces(), b.GetBackedNamespaces())
}

// forgetFrontendLocked drops a frontend, every connection it held and
// every order in flight to it (its queue goes too, so nothing is left to
// mark done), and returns those connections with the revisions of their
// registry entries.
func (p *Pusher) forgetFrontendLocked(fe string) map[string]uint64 {
	delete(p.frontends, fe)
	for id, f := range p.inflight {
		if f.frontend == fe {
			p.endLocked(id, f)
		}
	}
	gone := make(map[string]uint64)
	for id, c := range p.conns {
		if c.info.GetFrontend() == fe {
			gone[id] = c.rev
			p.forgetConnLocked(id)
		}
	}
	p.queues.drop(fe)
	p.m.frontends.Set(float64(len(p.frontends)))
	return gone
}
