package ads

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// orderRouter takes PushOrderBatches from the pusher, waits until the model
// has applied their through_seq, hands each order to its connection's loop,
// and reports completions to the pusher.
type orderRouter struct {
	// set at construction
	nc          *nats.Conn
	s           *Server
	gate        *seqGate
	log         *slog.Logger
	waitTimeout time.Duration
	batches     chan *nats.Msg // bounded; the NATS handler only enqueues
	fence       pb.OrderFence  // drops batches from an older lease holder of a pusher shard
	meter       pushMeter      // orders completed per busy second, for the heartbeat

	// guarded by mu
	mu  sync.Mutex
	sub *nats.Subscription

	// completions waiting for flushDones (dones.go)
	doneNotify   chan struct{} // cap 1: completions are waiting
	dmu          sync.Mutex
	pendingDones map[string][]*pb.PushDone // guarded by dmu; by subject
	doneStopped  bool                      // guarded by dmu; flushDones ended
}

func newOrderRouter(nc *nats.Conn, s *Server, gate *seqGate, log *slog.Logger) *orderRouter {
	return &orderRouter{
		nc:          nc,
		s:           s,
		gate:        gate,
		log:         log,
		waitTimeout: 30 * time.Second,
		batches:     make(chan *nats.Msg, 1024),
		doneNotify:  make(chan struct{}, 1),
	}
}

// subscribe starts taking orders on subject.
func (r *orderRouter) subscribe(subject string) error {
	sub, err := r.nc.Subscribe(subject, func(m *nats.Msg) {
		// Blocking here applies backpressure to the subscription; NATS keeps
		// a bounded pending buffer behind it.
		r.batches <- m
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.sub = sub
	r.mu.Unlock()
	return nil
}

func (r *orderRouter) unsubscribe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil {
		_ = r.sub.Drain()
	}
}

// run dispatches batches until ctx ends.
func (r *orderRouter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-r.batches:
			r.dispatch(ctx, m)
		}
	}
}

func (r *orderRouter) dispatch(ctx context.Context, m *nats.Msg) {
	batch := &pb.PushOrderBatch{}
	if err := proto.Unmarshal(m.Data, batch); err != nil {
		r.s.metrics.ordersDropped.Inc()
		r.log.Error("undecodable push order batch", "subject", m.Subject, "err", err)
		return
	}
	if !r.fence.Admit(batch) {
		// From a pusher that lost its shard's lease to one whose orders
		// came already: applying it would push out of order. No done: the
		// sender is no longer the active pusher.
		r.s.metrics.orders.WithLabelValues("FENCED").Add(float64(len(batch.GetOrders())))
		r.log.Warn("push orders from an older lease holder dropped", "pusher", batch.GetPusher(), "shard", batch.GetShard(), "lease_revision", batch.GetLeaseRevision(), "orders", len(batch.GetOrders()))
		return
	}
	r.meter.started(len(batch.GetOrders()), time.Now())
	var through uint64
	for _, o := range batch.GetOrders() {
		through = max(through, o.GetThroughSeq())
	}
	wctx, cancel := context.WithTimeout(ctx, r.waitTimeout)
	err := r.gate.wait(wctx, through)
	cancel()
	for _, o := range batch.GetOrders() {
		ref := orderRef{order: o, reply: m.Reply, batchTo: batch.GetDoneBatchSubject()}
		if err != nil {
			r.log.Warn("model behind push order", "seq", through, "err", err)
			r.done(ref, pb.PushDone_FAILED, 0, err.Error())
			continue
		}
		c := r.s.lookupConn(o.GetConnId())
		if c == nil || !c.deliver(ref) {
			r.done(ref, pb.PushDone_CONN_GONE, 0, "")
		}
	}
}

// done reports one order's completion to the pusher that sent it: gathered
// with others into a PushDoneBatch when the order's batch asked for that,
// else alone on the batch's reply subject.
func (r *orderRouter) done(o orderRef, res pb.PushDone_Result, synced uint64, errText string) {
	r.s.metrics.orders.WithLabelValues(res.String()).Inc()
	r.meter.finished(time.Now())
	if o.reply == "" && o.batchTo == "" {
		return
	}
	d := &pb.PushDone{
		ConnId:    o.order.GetConnId(),
		PushId:    o.order.GetPushId(),
		Result:    res,
		SyncedSeq: synced,
		Error:     errText,
		Frontend:  r.s.id,
	}
	if o.batchTo != "" {
		if r.queueDone(o.batchTo, d) {
			return
		}
		if o.reply == "" {
			return
		}
	}
	b, err := proto.Marshal(d)
	if err != nil {
		r.log.Error("marshal push done", "err", err)
		return
	}
	if err := r.nc.Publish(o.reply, b); err != nil {
		r.s.metrics.doneErrors.Inc()
		r.log.Warn("publish push done", "conn", d.ConnId, "err", err)
	}
}
