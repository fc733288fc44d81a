package ads

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// registry writes this frontend's heartbeat and its connections to the
// registry bucket. Connection updates are coalesced: only the latest state of
// each connection is written, by one goroutine.
type registry struct {
	// set at construction
	kv        jetstream.KeyValue
	js        jetstream.JetStream // publishes the connection entries to kv
	fe        *pb.FrontendInfo
	interval  time.Duration
	log       *slog.Logger
	metrics   *metrics
	notify    chan struct{}
	connCount func() int
	applied   func() uint64
	pushRate  func() float64 // orders completed per busy second (nil: unknown)
	// reconnects counts the NATS connection's reconnects (nil: none);
	// kick, when the connection is back, writes the heartbeat at once so
	// the pusher learns of it (and resyncs the orders that were lost)
	// without waiting for the next interval.
	reconnects func() uint64
	kick       chan struct{}
	all        func() []*pb.ConnectionInfo // every connection's latest view
	// ownConns prefixes the ids of this process's connections (its
	// incarnation); removeStale leaves their entries alone.
	ownConns string

	// guarded by mu
	mu         sync.Mutex
	dirty      map[string]*pb.ConnectionInfo // nil value: delete the key
	draining   bool
	reregister bool // the entry was found removed: re-register once it is written again
}

func (r *registry) put(ci *pb.ConnectionInfo) { r.mark(ci.GetConnId(), ci) }

func (r *registry) remove(connID string) { r.mark(connID, nil) }

func (r *registry) mark(connID string, ci *pb.ConnectionInfo) {
	r.mu.Lock()
	r.dirty[connID] = ci
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *registry) setDraining() {
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
}

// run heartbeats and flushes until ctx ends, then removes this frontend's
// keys so the pusher forgets it at once.
func (r *registry) run(ctx context.Context) {
	// Heartbeats have their own goroutine: a long flush of connection
	// entries (thousands of connections opening at once) must never delay
	// them, or the pusher would declare this frontend dead.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.heartbeats(ctx)
	}()
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			r.flush(context.Background())
			r.deregister()
			return
		case <-r.notify:
			r.flush(ctx)
		case <-t.C:
			r.flush(ctx) // retries failed writes
		}
	}
}

func (r *registry) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var rev uint64
	for {
		rev = r.heartbeat(ctx, rev)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// reconnected is the NATS connection's reconnect handler: it must not
// block.
func (r *registry) reconnected() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// heartbeat writes the frontend's entry by compare-and-set on the revision
// it wrote last (0: first write) and returns the new revision. If someone
// else changed or removed the entry (a pusher that timed this frontend out
// deletes it with its connections), it writes it afresh and then
// re-registers every connection it holds, so the pusher knows them again;
// if that write fails, the next heartbeat that succeeds re-registers.
func (r *registry) heartbeat(ctx context.Context, rev uint64) uint64 {
	r.mu.Lock()
	fe := proto.Clone(r.fe).(*pb.FrontendInfo)
	fe.Draining = r.draining
	r.mu.Unlock()
	fe.HeartbeatAt = timestamppb.Now()
	fe.Connections = int32(r.connCount())
	fe.AppliedSeq = r.applied()
	// The pusher sizes this frontend's push throttle from its cores.
	fe.Cores = int32(runtime.GOMAXPROCS(0))
	if r.pushRate != nil {
		fe.PushRate = r.pushRate()
	}
	if r.reconnects != nil {
		fe.NatsReconnects = r.reconnects()
	}
	b, err := proto.Marshal(fe)
	if err != nil {
		r.log.Error("marshal heartbeat", "err", err)
		return rev
	}
	key := bus.FrontendKey(fe.GetId())
	if rev != 0 {
		nrev, err := r.kv.Update(ctx, key, b, rev)
		if err == nil {
			return nrev
		}
		if ctx.Err() != nil {
			return rev
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			r.metrics.registryErrors.Inc()
			r.log.Warn("registry heartbeat", "err", err)
			return rev
		}
		r.mu.Lock()
		r.reregister = true
		r.mu.Unlock()
	}
	nrev, err := r.kv.Put(ctx, key, b)
	if err != nil {
		if ctx.Err() == nil {
			r.metrics.registryErrors.Inc()
			r.log.Warn("registry heartbeat", "err", err)
		}
		return 0
	}
	// Only once the entry is back: connection entries that reached the
	// pusher before it would be pushed to, and the heartbeat coming after
	// them (counting a NATS reconnect) would have those pushes resynced as
	// lost.
	r.mu.Lock()
	rereg := r.reregister
	r.reregister = false
	r.mu.Unlock()
	if rereg {
		conns := r.all()
		r.log.Warn("registry entry removed or replaced (declared dead?): re-registering", "connections", len(conns))
		r.metrics.reregistrations.Inc()
		for _, ci := range conns {
			r.put(ci)
		}
	}
	return nrev
}

func (r *registry) flush(ctx context.Context) {
	r.mu.Lock()
	dirty := r.dirty
	r.dirty = make(map[string]*pb.ConnectionInfo, len(dirty))
	r.mu.Unlock()
	// The writes are asynchronous publishes to the bucket's subjects, at
	// most registryWindow awaiting their acks: thousands of connections
	// opening at once cost a few round trips, not one each.
	window := make([]registryWrite, 0, min(len(dirty), registryWindow))
	for id, ci := range dirty {
		if len(window) == registryWindow {
			r.settle(ctx, window)
			window = window[:0]
		}
		window = append(window, r.write(id, ci))
	}
	r.settle(ctx, window)
}

// registryWindow bounds a flush's writes awaiting their acks. It stays
// well below svc.PublishAsyncMaxPending, which the delivery recorder
// shares.
const registryWindow = 256

// registryAckWait bounds the wait for a window's acks.
const registryAckWait = 5 * time.Second

var errNoRegistryAck = errors.New("no ack within " + registryAckWait.String())

// registryWrite is one connection's entry written, or removed (ci nil).
type registryWrite struct {
	id  string
	ci  *pb.ConnectionInfo
	ack jetstream.PubAckFuture
	err error
}

// write publishes connection id's entry, or its removal: a purge marker
// the server deletes after bus.RegistryMarkerTTL, as bus.RemoveKey
// writes.
func (r *registry) write(id string, ci *pb.ConnectionInfo) registryWrite {
	w := registryWrite{id: id, ci: ci}
	msg := nats.NewMsg(bus.KVKeySubject(r.kv.Bucket(), bus.ConnKey(r.fe.GetId(), id)))
	var opts []jetstream.PublishOpt
	if ci == nil {
		msg.Header.Set(bus.KVOperationHeader, bus.KVOperationPurge)
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		opts = append(opts, jetstream.WithMsgTTL(bus.RegistryMarkerTTL))
	} else if msg.Data, w.err = proto.Marshal(ci); w.err != nil {
		return w
	}
	r.metrics.registryWrites.Inc()
	w.ack, w.err = r.js.PublishMsgAsync(msg, opts...)
	return w
}

// settle waits for the writes' acks. A write that failed is counted and
// keeps the latest state for the next flush unless newer state arrived
// meanwhile; the failures are logged in one line (the first one's
// connection and error), not one per connection.
func (r *registry) settle(ctx context.Context, writes []registryWrite) {
	if len(writes) == 0 {
		return
	}
	timeout := time.NewTimer(registryAckWait)
	defer timeout.Stop()
	expired := false // the rest have had their time too
	failed := 0
	var first error
	var firstConn string
	defer func() {
		if failed > 0 {
			r.log.Warn("registry writes failed; kept for the next flush", "failed", failed, "of", len(writes), "conn", firstConn, "err", first)
		}
	}()
	for _, w := range writes {
		err := w.err
		switch {
		case err != nil:
		case expired:
			select {
			case <-w.ack.Ok():
			case err = <-w.ack.Err():
			default:
				err = errNoRegistryAck
			}
		default:
			select {
			case <-w.ack.Ok():
			case err = <-w.ack.Err():
			case <-ctx.Done():
				err = ctx.Err()
			case <-timeout.C:
				expired, err = true, errNoRegistryAck
			}
		}
		if err == nil {
			continue
		}
		r.metrics.registryErrors.Inc()
		if failed++; first == nil {
			first, firstConn = err, w.id
		}
		if ctx.Err() == nil {
			r.mu.Lock()
			if _, newer := r.dirty[w.id]; !newer {
				r.dirty[w.id] = w.ci
			}
			r.mu.Unlock()
		}
	}
}

// removeStale removes the connection entries found under this frontend's
// id that belong to an earlier process with the same id that did not
// deregister (killed, or lost its NATS connection at shutdown). Left
// behind, the pusher would keep pushing those dead connections, and its
// in-flight orders for them would hold this frontend's throttle slots
// until they time out. It runs while this process already serves (every
// restart used to wait for it: 2 s for 167 entries in the fault matrix,
// while the proxies backed off further), so it skips this process's own
// connections, and removes several entries at a time. Best effort: a
// failure is logged and counted, and the pusher's resync copes with what
// is left.
func (r *registry) removeStale(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lister, err := r.kv.ListKeysFiltered(ctx, "conn."+bus.EscapeToken(r.fe.GetId())+".>")
	if err != nil {
		r.metrics.registryErrors.Inc()
		r.log.Warn("list connection entries of an earlier process", "err", err)
		return
	}
	keys := make(chan string)
	var removed atomic.Int64
	var wg sync.WaitGroup
	for range staleRemovers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if err := bus.RemoveKey(ctx, r.kv, k, bus.RegistryMarkerTTL); err != nil {
					r.metrics.registryErrors.Inc()
					r.log.Warn("remove connection entry of an earlier process", "key", k, "err", err)
					continue
				}
				removed.Add(1)
			}
		}()
	}
	for k := range lister.Keys() {
		if _, _, conn, ok := bus.ParseRegistryKey(k); ok && r.ownConns != "" && strings.HasPrefix(conn, r.ownConns) {
			continue
		}
		keys <- k
	}
	close(keys)
	wg.Wait()
	if n := removed.Load(); n > 0 {
		r.log.Info("removed connection entries an earlier process with this frontend id left", "entries", n)
	}
}

// staleRemovers is how many of an earlier process's entries removeStale
// removes at once.
const staleRemovers = 8

// deregister deletes the frontend's heartbeat and all its connection keys.
func (r *registry) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lister, err := r.kv.ListKeysFiltered(ctx, "conn."+bus.EscapeToken(r.fe.GetId())+".>")
	if err == nil {
		for k := range lister.Keys() {
			if err := bus.RemoveKey(ctx, r.kv, k, bus.RegistryMarkerTTL); err != nil {
				r.metrics.registryErrors.Inc()
				r.log.Warn("deregister connection", "key", k, "err", err)
			}
		}
	}
	if err := bus.RemoveKey(ctx, r.kv, bus.FrontendKey(r.fe.GetId()), bus.RegistryMarkerTTL); err != nil {
		r.log.Warn("deregister frontend", "err", err)
	}
}
