package debouncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func timestampOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// Run runs the debouncer until ctx ends: it campaigns for the lease and,
// while active, consumes change records and publishes PushRequests. A
// standby only campaigns.
func Run(ctx context.Context, cfg Config, d svc.Deps) error {
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cfg.ID == "" {
		cfg.ID = svc.InstanceID("debouncer")
	}
	m := newMetrics(d.Reg)
	opts := cfg.StreamOptions()
	streams := svc.NewStreams(d)
	changes, err := streams.Stream(ctx, names.ChangesConfig(opts))
	if err != nil {
		return err
	}
	pushes, err := streams.Stream(ctx, names.PushesConfig(opts))
	if err != nil {
		return err
	}
	leases, err := streams.KV(ctx, names.LeaseConfig(opts))
	if err != nil {
		return err
	}
	var maxPayload int64
	if d.NC != nil {
		maxPayload = d.NC.MaxPayload()
	}
	maxBytes := requestBound(cfg.MaxRequestBytes, maxPayload, pushes.CachedInfo().Config.MaxMsgSize)
	a := &active{cfg: cfg, names: names, nc: d.NC, js: d.JS, changes: changes, pushes: pushes, log: d.Log, m: m, maxBytes: maxBytes}
	el := &lease.Elector{KV: leases, Key: "debouncer", Holder: cfg.ID, TTL: cfg.LeaseTTL, Log: d.Log, Leader: m.leader}
	d.Health.SetReady()
	d.Log.Info("debouncer ready", "id", cfg.ID, "max_request_bytes", maxBytes, "debounce_after", cfg.Debounce.DebounceAfter,
		"debounce_max", cfg.Debounce.DebounceMax, "eds_debounce", cfg.Debounce.EnableEDSDebounce)
	if cfg.SnapshotInterval < 0 {
		return el.Run(ctx, a.work)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); runSnapshotter(ctx, cfg, names, d, leases) }()
	defer wg.Wait()
	return el.Run(ctx, a.work)
}

// work is one term as the active instance. An error ends the term, not the
// service: it is logged and counted, the lease is given up (a standby may
// take over at once) and the instance campaigns again after TTL/3, so a
// persistent failure retries at that pace, never silently.
func (a *active) work(ctx context.Context) error {
	err := a.run(ctx)
	if err != nil && ctx.Err() == nil {
		a.m.restarts.Inc()
		a.log.Error("active work failed: giving up the lease and starting again", "err", err)
	}
	return nil
}

// active is the debouncer's work while it holds the lease.
type active struct {
	cfg     Config
	names   bus.Names
	nc      *nats.Conn
	js      jetstream.JetStream
	changes jetstream.Stream
	pushes  jetstream.Stream
	log     *slog.Logger
	m       *metrics
	// maxBytes bounds one PushRequest (requestBound).
	maxBytes int
}

// resumed is where a new active instance starts.
type resumed struct {
	cons     jetstream.Consumer
	covered  []*pb.SeqRange // sequences above floor published requests carry
	floor    uint64         // every sequence up to it is carried
	lastPush uint64         // the PUSHES stream's last sequence (fencing)
}

// resume prepares a fresh start. It never destroys state it has not yet
// replaced: the floor is the higher of the durable consumer's ack floor
// and the newest PushRequest's complete_through_seq, both read before the
// consumer is touched, so a failure, crash or lost lease after the
// consumer is deleted costs the next holder nothing (it finds the floor in
// PUSHES). It collects the sequences the newest requests cover above the
// floor and recreates the consumer from the floor, so the previous
// holder's un-acked changes come at once instead of after its ack wait.
func (a *active) resume(ctx context.Context) (resumed, error) {
	var r resumed
	c, err := a.changes.Consumer(ctx, a.names.DebouncerConsumer())
	switch {
	case err == nil:
		info, err := c.Info(ctx)
		if err != nil {
			return r, fmt.Errorf("debouncer consumer info: %w", err)
		}
		r.floor = info.AckFloor.Stream
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return r, fmt.Errorf("debouncer consumer: %w", err)
	}
	consumerFloor := r.floor
	if err := readPushes(ctx, a.pushes, &r); err != nil {
		return r, err
	}
	if c != nil {
		if err := a.changes.DeleteConsumer(ctx, a.names.DebouncerConsumer()); err != nil {
			return r, fmt.Errorf("reset debouncer consumer: %w", err)
		}
		if h := a.cfg.hooks; h != nil && h.afterConsumerDelete != nil {
			if err := h.afterConsumerDelete(); err != nil {
				return r, err
			}
		}
	}
	cc := jetstream.ConsumerConfig{
		Durable:       a.names.DebouncerConsumer(),
		Description:   "debouncer: change records to PushRequests",
		FilterSubject: a.names.ChangesAll(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		// Changes stay un-acked while merged; redelivery must not come
		// sooner than the longest a change can wait.
		AckWait:       2*a.cfg.Debounce.DebounceMax + 30*time.Second,
		MaxAckPending: a.cfg.MaxAckPending,
		MaxDeliver:    -1,
	}
	if r.floor > 0 {
		cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cc.OptStartSeq = r.floor + 1
	}
	r.cons, err = a.changes.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return r, fmt.Errorf("debouncer consumer: %w", err)
	}
	a.log.Info("resuming", "floor", r.floor, "ack_floor", consumerFloor, "covered_ranges", len(r.covered), "last_push_seq", r.lastPush)
	return r, nil
}

// The resume is retried within the term: a request lost while the
// stream's, the consumer's or the meta leader's raft group elects a
// leader would otherwise cost nats.go's 5 s request timeout and the term
// (a standby then takes over only after the lease TTL). resume is safe to
// repeat: it destroys nothing it has not replaced.
const (
	resumeAttempts = 4
	resumeTimeout  = 2 * time.Second
	resumeBackoff  = 250 * time.Millisecond
)

func (a *active) resumeRetried(ctx context.Context) (r resumed, err error) {
	err = svc.RetryTimed(ctx, svc.RetryOptions{
		First: resumeBackoff, Max: resumeBackoff, Attempts: resumeAttempts,
		Log: a.log, Msg: "debouncer not resumed, retrying", Attrs: []any{"attempts", resumeAttempts},
		Failures: a.m.resumeRetries,
	}, resumeTimeout, func(ctx context.Context) (err error) {
		r, err = a.resume(ctx)
		return err
	})
	return r, err
}

// readPushes reads PushRequests backwards from the newest: the newest
// one's complete_through_seq raises r.floor, and r.covered collects the
// ranges they cover above it. Requests are emitted one at a time, so once
// a few requests lie wholly at or below the floor, older ones cannot cover
// anything above it (an endpoint-only request may overtake one pending
// debounced batch, never more). It also records the stream's last
// sequence, the expected last sequence of the first publish.
func readPushes(ctx context.Context, pushes jetstream.Stream, r *resumed) error {
	info, err := pushes.Info(ctx)
	if err != nil {
		return fmt.Errorf("pushes stream info: %w", err)
	}
	r.lastPush = info.State.LastSeq
	below, newest := 0, true
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0 && below < 4; seq-- {
		msg, err := pushes.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read push request %d: %w", seq, err)
		}
		pr := &pb.PushRequest{}
		if err := proto.Unmarshal(msg.Data, pr); err != nil {
			return fmt.Errorf("decode push request %d: %w", seq, err)
		}
		if newest {
			r.floor = max(r.floor, pr.GetCompleteThroughSeq())
			newest = false
		}
		if pr.GetThroughSeq() <= r.floor {
			below++
			continue
		}
		for _, c := range pr.GetCovered() {
			if c.GetLast() > r.floor {
				r.covered = append(r.covered, c)
			}
		}
	}
	return nil
}

// run is the active loop: it ends when ctx ends (lease lost or shutdown).
func (a *active) run(ctx context.Context) error {
	r, err := a.resumeRetried(ctx)
	if err != nil {
		return err
	}
	idx, err := a.rebuildIndex(ctx, r.floor, a.cfg.IndexRebuildMax)
	if err != nil {
		return err
	}
	it, err := r.cons.Messages(bus.PullMessages(1024)...)
	if err != nil {
		return fmt.Errorf("consume changes: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer it.Stop()
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	msgs := make(chan jetstream.Msg, 1024)
	readErr := make(chan error, 1)
	a.m.consumedAt(time.Now()) // the watchdog's age runs from the term's start
	defer a.m.consumedAt(time.Time{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		readErr <- a.read(loopCtx, it, msgs)
	}()

	toWrite := make(chan emitted, 1)
	written := make(chan emitted, 1)
	w := &requestWriter{nc: a.nc, js: a.js, stream: a.pushes, subject: a.names.PushesSubject(), log: a.log, m: a.m, hooks: a.cfg.hooks, lastSeq: r.lastPush}
	writeErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		writeErr <- w.run(loopCtx, toWrite, written)
	}()

	l := newLoop(a.cfg.Debounce, r.covered, a.log, a.m, toWrite)
	l.endpoints = idx
	l.maxSeen = r.floor
	l.maxBytes = a.maxBytes
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			return err
		case err := <-writeErr:
			if err != nil {
				return err
			}
		case msg := <-msgs:
			if err := l.add(msg, time.Now()); err != nil {
				return err
			}
		case <-timer.C:
			l.armed = time.Time{}
			l.tick(time.Now())
		case e := <-written:
			l.done(e, time.Now())
		}
		l.arm(timer, time.Now())
	}
}

// read hands delivered changes to msgs until ctx ends. The iterator ending
// on its own (consumer deleted, connection closed) is an error: the term
// must end and start again, not hold the lease doing nothing.
func (a *active) read(ctx context.Context, it jetstream.MessagesContext, msgs chan<- jetstream.Msg) error {
	for {
		msg, err := it.Next()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, jetstream.ErrMsgIteratorClosed), errors.Is(err, jetstream.ErrConsumerDeleted):
			return fmt.Errorf("change consumer ended: %w", err)
		case err != nil:
			a.m.consumeErrors.Inc()
			a.log.Warn("next change", "err", err)
			continue
		}
		a.m.consumedAt(time.Now())
		select {
		case msgs <- msg:
		case <-ctx.Done():
			return nil
		}
	}
}

// loop is the state owned by Run's select loop.
type loop struct {
	deb        *debounce.Debouncer
	held       map[uint64]string // merged, not yet published: sequence -> ack (reply) subject, never the body
	covered    []*pb.SeqRange    // sequences of recently published requests
	maxCovered uint64            // highest sequence in covered
	maxSeen    uint64            // highest sequence delivered (or the floor)
	gaps       bus.DeliveryGaps  // deliveries lost in transit
	endpoints  *endpointIndex    // slices per service, for full-push decisions
	log        *slog.Logger
	m          *metrics
	toWrite    chan<- emitted
	armed      time.Time
	maxBytes   int // bound on one PushRequest
}

// newLoop returns the loop's state after a take-over that found covered
// ranges above the ack floor.
func newLoop(dcfg debounce.Config, covered []*pb.SeqRange, log *slog.Logger, m *metrics, toWrite chan<- emitted) *loop {
	l := &loop{deb: debounce.New(dcfg), held: make(map[uint64]string), covered: covered, log: log, m: m, toWrite: toWrite, endpoints: newEndpointIndex()}
	for _, r := range covered {
		l.maxCovered = max(l.maxCovered, r.GetLast())
	}
	return l
}

// add merges a delivered change. It fails, handing on nothing, when
// deliveries before this one were lost in transit (bus.DeliveryGaps):
// completeThrough takes a delivered sequence to mean every one below it
// was delivered too, and the server would send the lost ones again only
// after the ack wait. The term then ends; the next one recreates the
// consumer from the floor, which no request published so far claims past
// the gap.
func (l *loop) add(msg jetstream.Msg, now time.Time) error {
	md, err := msg.Metadata()
	if err != nil {
		l.log.Error("change message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return nil
	}
	seq := md.Sequence.Stream
	if from, _, lost := l.gaps.Next(md.Sequence.Consumer, seq); lost {
		l.m.deliveriesLost.Add(float64(seq - from - 1))
		return fmt.Errorf("change deliveries lost in transit: seq %d (delivery %d) came after seq %d; resuming from the floor to have them again", seq, md.Sequence.Consumer, from)
	}
	l.maxSeen = max(l.maxSeen, seq)
	if seq <= l.coveredMax() && covers(l.covered, seq) {
		// Published before a restart or a lost ack: acknowledge, count
		// once; the index still follows it.
		_, _ = toEvent(msg.Data(), seq, l.endpoints)
		l.m.skipped.Inc()
		_ = msg.Ack()
		return nil
	}
	if _, ok := l.held[seq]; ok {
		// Redelivered while still merged: keep the newest ack subject only.
		l.held[seq] = msg.Reply()
		return nil
	}
	ev, err := toEvent(msg.Data(), seq, l.endpoints)
	if err != nil {
		l.m.badRecords.Inc()
		l.log.Error("bad change record, merging as a full push", "seq", seq, "err", err)
		ev = debounce.Event{Seq: seq, Full: true, Reason: debounce.UnknownReason}
	}
	l.m.inbound.WithLabelValues(ev.Reason).Inc()
	l.held[seq] = msg.Reply()
	l.deb.Add(ev, now)
	l.tick(now)
	return nil
}

func (l *loop) tick(now time.Time) {
	if req, ok := l.deb.Tick(now); ok {
		l.emit(req, now)
	}
}

func (l *loop) emit(req *debounce.Request, now time.Time) {
	e := emitted{req: req, pr: toProto(req), acks: make([]string, 0, len(req.Seqs))}
	e.pr.CompleteThroughSeq = l.completeThrough(req)
	size := proto.Size(e.pr)
	switch how := fit(e.pr, l.maxBytes, l.carried); how {
	case fitNone:
	case fitOver:
		l.m.oversized.WithLabelValues(how).Inc()
		l.log.Error("push request over the size bound even without keys: its covered ranges stay apart (pending changes between them); publishing it as it is",
			"through_seq", req.ThroughSeq, "bytes", proto.Size(e.pr), "max_bytes", l.maxBytes, "covered_ranges", len(e.pr.GetCovered()))
	default:
		l.m.oversized.WithLabelValues(how).Inc()
		l.log.Warn("push request over the size bound: sent as a full push without keys",
			"through_seq", req.ThroughSeq, "bytes", size, "max_bytes", l.maxBytes, "keys", len(req.ConfigKeys), "covered_ranges", len(e.pr.GetCovered()), "how", how)
	}
	for _, s := range req.Seqs {
		if reply, ok := l.held[s]; ok {
			e.acks = append(e.acks, reply)
		}
	}
	l.m.debounceTime.Observe(now.Sub(req.FirstAdded).Seconds())
	l.m.merged.Observe(float64(req.Merged))
	for r, n := range req.Reasons {
		l.m.triggers.WithLabelValues(r).Add(float64(n))
	}
	l.toWrite <- e // never blocks: one request in flight at a time
}

func (l *loop) done(e emitted, now time.Time) {
	for _, s := range e.req.Seqs {
		delete(l.held, s)
	}
	// Remember the last few requests' sequences to recognise redeliveries
	// whose ack was lost.
	l.covered = append(l.covered, ranges(e.req.Seqs)...)
	l.maxCovered = max(l.maxCovered, e.req.ThroughSeq)
	if n := len(l.covered); n > 4096 {
		l.covered = append([]*pb.SeqRange(nil), l.covered[n-4096:]...)
	}
	if req, ok := l.deb.Done(now); ok {
		l.emit(req, now)
	}
}

// completeThrough is the highest sequence up to which every sequence is
// carried by req or an earlier request: below the lowest sequence still
// held and not in req (pending in the debouncer), else the highest
// delivered. Changes are delivered in stream order, so every sequence
// under the highest delivered was delivered, and is carried or held.
func (l *loop) completeThrough(req *debounce.Request) uint64 {
	out := l.maxSeen
	for s := range l.held {
		if s <= out {
			if _, in := slices.BinarySearch(req.Seqs, s); !in {
				out = s - 1
			}
		}
	}
	return out
}

// carried reports whether an earlier request carried seq: called at emit
// for sequences between those of the request, which were delivered (in
// stream order) and are no longer held.
func (l *loop) carried(seq uint64) bool {
	_, held := l.held[seq]
	return !held
}

// coveredMax is the highest sequence in the covered ranges.
func (l *loop) coveredMax() uint64 { return l.maxCovered }

// arm sets the timer to the debouncer's next deadline.
func (l *loop) arm(t *time.Timer, now time.Time) {
	l.m.pending.Set(float64(l.deb.Pending()))
	dl, ok := l.deb.NextDeadline()
	if !ok {
		if !l.armed.IsZero() {
			t.Stop()
			l.armed = time.Time{}
		}
		return
	}
	if dl.Equal(l.armed) {
		return
	}
	t.Stop()
	t.Reset(max(0, dl.Sub(now)))
	l.armed = dl
}
