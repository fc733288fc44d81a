package ads

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// seqGate lets goroutines wait until the model has applied a sequence.
type seqGate struct {
	mu      sync.Mutex
	applied uint64
	waiters int           // goroutines blocked in wait
	ch      chan struct{} // closed and replaced on an advance that has waiters
}

func newSeqGate() *seqGate { return &seqGate{ch: make(chan struct{})} }

func (g *seqGate) advance(seq uint64) {
	g.mu.Lock()
	if seq > g.applied {
		g.applied = seq
		if g.waiters > 0 { // replay applies thousands a second: wake only if needed
			close(g.ch)
			g.ch = make(chan struct{})
		}
	}
	g.mu.Unlock()
}

func (g *seqGate) get() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.applied
}

// wait blocks until seq is applied or ctx ends.
func (g *seqGate) wait(ctx context.Context, seq uint64) error {
	for {
		g.mu.Lock()
		if g.applied >= seq {
			g.mu.Unlock()
			return nil
		}
		ch := g.ch
		g.waiters++
		g.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		g.mu.Lock()
		g.waiters--
		g.mu.Unlock()
		if err != nil {
			return fmt.Errorf("wait for change seq %d (applied %d): %w", seq, g.get(), err)
		}
	}
}

// follower materializes the model from the change stream: an ordered
// consumer that starts with the last record of every subject (the current
// state) and then follows new records.
type follower struct {
	// set at construction
	js      jetstream.JetStream
	names   bus.Names
	store   *model.Store
	gate    *seqGate
	log     *slog.Logger
	metrics *metrics
	// fullReplay reads the whole stream instead of a snapshot or the last
	// record of each subject (tests compare the two); ignoreSnapshots
	// reads the last record of each subject even when there is a snapshot.
	fullReplay, ignoreSnapshots bool

	// owned by the consumer callback
	caughtUpOnce sync.Once
	caughtUp     chan struct{}          // closed at the first message with nothing pending
	reported     map[model.Problem]bool // problems already reported
	reportedOnce bool
}

func newFollower(js jetstream.JetStream, names bus.Names, store *model.Store, gate *seqGate, log *slog.Logger, m *metrics) *follower {
	return &follower{js: js, names: names, store: store, gate: gate, log: log, metrics: m, caughtUp: make(chan struct{})}
}

// bootstrap starts following and returns once the model has applied the
// stream's last sequence as of the call. The consumer keeps running until
// ctx ends; run waits for it.
func (f *follower) start(ctx context.Context) (stop func(), err error) {
	stream, err := f.js.Stream(ctx, f.names.ChangesStream())
	if err != nil {
		return nil, fmt.Errorf("changes stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("changes stream info: %w", err)
	}
	target := info.State.LastSeq
	start := time.Now()
	cfg, from, err := f.startFrom(ctx, info.State.FirstSeq, info.State.LastSeq)
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ordered consumer on %s: %w", f.names.ChangesStream(), err)
	}
	cc, err := cons.Consume(f.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			f.log.Warn("change stream consumer", "err", err)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", f.names.ChangesStream(), err)
	}
	// Caught up when the stream's last sequence as of now is applied, or when
	// a delivered record says nothing is pending (the last sequence may be a
	// deleted message, which is never delivered).
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-f.caughtUp:
			cancel()
		case <-wctx.Done():
		}
	}()
	err = f.gate.wait(wctx, target)
	caught := false
	select {
	case <-f.caughtUp:
		caught = true
	default:
	}
	cancel()
	if err != nil && !caught {
		cc.Stop()
		return nil, fmt.Errorf("bootstrap model: %w", err)
	}
	f.log.Info("model bootstrapped", "seq", target, "snapshot_seq", from, "took", time.Since(start))
	return cc.Stop, nil
}

// startFrom loads the newest snapshot into the model, if there is one the
// stream still follows on from, and returns the consumer that delivers
// what comes after it (from: the snapshot's sequence). Without one the
// consumer starts with the last record of every subject. Either way the
// model holds every live object's last record: a snapshot is that set at
// its sequence.
func (f *follower) startFrom(ctx context.Context, firstSeq, lastSeq uint64) (jetstream.OrderedConsumerConfig, uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.names.ChangesAll()}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy}
	if f.fullReplay {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
		return cfg, 0, nil
	}
	if f.ignoreSnapshots {
		return cfg, 0, nil
	}
	in, err := f.loadSnapshot(ctx, firstSeq, lastSeq)
	if err != nil {
		if ctx.Err() != nil {
			return cfg, 0, err
		}
		// A snapshot only shortens the start. Whatever of it was applied
		// is still right: each object it holds was live at its sequence,
		// so the object's last record on the stream is at or after it
		// (compaction keeps the last record of live objects), and the
		// consumer below delivers that record again or a later one.
		f.metrics.snapshotUnusable.Inc()
		f.log.Error("snapshot not usable; starting from the change stream instead", "err", err)
		return cfg, 0, nil
	}
	if in == nil {
		return cfg, 0, nil
	}
	f.gate.advance(in.Seq)
	f.metrics.appliedSeq.Set(float64(in.Seq))
	f.metrics.snapshotSeq.Set(float64(in.Seq))
	f.reportProblems()
	cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, in.Seq+1
	return cfg, in.Seq, nil
}

// loadSnapshot applies the newest snapshot the stream follows on from and
// returns it, or nil when there is none to use. A snapshot past the
// stream's last sequence (a stream re-created under an old bucket) is an
// error: starting after it would skip every record the stream holds.
func (f *follower) loadSnapshot(ctx context.Context, firstSeq, lastSeq uint64) (*snapshot.Info, error) {
	st, err := snapshot.Open(ctx, f.js, f.names)
	if err != nil || st == nil {
		return nil, err
	}
	in, err := st.Latest(ctx, 0, time.Time{})
	if err != nil || in == nil {
		return nil, err
	}
	if in.Seq > lastSeq {
		// Written after the stream's info was read, or from another stream.
		if lastSeq, err = f.lastSeq(ctx); err != nil {
			return nil, err
		}
		if in.Seq > lastSeq {
			return nil, fmt.Errorf("snapshot at seq %d is past the change stream's last seq %d", in.Seq, lastSeq)
		}
	}
	if firstSeq > in.Seq+1 {
		f.log.Error("the change stream lost records after the newest snapshot; starting from the stream instead", "snapshot_seq", in.Seq, "first_seq", firstSeq)
		return nil, nil
	}
	err = st.Read(ctx, *in, func(r snapshot.Record) error {
		f.apply(r.Subject, r.Seq, r.Data)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	return in, nil
}

// lastSeq reads the change stream's last sequence.
func (f *follower) lastSeq(ctx context.Context) (uint64, error) {
	stream, err := f.js.Stream(ctx, f.names.ChangesStream())
	if err != nil {
		return 0, fmt.Errorf("changes stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("changes stream info: %w", err)
	}
	return info.State.LastSeq, nil
}

// apply decodes and applies one record; a bad one is logged and counted
// and changes nothing. It returns the record, or nil if undecodable.
func (f *follower) apply(subject string, seq uint64, data []byte) *pb.ChangeRecord {
	rec := &pb.ChangeRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		f.metrics.badRecords.Inc()
		f.log.Error("undecodable change record", "subject", subject, "seq", seq, "err", err)
		return nil
	}
	if err := f.store.Apply(rec, seq); err != nil && !errors.Is(err, model.ErrAlreadyApplied) {
		f.metrics.badRecords.Inc()
		f.log.Error("change record not applied", "subject", subject, "seq", seq, "err", err)
	}
	return rec
}

func (f *follower) handle(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		f.log.Error("change message without metadata", "subject", msg.Subject(), "err", err)
		return
	}
	rec := f.apply(msg.Subject(), md.Sequence.Stream, msg.Data())
	if rec == nil {
		// The sequence is still applied: it changes nothing in the model.
		f.gate.advance(md.Sequence.Stream)
		if md.NumPending == 0 {
			f.caughtUpOnce.Do(func() { close(f.caughtUp) })
		}
		return
	}
	f.metrics.appliedSeq.Set(float64(md.Sequence.Stream))
	f.gate.advance(md.Sequence.Stream)
	if md.NumPending == 0 {
		f.caughtUpOnce.Do(func() { close(f.caughtUp) })
		if rec.GetRef().GetGroup() == model.GroupNetworking || rec.GetRef().GetKind() == model.KindService || !f.reportedOnce {
			f.reportProblems()
		}
	}
}

// reportProblems logs, and counts in pilot_total_xds_internal_errors, each
// object (or part) the mesh newly ignores. It runs when the model has
// caught up after a change of config, so a replay reports each problem once.
func (f *follower) reportProblems() {
	f.reportedOnce = true
	now := make(map[model.Problem]bool)
	for _, p := range f.store.Snapshot().Problems() {
		now[p] = true
		if !f.reported[p] {
			f.metrics.internalErrors.Inc()
			f.log.Warn("config ignored", "object", p.Object, "reason", p.Reason)
		}
	}
	f.reported = now
}
