package ads

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	next    uint64        // the lowest seq a goroutine blocked on ch waits for; 0 when none
	ch      chan struct{} // closed and replaced on an advance that reaches next
}

func newSeqGate() *seqGate { return &seqGate{ch: make(chan struct{})} }

func (g *seqGate) advance(seq uint64) {
	g.mu.Lock()
	if seq > g.applied {
		g.applied = seq
		// Replay advances once per record while start waits for the last
		// one: wake the waiters only when one of them is done. Those still
		// short of their seq wait again and set next anew.
		if g.next != 0 && seq >= g.next {
			close(g.ch)
			g.ch = make(chan struct{})
			g.next = 0
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
		if g.next == 0 || seq < g.next {
			g.next = seq
		}
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

// followQueue bounds the change records received and not yet applied.
const followQueue = 256

// snapshotBatch is how many of a snapshot's records travel together
// through the decoders: a snapshot's records are all there at once, so
// nothing waits for a batch to fill.
const snapshotBatch = 64

// streamBatch is the same for the change stream. A batch goes on when
// full or when a record says nothing more is pending on the stream
// (NumPending 0), so a record followed live goes on at once, and records
// of a catch-up in batches; and at the latest streamBatchWait after its
// first record came (a batch cut short by a lost connection).
const (
	streamBatch     = 64
	streamBatchWait = 5 * time.Millisecond
)

// follower materializes the model from the change stream: an ordered
// consumer that starts with the last record of every subject (the current
// state) and then follows new records. Two stages: decoders (decodeAhead,
// one per core but the apply loop's) decode the records the consumer's
// callback hands them (protobuf, then the object's JSON); the apply loop
// applies them in the stream's order, advances the gate and reports
// problems. Decoding needs nothing of the model, so it runs beside
// applying, on the other cores, and the loop sees the records as the
// stream ordered them. A snapshot is loaded the same way.
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
	// heap is readied for the snapshot the model starts from (nil: left
	// alone); the caller puts it back once start returns.
	heap                 *bootHeap
	decoders             int           // goroutines decoding records: a core each, less the apply loop's
	compactRefusedLogged atomic.Bool   // a refused compact form was logged (the decoders count every one)
	quit                 chan struct{} // closed when following stops

	// ahead is the decoders of the stage running now (loading a snapshot,
	// then following); nil before start. The consumer callback sends to
	// the following stage's decoders, the apply loop receives.
	ahead atomic.Pointer[decodeAhead]

	// owned by the apply loop (and by start before it starts the loop)
	caughtUpOnce sync.Once
	caughtUp     chan struct{}          // closed at the first message with nothing pending
	reported     map[model.Problem]bool // problems already reported
	reportedOnce bool
	// ignoredLabels are the series of pilotwire_ads_config_ignored set.
	ignoredLabels map[problemLabels]int
}

func newFollower(js jetstream.JetStream, names bus.Names, store *model.Store, gate *seqGate, log *slog.Logger, m *metrics) *follower {
	return &follower{
		js: js, names: names, store: store, gate: gate, log: log, metrics: m,
		decoders: max(runtime.GOMAXPROCS(0)-1, 1), quit: make(chan struct{}),
		caughtUp: make(chan struct{}),
	}
}

// decodedRecord is one change message as the consumer callback decoded it.
type decodedRecord struct {
	subject    string
	seq        uint64 // stream sequence
	numPending uint64
	mdErr      error         // the message has no metadata; nothing below is set
	pbErr      error         // not a ChangeRecord; d is not set
	compact    []byte        // the record's compact form from a snapshot, decoded instead of the record
	fromView   bool          // from a snapshot's view: compact comes without the record
	formErr    error         // from a view: compact did not decode; nothing else is set
	d          model.Decoded // the record with its object decoded
}

// start starts following and returns once the model has applied the
// stream's last sequence as of the call. The consumer and the apply loop
// keep running until stop, which waits for the loop to end.
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
	cfg, from, err := f.startFrom(ctx, info.State)
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ordered consumer on %s: %w", f.names.ChangesStream(), err)
	}
	ahead := newBatchedDecodeAhead(f.decoders, followQueue, streamBatch, streamBatchWait, f.quit, f.decodeMsg)
	f.ahead.Store(ahead)
	loopDone := make(chan struct{})
	go f.applyLoop(ahead, loopDone)
	// Pulls as the services' consumers make them (bus.PullConsume): a lost
	// pull (the ordered consumer then starts over where it was) costs 2 s,
	// not the 10 s of nats.go's default for ordered consumers; and large
	// ones, for the replay (bus.ReplayConsume).
	opts := append(bus.ReplayConsume(info.State), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			f.log.Warn("change stream consumer", "err", err)
		}
	}))
	cc, err := cons.Consume(f.handle, opts...)
	if err != nil {
		close(f.quit)
		<-loopDone
		ahead.wait()
		return nil, fmt.Errorf("consume %s: %w", f.names.ChangesStream(), err)
	}
	var stopOnce sync.Once
	stop = func() {
		stopOnce.Do(func() {
			cc.Stop()
			close(f.quit) // a callback still running returns without queueing
			<-loopDone
			ahead.wait()
		})
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
		stop()
		return nil, fmt.Errorf("bootstrap model: %w", err)
	}
	// The mesh of what was replayed is built before the frontend serves:
	// otherwise its first proxies wait for the build, and readiness
	// claims more than is done. This builds it, or waits for the apply
	// loop's build of it.
	f.store.Snapshot()
	f.log.Info("model bootstrapped", "seq", target, "snapshot_seq", from, "took", time.Since(start))
	return stop, nil
}

// startFrom loads the newest snapshot into the model, if there is one the
// stream still follows on from, and returns the consumer that delivers
// what comes after it (from: the snapshot's sequence). Without one the
// consumer starts with the last record of every subject. Either way the
// model holds every live object's last record: a snapshot is that set at
// its sequence.
func (f *follower) startFrom(ctx context.Context, st jetstream.StreamState) (jetstream.OrderedConsumerConfig, uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.names.ChangesAll()}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy}
	fromStream := func() {
		f.heap.stream(st.Bytes, st.Msgs, st.NumSubjects, cfg.DeliverPolicy == jetstream.DeliverAllPolicy)
	}
	if f.fullReplay {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
		fromStream()
		return cfg, 0, nil
	}
	if f.ignoreSnapshots {
		fromStream()
		return cfg, 0, nil
	}
	in, err := f.loadSnapshot(ctx, st.FirstSeq, st.LastSeq)
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
		f.heap.done() // sized for the snapshot, not for the stream
		fromStream()
		return cfg, 0, nil
	}
	if in == nil {
		fromStream()
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
		// Limits removed records the snapshot does not hold: starting from
		// it would miss them. Counted and logged as unusable by the caller.
		return nil, fmt.Errorf("the change stream lost the records after the newest snapshot (snapshot at seq %d, the stream starts at %d)", in.Seq, firstSeq)
	}
	f.heap.snapshot(in.Size)
	// The snapshot's view first: its compact forms without the records
	// beside them, a third of the bytes to fetch, hash and copy. Without
	// one, or when it cannot be used, the snapshot itself. What a view
	// applied before it stopped stays applied: the snapshot holds the
	// same records at the same sequences, and the store skips those at
	// or below what it applied.
	reserve := func(kinds map[string]int) {
		f.store.Reserve(model.Reservation{Objects: in.Objects, Services: kinds[serviceKind], EndpointSlices: kinds[sliceKind]})
	}
	err = f.applySnapshot(func(fn func(snapshot.Record) error) error { return st.ReadView(ctx, *in, reserve, fn) }, true)
	switch {
	case err == nil:
		f.metrics.bootstrapView.Set(1)
		return in, nil
	case errors.Is(err, snapshot.ErrNoView):
	case ctx.Err() != nil:
		return nil, err
	default:
		f.metrics.snapshotViewUnusable.Inc()
		f.log.Warn("snapshot view not usable; reading the snapshot itself", "snapshot", in.Name, "err", err)
	}
	reserve(nil)
	if err := f.applySnapshot(func(fn func(snapshot.Record) error) error { return st.Read(ctx, *in, fn) }, false); err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	return in, nil
}

// applySnapshot applies what read gives: decoded by the decoders, applied
// on one goroutine in the snapshot's order. A read that fails part way
// leaves what it sent applied. From a view (a compact form without its
// record), a form this build cannot decode ends the read: nothing from it
// on is applied, so the snapshot itself can take over from there.
func (f *follower) applySnapshot(read func(fn func(snapshot.Record) error) error, view bool) error {
	quit := make(chan struct{})
	ahead := newBatchedDecodeAhead(f.decoders, followQueue, snapshotBatch, 0, quit, f.decode)
	f.ahead.Store(ahead)
	var refused atomic.Pointer[decodedRecord] // from a view: the first form refused
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		ahead.each(func(r *decodedRecord) {
			switch {
			case refused.Load() != nil:
			case r.formErr != nil:
				rc := *r // r's place is reused
				refused.Store(&rc)
			default:
				f.applyDecoded(r)
			}
		})
	}()
	err := read(func(r snapshot.Record) error {
		if view {
			if refused.Load() != nil {
				return errViewRefused
			}
			if r.Model != nil && !model.CompactKnown(r.Model) {
				return fmt.Errorf("compact form of %s (seq %d) in a layout this frontend does not read (version byte %d)", r.Subject, r.Seq, r.Model[0])
			}
		}
		ahead.send(decodedRecord{subject: r.Subject, seq: r.Seq, compact: r.Model, fromView: view}, r.Data) // quit is closed only below
		return nil
	})
	ahead.closeInput()
	<-applied
	ahead.wait()
	close(quit)
	if r := refused.Load(); r != nil && (err == nil || errors.Is(err, errViewRefused)) {
		err = fmt.Errorf("compact form of %s (seq %d) refused: %w", r.subject, r.seq, r.formErr)
	}
	return err
}

// The kind tokens of Services and EndpointSlices in a view's counts.
var (
	serviceKind = bus.EscapeToken(bus.KindToken(&pb.ObjectRef{Kind: model.KindService}))
	sliceKind   = bus.EscapeToken(bus.KindToken(&pb.ObjectRef{Group: model.GroupDiscovery, Kind: model.KindEndpointSlice}))
)

// errViewRefused ends the read of a view once a form was refused.
var errViewRefused = errors.New("a compact form was refused")

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

// decode decodes a record's protobuf and object. It reads nothing of the
// follower's state: the decoders run it.
func (f *follower) decode(r *decodedRecord, data []byte) {
	if c := r.compact; c != nil {
		r.compact = nil
		d, err := model.DecodeCompact(c)
		if err == nil {
			r.d = d
			return
		}
		if r.fromView {
			// No record beside it: the loader reads the snapshot itself.
			r.formErr = err
			return
		}
		// The record beside it says the same. A snapshot that has one
		// bad form likely has more: the first is logged, all counted.
		f.metrics.compactRefused.Inc()
		if f.compactRefusedLogged.CompareAndSwap(false, true) {
			f.log.Warn("compact form in the snapshot refused: decoding the records beside such forms instead", "subject", r.subject, "seq", r.seq, "err", err)
		}
	}
	d, err := model.DecodeWire(data)
	if err != nil {
		r.pbErr = err
		return
	}
	r.d = d
}

// applyDecoded applies a decoded record; a bad one is logged and counted
// and changes nothing. It reports whether the record was a ChangeRecord.
func (f *follower) applyDecoded(r *decodedRecord) bool {
	if r.pbErr != nil {
		f.metrics.badRecords.Inc()
		f.log.Error("undecodable change record", "subject", r.subject, "seq", r.seq, "err", r.pbErr)
		return false
	}
	if err := f.store.ApplyDecoded(&r.d, r.seq); err != nil && !errors.Is(err, model.ErrAlreadyApplied) {
		f.metrics.badRecords.Inc()
		f.log.Error("change record not applied", "subject", r.subject, "seq", r.seq, "err", err)
	}
	return true
}

// decodeMsg decodes a consumer message's record unless it has no
// metadata (the apply loop logs that).
func (f *follower) decodeMsg(r *decodedRecord, data []byte) {
	if r.mdErr == nil {
		f.decode(r, data)
	}
}

// handle is the consumer callback: it hands the message to the decoders,
// in the order the consumer delivers. It returns without doing so once
// following stops.
func (f *follower) handle(msg jetstream.Msg) {
	r := decodedRecord{subject: msg.Subject()}
	if md, err := msg.Metadata(); err != nil {
		r.mdErr = err
	} else {
		r.seq, r.numPending = md.Sequence.Stream, md.NumPending
	}
	a := f.ahead.Load()
	a.send(r, msg.Data())
	if r.numPending == 0 || r.mdErr != nil {
		// Nothing more is on its way: what is held goes on now.
		a.flush()
	}
}

// queued is how many records are received and not yet applied.
func (f *follower) queued() int {
	if p := f.ahead.Load(); p != nil {
		return p.queued()
	}
	return 0
}

// applyLoop applies the decoded records in order until following stops.
func (f *follower) applyLoop(ahead *decodeAhead, done chan<- struct{}) {
	defer close(done)
	ahead.each(f.step)
}

// step applies one queued record and moves the gate past it.
func (f *follower) step(r *decodedRecord) {
	if r.mdErr != nil {
		f.log.Error("change message without metadata", "subject", r.subject, "err", r.mdErr)
		return
	}
	if !f.applyDecoded(r) {
		// The sequence is still applied: it changes nothing in the model.
		f.gate.advance(r.seq)
		if r.numPending == 0 {
			f.caughtUpOnce.Do(func() { close(f.caughtUp) })
		}
		return
	}
	f.metrics.appliedSeq.Set(float64(r.seq))
	f.gate.advance(r.seq)
	if r.numPending == 0 {
		f.caughtUpOnce.Do(func() { close(f.caughtUp) })
		if key := r.d.Key(); isConfig(key) || key.Kind == model.KindService || !f.reportedOnce {
			f.reportProblems()
		}
	}
}

// isConfig reports whether key is of a config kind (Istio's, the Gateway
// API's, ...): every group but the core and discovery ones.
func isConfig(key model.ObjectKey) bool {
	return key.Group != model.GroupCore && key.Group != model.GroupDiscovery
}

// problemLabels are the labels of pilotwire_ads_config_ignored.
type problemLabels struct{ kind, severity string }

// reportProblems logs, and counts in pilot_total_xds_internal_errors, each
// object (or part) the mesh newly ignores, at error level when leaving it
// out fails open, and sets pilotwire_ads_config_ignored to what it ignores
// now. It runs when the model has caught up after a change of config, so
// a replay reports each problem once.
func (f *follower) reportProblems() {
	f.reportedOnce = true
	now := make(map[model.Problem]bool)
	counts := make(map[problemLabels]int)
	for _, p := range f.store.Snapshot().Problems() {
		now[p] = true
		counts[problemLabels{cmp.Or(p.Kind(), "unknown"), p.Severity.String()}]++
		if f.reported[p] {
			continue
		}
		f.metrics.internalErrors.Inc()
		level := slog.LevelWarn
		if p.Severity == model.SeverityError {
			level = slog.LevelError
		}
		f.log.Log(context.Background(), level, "config ignored", "object", p.Object, "severity", p.Severity.String(), "reason", p.Reason)
	}
	f.reported = now
	for l := range f.ignoredLabels {
		if counts[l] == 0 {
			f.metrics.configIgnored.DeleteLabelValues(l.kind, l.severity)
		}
	}
	for l, n := range counts {
		f.metrics.configIgnored.WithLabelValues(l.kind, l.severity).Set(float64(n))
	}
	f.ignoredLabels = counts
}
