package pusher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/intern"
	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/pkg/pushqueue"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Pusher fans PushRequests out to connections.
type Pusher struct {
	// set at construction
	pushes jetstream.Stream
	cfg    Config
	names  bus.Names
	nc     *nats.Conn
	kv     jetstream.KeyValue
	log    *slog.Logger
	m      *metrics
	queues *frontendQueues // set before any goroutine starts
	now    func() time.Time
	// strings and lists hold one copy of what registry entries repeat
	// (internInfo).
	strings intern.Table
	lists   nameLists
	// maxBytes bounds an encoded PushOrderBatch: the server's max payload,
	// or Config.MaxBatchBytes if lower.
	maxBytes int
	// leaseRev is the fencing token every batch carries: the revision at
	// which this instance acquired its shard's lease. Frontends drop
	// batches older than the newest they have seen from the shard.
	leaseRev uint64

	// Lock order. Take locks left to right, never the reverse:
	//
	//	Pusher.mu → frontendQueues.mu → pushqueue.Queue.mu (→ MergeFunc)
	//
	//   - With mu held, enqueueLocked, forgetConnLocked and
	//     forgetFrontendLocked look queues up (frontendQueues.mu: get,
	//     lookup, drop) and then, with frontendQueues.mu released, call
	//     them (Queue.mu: Enqueue, Remove, ShutDown).
	//   - frontendQueues.mu is held while calling every queue in shutDown
	//     and totals (Queue.mu: ShutDown, Len, InFlight), and the
	//     frontend's queue in setCapacity (Queue.mu: SetMaxInFlight; called
	//     with mu held, from applyEntry).
	//   - Queue.mu is the innermost lock. The queue calls its MergeFunc,
	//     (*request).Merge, under it; Merge is pure and takes no lock.
	//   - Nothing takes mu with a queue lock held: the dispatchers
	//     (dispatch, addOrder) take mu only between queue calls, and
	//     handleDone, expireOrders, send, applyEntry and handlePushRequest
	//     release mu before markDone and updateQueueMetrics
	//     (frontendQueues.mu, Queue.mu).
	//   - NATS and KV calls are made with no lock held.

	// gaugeMu serialises updateQueueMetrics; a leaf lock, taken with no
	// other held and holding frontendQueues.mu only inside totals.
	gaugeMu sync.Mutex

	// guarded by mu
	mu        sync.Mutex
	frontends map[string]time.Time // local time of each live frontend's last heartbeat
	// forgotten: frontends expired for a silent heartbeat, and when (kept
	// forgetFor); one heard from again has its connections read back from
	// the registry (relearn)
	forgotten map[string]time.Time
	relearn   map[string]bool
	// feRevs: the registry revision of each frontend's entry last seen;
	// cleanups: the registry entries of forgotten frontends still to
	// remove (cleanFrontends).
	feRevs   map[string]uint64
	cleanups map[string]*cleanup
	// feReconnects: each frontend's count of NATS reconnects last seen
	// in its heartbeat (FrontendInfo.nats_reconnects)
	feReconnects map[string]uint64
	// expirySuspended: every frontend was silent at the last sweep
	// (expireFrontends)
	expirySuspended bool
	conns           map[string]*connState
	latest          uint64 // through_seq of the latest PushRequest
	synced          bool   // registry's initial values are loaded
	inflight        map[uint64]*inflight
	lastPushID      uint64
	// aheadSince: when the periodic check first saw a request newer than
	// any delivered (zero: none)
	aheadSince time.Time
}

// Run runs the pusher until ctx ends.
func Run(ctx context.Context, cfg Config, d svc.Deps) error {
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cfg.ID == "" {
		cfg.ID = svc.InstanceID("pusher")
	}
	opts := cfg.StreamOptions()
	streams := svc.NewStreams(d)
	pushes, err := streams.Stream(ctx, names.PushesConfig(opts))
	if err != nil {
		return err
	}
	kv, err := streams.KV(ctx, names.RegistryConfig(opts))
	if err != nil {
		return err
	}
	leases, err := streams.KV(ctx, names.LeaseConfig(opts))
	if err != nil {
		return err
	}
	m := newMetrics(d.Reg)
	el := &lease.Elector{KV: leases, Key: "pusher-" + bus.EscapeToken(cfg.Shard), Holder: cfg.ID, TTL: cfg.LeaseTTL, Log: d.Log, Leader: m.leader}
	d.Health.SetReady()
	d.Log.Info("pusher ready", "id", cfg.ID, "shard", cfg.Shard, "throttle", cfg.Throttle)
	// The elector's context outlives ctx by the drain: an active pusher
	// told to stop drains its queue while it still renews its lease, so no
	// standby becomes active before it has released (issue 12 row 5).
	elCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var mu sync.Mutex
	active := false
	stopIfIdle := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !active {
			stopElector()
		}
	})
	defer stopIfIdle()
	// The active term's pusher, for the reconnect handler (registered
	// once per Run, removed when Run returns).
	var current atomic.Pointer[Pusher]
	if d.NC != nil {
		defer svc.OnReconnect(d.NC, func() {
			if p := current.Load(); p != nil {
				p.reconnected()
			}
		})()
	}
	return el.Run(elCtx, func(leaseCtx context.Context) error {
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			stopElector()
			return nil
		}
		active = true
		mu.Unlock()
		defer func() {
			mu.Lock()
			active = false
			if ctx.Err() != nil {
				stopElector() // drained: release the lease and end
			}
			mu.Unlock()
		}()
		// An error ends the term, not the service: it is logged and
		// counted, the lease is given up (a standby may take over at once)
		// and this instance campaigns again, so a failure while the cluster
		// elects leaders (a consumer not created in time) costs one term.
		err := runActive(ctx, leaseCtx, cfg, names, pushes, kv, m, d, &current)
		if err != nil && ctx.Err() == nil && leaseCtx.Err() == nil {
			m.restarts.Inc()
			d.Log.Error("active work failed: giving up the lease and starting again", "err", err)
		}
		return nil
	})
}

// runActive is the pusher's work while it holds its shard's lease. All
// state is rebuilt from the registry and the PUSHES stream at each start.
// It ends when leaseCtx does (the lease is lost: stop at once) or when ctx
// does (shutdown: drain what is queued, within DrainTimeout, still holding
// the lease).
func runActive(ctx, leaseCtx context.Context, cfg Config, names bus.Names, pushes jetstream.Stream, kv jetstream.KeyValue, m *metrics, d svc.Deps, current *atomic.Pointer[Pusher]) error {
	p := &Pusher{
		pushes:       pushes,
		cfg:          cfg,
		names:        names,
		nc:           d.NC,
		kv:           kv,
		log:          d.Log.With("pusher", cfg.ID),
		m:            m,
		now:          time.Now,
		maxBytes:     maxBatchBytes(cfg, d.NC),
		leaseRev:     lease.Revision(leaseCtx),
		frontends:    make(map[string]time.Time),
		forgotten:    make(map[string]time.Time),
		relearn:      make(map[string]bool),
		feRevs:       make(map[string]uint64),
		feReconnects: make(map[string]uint64),
		cleanups:     make(map[string]*cleanup),
		conns:        make(map[string]*connState),
		inflight:     make(map[uint64]*inflight),
	}
	if cfg.now != nil {
		p.now = cfg.now
	}
	cons, err := p.createConsumer(leaseCtx, jetstream.ConsumerConfig{
		Durable:       names.PusherConsumer(cfg.Shard),
		Description:   "pusher: PushRequests to per-connection push orders",
		FilterSubject: names.PushesSubject(),
		// A new pusher needs no old requests: it compares every connection
		// with the latest sequence instead.
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		// Requests are acknowledged as soon as they are queued; a short ack
		// wait bounds how long one delivered to a pusher that died stays
		// stuck (the once-a-second check of the latest request also covers
		// it).
		AckWait:    pushesAckWait,
		MaxDeliver: -1,
	})
	if err != nil {
		return fmt.Errorf("pusher consumer: %w", err)
	}
	// Read the latest request after the consumer exists, so none falls in
	// between.
	last, err := bus.LastMsg(leaseCtx, pushes, names.PushesSubject())
	if err != nil {
		return err
	}
	if last != nil {
		pr := &pb.PushRequest{}
		if err := proto.Unmarshal(last.Data, pr); err == nil {
			p.latest = pr.GetThroughSeq()
			p.m.latestSeq.Set(float64(p.latest))
		}
	}

	p.log.Info("pusher active", "latest_seq", p.latest, "lease_revision", p.leaseRev)
	doneSub, err := d.NC.Subscribe(names.DoneSubject(cfg.ID), p.handleDone)
	if err != nil {
		return fmt.Errorf("subscribe done: %w", err)
	}
	defer func() { _ = doneSub.Unsubscribe() }()
	batchSub, err := d.NC.Subscribe(doneBatchSubject(names, cfg.ID), p.handleDoneBatch)
	if err != nil {
		return fmt.Errorf("subscribe done batches: %w", err)
	}
	defer func() { _ = batchSub.Unsubscribe() }()

	var wg sync.WaitGroup
	bg, cancelBG := context.WithCancel(context.Background())
	defer cancelBG()
	p.queues = newFrontendQueues(bg, cfg.Throttle, cfg.PushWindow, p.dispatch)
	current.Store(p)
	defer current.CompareAndSwap(p, nil)
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(bg) }()
	}
	start(p.watchRegistry)
	start(p.sweep)

	it, err := cons.Messages(bus.PullMessages(64)...)
	if err != nil {
		cancelBG()
		wg.Wait()
		return fmt.Errorf("consume pushes: %w", err)
	}
	consumeDone := make(chan struct{})
	go func() {
		defer close(consumeDone)
		var gaps bus.DeliveryGaps
		for {
			msg, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				p.m.consumeErrors.Inc()
				p.log.Warn("next push request", "err", err)
				continue
			}
			if md, err := msg.Metadata(); err == nil {
				if from, to, ok := gaps.Next(md.Sequence.Consumer, md.Sequence.Stream); ok {
					p.fetchLost(bg, from, to)
				}
			}
			p.handlePushRequest(msg)
		}
	}()

	select {
	case <-ctx.Done():
	case <-leaseCtx.Done():
	}
	it.Stop()
	<-consumeDone
	// Shutting down: drain what is queued within the deadline, then stop.
	// Lease lost: stop at once; the new holder rebuilds the queue.
	drained := p.queues.shutDown()
	if leaseCtx.Err() == nil {
		t := time.NewTimer(cfg.DrainTimeout)
		select {
		case <-drained:
		case <-leaseCtx.Done():
			p.log.Warn("lease lost while draining")
		case <-t.C:
			pending, inFlight := p.queues.totals()
			p.log.Warn("drain deadline passed", "queued", pending, "in_flight", inFlight)
		}
		t.Stop()
	}
	cancelBG()
	<-drained
	wg.Wait()
	return nil
}

// Consumer creation is retried within the term: a request lost while the
// meta leader changes would otherwise cost nats.go's 5 s request timeout
// and the term. consumerAttempts tries of at most consumerTimeout each,
// then the term ends (logged and counted by Run).
const (
	consumerAttempts = 4
	consumerTimeout  = 2 * time.Second
	consumerBackoff  = 250 * time.Millisecond
)

func (p *Pusher) createConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (cons jetstream.Consumer, err error) {
	err = svc.RetryTimed(ctx, svc.RetryOptions{
		First: consumerBackoff, Max: consumerBackoff, Attempts: consumerAttempts,
		Log: p.log, Msg: "pusher consumer not created, retrying", Attrs: []any{"attempts", consumerAttempts},
		Failures: p.m.consumerRetries,
	}, consumerTimeout, func(ctx context.Context) (err error) {
		cons, err = p.pushes.CreateOrUpdateConsumer(ctx, cfg)
		return err
	})
	return cons, err
}

// fetchLost reads the requests strictly between stream sequences from and
// to and handles them as if delivered; their redelivery after the ack wait
// is then a repeat, skipped per connection.
func (p *Pusher) fetchLost(ctx context.Context, from, to uint64) {
	for seq := from + 1; seq < to; seq++ {
		gctx, cancel := context.WithTimeout(ctx, consumerTimeout)
		m, err := p.pushes.GetMsg(gctx, seq)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue // removed by the stream's limits
		case err != nil:
			p.log.Warn("push request lost in transit not read: it comes again after the ack wait", "seq", seq, "err", err)
			continue
		}
		p.m.requestsLost.Inc()
		p.log.Warn("push request lost in transit: read from the stream", "seq", seq)
		p.handleRequestData(m.Data)
	}
}

// handlePushRequest queues the request for every connection it can affect,
// then acknowledges it (the queue is the pusher's durable-enough state: a
// restart re-derives it by comparing sequences).
func (p *Pusher) handlePushRequest(msg jetstream.Msg) {
	if !p.handleRequestData(msg.Data()) {
		_ = msg.Term()
		return
	}
	if err := msg.Ack(); err != nil {
		p.log.Warn("ack push request", "err", err)
	}
}

// handleRequestData queues a PushRequest for every connection it can
// affect; false when it does not decode.
func (p *Pusher) handleRequestData(data []byte) bool {
	pr := &pb.PushRequest{}
	if err := proto.Unmarshal(data, pr); err != nil {
		p.m.badMessages.WithLabelValues("push_request").Inc()
		p.log.Error("undecodable push request", "err", err)
		return false
	}
	now := p.now()
	req := newRequest(pr, now)
	p.mu.Lock()
	p.latest = max(p.latest, pr.GetThroughSeq())
	p.m.latestSeq.Set(float64(p.latest))
	for id, c := range p.conns {
		switch {
		case c.synced >= req.through:
			p.m.skipped.WithLabelValues("synced").Inc()
		case c.hasOrdered(req.through):
			p.m.skipped.WithLabelValues("ordered").Inc()
		case !needsPush(c, req):
			// Untouched by these sequences: synced moves over them once
			// every sequence below them is reflected too.
			c.skip(req.covered)
			p.m.skipped.WithLabelValues("scope").Inc()
		default:
			p.enqueueLocked(id, req)
		}
	}
	p.mu.Unlock()
	p.m.pushRequests.Inc() // after queueing: tests wait for it
	p.updateQueueMetrics()
	return true
}

func (p *Pusher) enqueueLocked(conn string, r *request) {
	c, ok := p.conns[conn]
	if !ok {
		return
	}
	c.queued = max(c.queued, r.through)
	if affectsScope(c.info, r) {
		// Its scope may change: distrust the entry's until one computed
		// at least this late comes.
		c.scopeChange = max(c.scopeChange, r.through)
	}
	if q := p.queues.get(c.info.GetFrontend()); q != nil {
		q.Enqueue(conn, r)
	}
}

// markDone ends a connection's processing in its frontend's queue.
func (p *Pusher) markDone(fe, conn string) {
	if q := p.queues.lookup(fe); q != nil {
		q.MarkDone(conn)
	}
	p.updateQueueMetrics()
}

// updateQueueMetrics sets the queue gauges from the queues' totals. It is
// called from several goroutines: gaugeMu makes reading the totals and
// setting the gauges one step, so a caller delayed between the two cannot
// overwrite a newer value with an older one (an in-flight gauge reading 0
// while 25 orders were out).
func (p *Pusher) updateQueueMetrics() {
	p.gaugeMu.Lock()
	defer p.gaugeMu.Unlock()
	pending, inFlight := p.queues.totals()
	p.m.queueLen.Set(float64(pending))
	p.m.inFlight.Set(float64(inFlight))
}

// catchUpLocked queues a connection that is behind the latest sequence and
// has nothing queued or in flight that would bring it there.
func (p *Pusher) catchUpLocked(conn string, c *connState) {
	if !p.synced || c.synced >= p.latest || c.queued >= p.latest {
		return
	}
	p.enqueueLocked(conn, catchUp(p.latest, p.now()))
}

// dispatch takes connections off the queue (the queue enforces the
// throttle) and sends each its push order. Whatever else is ready at that
// moment (up to MaxBatch) goes along, in PushOrderBatches per frontend no
// larger than the max payload.
func (p *Pusher) dispatch(ctx context.Context, q *pushqueue.Queue[*request]) {
	batches := make(map[string]*batcher)
	for {
		conn, req, err := q.Dequeue(ctx)
		if err != nil {
			return
		}
		p.addOrder(q, batches, conn, req)
		for range p.cfg.MaxBatch - 1 {
			conn, req, ok := q.TryDequeue()
			if !ok {
				break
			}
			p.addOrder(q, batches, conn, req)
		}
		for subject, b := range batches {
			if batch := b.take(); batch != nil {
				p.send(subject, batch)
			}
		}
		p.updateQueueMetrics()
	}
}

// send publishes one batch of orders to a frontend. The queue gauges are
// set first: whoever has been handed an order sees a gauge that counts it.
func (p *Pusher) send(subject string, batch *pb.PushOrderBatch) {
	p.updateQueueMetrics()
	b, err := proto.Marshal(batch)
	if p.cfg.beforeSend != nil {
		p.cfg.beforeSend(batch)
	}
	if err == nil {
		err = p.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: p.names.DoneSubject(p.cfg.ID), Data: b})
	}
	p.m.batchSize.Observe(float64(len(batch.Orders)))
	if err == nil {
		return
	}
	// Lost: free their slots; each connection is resynced after its
	// backoff, logged and counted.
	p.m.sendErrors.Inc()
	p.log.Warn("send push orders", "subject", subject, "orders", len(batch.Orders), "bytes", len(b), "err", err)
	var lost []*inflight
	p.mu.Lock()
	for _, o := range batch.Orders {
		f, ok := p.inflight[o.GetPushId()]
		if !ok {
			continue
		}
		p.endLocked(o.GetPushId(), f)
		lost = append(lost, f)
		if c := p.conns[f.conn]; c != nil {
			p.lostLocked(f.conn, c, LostSend)
		}
	}
	p.mu.Unlock()
	for _, f := range lost {
		p.markDone(f.frontend, f.conn)
	}
}

// addOrder records one dequeued connection as in flight and adds its order
// to its frontend's batch, sending the batch first if the order would take
// it past the max payload.
func (p *Pusher) addOrder(q *pushqueue.Queue[*request], batches map[string]*batcher, conn string, req *request) {
	now := p.now()
	p.m.queueTime.Observe(now.Sub(req.enqueued).Seconds())
	p.mu.Lock()
	c, ok := p.conns[conn]
	if !ok {
		p.mu.Unlock()
		q.MarkDone(conn)
		return
	}
	if c.hasOrdered(req.through) {
		// Queued behind the order that covers it (merged into the
		// processing slot before that order was recorded): drop it.
		p.m.skipped.WithLabelValues("ordered").Inc()
		p.mu.Unlock()
		q.MarkDone(conn)
		return
	}
	c.setOrdered(req.through)
	p.lastPushID++
	id := p.lastPushID
	p.inflight[id] = &inflight{conn: conn, frontend: c.info.GetFrontend(), req: req, deadline: now.Add(p.cfg.PushTimeout)}
	c.pushID = id
	subject := p.names.OrdersSubject(c.info.GetFrontend())
	p.mu.Unlock()
	b, ok := batches[subject]
	if !ok {
		b = newBatcher(&pb.PushOrderBatch{Pusher: p.cfg.ID, Shard: p.cfg.Shard, LeaseRevision: p.leaseRev, DoneBatchSubject: doneBatchSubject(p.names, p.cfg.ID)}, p.maxBytes)
		batches[subject] = b
	}
	o := req.order(conn, id)
	keys := len(o.ConfigKeys)
	ready, shrunk := b.add(o)
	if shrunk {
		p.m.oversized.Inc()
		p.log.Warn("push order past the max payload: sent as a full push without its keys", "conn", conn, "keys", keys, "max_bytes", p.maxBytes)
	}
	if ready != nil {
		p.send(subject, ready)
	}
	p.m.orders.WithLabelValues(pushTypeOf(o)).Inc()
}

// succeeded reports whether the frontend took the order: it sent, had
// nothing to send, or sends once the connection answers (DEFERRED); its
// synced_seq says how far the connection is.
func succeeded(r pb.PushDone_Result) bool {
	return r == pb.PushDone_SENT || r == pb.PushDone_UNCHANGED || r == pb.PushDone_DEFERRED
}

// endLocked forgets an order in flight.
func (p *Pusher) endLocked(id uint64, f *inflight) {
	delete(p.inflight, id)
	if c := p.conns[f.conn]; c != nil && c.pushID == id {
		c.pushID = 0
	}
}

// syncedLocked records that a connection reflects every sequence up to seq;
// once it has caught up with the latest request its resync backoff resets.
func (p *Pusher) syncedLocked(c *connState, seq uint64) {
	c.advance(seq)
	if c.synced >= p.latest {
		c.resyncAt, c.backoff = time.Time{}, 0
	}
}

// lostLocked handles a push that did not happen or whose outcome is unknown
// (a lost done, a failed send, a failure on the frontend): the connection
// is resynced after its backoff, which doubles up to ResyncMax each time,
// for as long as it stays behind (issue 12 row 9).
func (p *Pusher) lostLocked(conn string, c *connState, why string) {
	wait := p.resyncLaterLocked(c, why)
	p.log.Warn("push lost, resyncing after a backoff", "conn", conn, "reason", why, "backoff", wait)
}

// resyncLaterLocked is lostLocked without the log line, for callers that
// lose many orders at once and log them in one line.
func (p *Pusher) resyncLaterLocked(c *connState, why string) time.Duration {
	c.queued, c.reorder = 0, true
	wait := max(c.backoff, p.cfg.ResyncInterval)
	c.resyncAt = p.now().Add(wait)
	c.backoff = min(2*wait, p.cfg.ResyncMax)
	p.m.lost.WithLabelValues(why).Inc()
	return wait
}

// forgetConnLocked drops a connection, its place in its frontend's queue
// and its order in flight: a done that comes for that order later is
// unknown, and cannot end the processing of a connection known again under
// the same id (a frontend forgotten and heard from again).
func (p *Pusher) forgetConnLocked(conn string) {
	if c, ok := p.conns[conn]; ok {
		if q := p.queues.lookup(c.info.GetFrontend()); q != nil {
			q.Remove(conn)
		}
		if f := p.inflight[c.pushID]; f != nil && c.pushID != 0 {
			p.endLocked(c.pushID, f)
		}
	}
	delete(p.conns, conn)
	p.m.connections.Set(float64(len(p.conns)))
}

// maxBatchBytes is the size bound of one PushOrderBatch.
func maxBatchBytes(cfg Config, nc *nats.Conn) int {
	n := int(nc.MaxPayload())
	if cfg.MaxBatchBytes > 0 && (n <= 0 || cfg.MaxBatchBytes < n) {
		n = cfg.MaxBatchBytes
	}
	return n
}
