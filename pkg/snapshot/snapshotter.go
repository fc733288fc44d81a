package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// Defaults of Options.
const (
	// DefaultInterval between snapshots.
	DefaultInterval = 10 * time.Minute
	// DefaultRetention is how far back the history can be rebuilt exactly
	// (`pilotwire render --at`); records older than that which no live
	// object needs are purged.
	DefaultRetention = 72 * time.Hour
	// DefaultMaxPurges bounds the subjects purged per cycle, so that one
	// cycle never holds the snapshotter for long; the rest wait for the
	// next cycle.
	DefaultMaxPurges = 5000
)

// Options configure a Snapshotter. Zero values mean the defaults.
type Options struct {
	JS     jetstream.JetStream
	Names  bus.Names
	Stream bus.StreamOptions
	// Interval between snapshots (a snapshot is written only when the
	// stream moved since the last one).
	Interval time.Duration
	// Retention: records and snapshots older than this are compacted.
	// Snapshots are kept about Retention/8 apart within it, plus the
	// newest one older than it (the horizon).
	Retention time.Duration
	// MaxPurges bounds the subjects purged per cycle.
	MaxPurges int
	Log       *slog.Logger
	// Registerer receives the metrics (nil: none).
	Registerer prometheus.Registerer
	// Now is the clock of the retention window (tests).
	Now func() time.Time
	// Model gives a record's compact form (Record.Model) from its encoded
	// pb.ChangeRecord, nil for none; nil: snapshots hold records alone.
	Model func(data []byte) []byte
}

func (o Options) withDefaults() Options {
	if o.Names.Prefix == "" {
		o.Names.Prefix = bus.DefaultPrefix
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxPurges <= 0 {
		o.MaxPurges = DefaultMaxPurges
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Snapshotter writes snapshots and compacts the change stream. Run it in
// one instance only (under a lease): two would each compact on their own
// view, which is safe (purges are bounded by sequence) but wasteful.
type Snapshotter struct {
	// set at construction
	opts    Options
	log     *slog.Logger
	metrics *metrics

	// owned by Run (and by the caller of Step in tests)
	store  *Store
	stream jetstream.Stream
	set    *Set
	cc     jetstream.ConsumeContext // the consumer of what follows the snapshot
	msgs   chan jetstream.Msg       // its messages, in order (bounded: it waits when full)
	stop   chan struct{}            // closed by Close: the consumer's callback gives up
	last   uint64                   // sequence of the newest snapshot written or found
}

// Close stops a consumer left by a Step that did not return normally.
func (s *Snapshotter) Close() {
	if s.cc != nil {
		close(s.stop)
		s.cc.Stop()
		s.cc = nil
	}
}

// New returns a snapshotter; it does no I/O.
func New(o Options) *Snapshotter {
	o = o.withDefaults()
	return &Snapshotter{opts: o, log: o.Log.With("component", "snapshot"), metrics: newMetrics(o.Registerer)}
}

// Run starts from the newest snapshot (state of an earlier Run is
// dropped) and every Interval reads what the stream gained, writes a
// snapshot if it moved and compacts, until ctx ends (nil) or a step fails.
// Between cycles it holds no consumer.
func (s *Snapshotter) Run(ctx context.Context) error {
	defer s.Close()
	if err := s.start(ctx); err != nil {
		return err
	}
	t := time.NewTimer(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := s.Step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		t.Reset(s.opts.Interval)
	}
}

// Step reads what the stream holds now and runs one cycle (write a
// snapshot if the stream moved, then compact). Run does this every
// Interval; tests and tools call it directly.
func (s *Snapshotter) Step(ctx context.Context) (Info, error) {
	if s.set == nil {
		if err := s.start(ctx); err != nil {
			return Info{}, err
		}
	}
	if err := s.catchUp(ctx); err != nil {
		return Info{}, err
	}
	if err := s.cycle(ctx); err != nil {
		return Info{}, err
	}
	return Info{Seq: s.last, Objects: s.set.Len()}, nil
}

// start opens the bucket and the stream and loads the newest snapshot.
func (s *Snapshotter) start(ctx context.Context) error {
	st, err := Ensure(ctx, s.opts.JS, s.opts.Names, s.opts.Stream)
	if err != nil {
		return err
	}
	stream, err := bus.EnsureStream(ctx, s.opts.JS, s.opts.Names.ChangesConfig(s.opts.Stream))
	if err != nil {
		return err
	}
	s.Close()
	s.store, s.stream, s.set, s.last = st, stream, NewSet(), 0
	began := time.Now()
	latest, err := st.Latest(ctx, 0, time.Time{})
	if err != nil {
		return err
	}
	if latest != nil {
		if s.set, err = st.loadSet(ctx, *latest); err != nil {
			return err
		}
		s.last = latest.Seq
	}
	s.log.Info("snapshotter started", "snapshot_seq", s.last, "objects", s.set.Len(), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// catchUp applies every record the stream holds after the set's sequence,
// with an ordered consumer that lives for this call only. Its pulls are
// the services' (bus.ReplayConsume): a lost pull is noticed after two
// missed heartbeats of a second, within the 5 s a catch-up waits for
// progress, where nats.go's defaults (15 s heartbeats) ended the cycle
// with nothing read (TestCatchUpAfterALostPull).
func (s *Snapshotter) catchUp(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("changes stream info: %w", err)
	}
	target := info.State.LastSeq
	if target <= s.set.Seq() {
		return nil
	}
	if first := info.State.FirstSeq; s.set.Seq() > 0 && first > s.set.Seq()+1 {
		s.metrics.errors.WithLabelValues("gap").Inc()
		s.log.Error("the change stream lost records after the snapshotter's sequence (hard limits --changes-max-age/--changes-max-bytes?); the snapshots miss what they held",
			"seq", s.set.Seq(), "first_seq", first)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.opts.Names.ChangesAll()}}
	if s.set.Seq() > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.set.Seq()+1
	}
	cons, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("snapshot consumer: %w", err)
	}
	msgs, stop := make(chan jetstream.Msg, 4096), make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-stop:
		}
	}, append(bus.ReplayConsume(info.State), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.metrics.errors.WithLabelValues("consumer").Inc()
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			s.log.Warn("snapshot consumer missed its heartbeats (a pull lost?); it starts over", "seq", s.set.Seq())
			return
		}
		s.log.Warn("snapshot consumer", "err", err)
	}))...)
	if err != nil {
		return fmt.Errorf("snapshot consumer: %w", err)
	}
	s.cc, s.msgs, s.stop = cc, msgs, stop
	defer s.Close()
	for s.set.Seq() < target {
		before := s.set.Seq()
		if err := s.follow(ctx, 5*time.Second, target); err != nil {
			return err
		}
		if s.set.Seq() == before {
			break // the last sequences were removed (never delivered)
		}
	}
	return nil
}

// follow applies the records that arrive within wait, or until the set
// reaches until.
func (s *Snapshotter) follow(ctx context.Context, wait time.Duration, until uint64) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	defer func() { s.metrics.appliedSeq.Set(float64(s.set.Seq())) }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case msg := <-s.msgs:
			md, err := msg.Metadata()
			if err != nil || md.Sequence.Stream <= s.set.Seq() {
				continue
			}
			_ = s.set.Add(Record{Subject: msg.Subject(), Seq: md.Sequence.Stream, Time: md.Timestamp, Content: msg.Headers().Get(contentHeader), Data: msg.Data()})
			if s.set.Seq() >= until {
				return nil
			}
		}
	}
}

// contentHeader is ingest's Pilotwire-Content-Version header
// (publish.ContentVersionHeader), kept with each record so that a consumer
// of the snapshot sees what a consumer of the stream sees.
const contentHeader = "Pilotwire-Content-Version"

// cycle writes a snapshot when the stream moved, then compacts.
func (s *Snapshotter) cycle(ctx context.Context) error {
	if s.set.Seq() > s.last {
		began := time.Now()
		s.set.fillModels(s.opts.Model)
		in, err := s.store.Write(ctx, s.set)
		if err != nil {
			s.metrics.errors.WithLabelValues("write").Inc()
			return err
		}
		s.last = in.Seq
		took := time.Since(began)
		s.metrics.writes.Inc()
		s.metrics.lastSeq.Set(float64(in.Seq))
		s.metrics.objects.Set(float64(in.Objects))
		s.metrics.bytes.Set(float64(in.Size))
		s.metrics.writeSeconds.Observe(took.Seconds())
		s.log.Info("snapshot written", "seq", in.Seq, "objects", in.Objects, "deleted_subjects", s.set.Deleted(), "bytes", in.Size, "took", took.Round(time.Millisecond))
		s.writeView(ctx, in)
	}
	return s.compact(ctx)
}

// writeView writes the frontends' view of the snapshot just written, when
// records have compact forms. A failure costs frontends speed, not
// correctness (they read the snapshot itself), so it is logged and
// counted and the cycle goes on; the next snapshot has its own view.
func (s *Snapshotter) writeView(ctx context.Context, in Info) {
	if s.opts.Model == nil {
		return
	}
	began := time.Now()
	size, err := s.store.WriteView(ctx, s.set, in, s.set.kinds(s.opts.Names.ChangeKind))
	if err != nil {
		s.metrics.errors.WithLabelValues("view").Inc()
		s.log.Warn("snapshot view not written: frontends read the snapshot itself", "seq", in.Seq, "err", err)
		return
	}
	s.metrics.viewBytes.Set(float64(size))
	s.log.Info("snapshot view written", "seq", in.Seq, "bytes", size, "took", time.Since(began).Round(time.Millisecond))
}

// compact keeps snapshots about Retention/8 apart within the window plus
// the newest one older than it (the horizon), removes the others, and
// purges what no point after the horizon needs.
func (s *Snapshotter) compact(ctx context.Context) error {
	all, views, err := s.store.list(ctx)
	if err != nil {
		return err
	}
	if err := s.dropOrphanViews(ctx, all, views); err != nil {
		return err
	}
	edge := s.opts.Now().Add(-s.opts.Retention)
	spacing := s.opts.Retention / 8
	var horizon *Info
	var drop []Info
	if n := len(all); n > 0 {
		kept := all[n-1]
		if !kept.Time.After(edge) {
			horizon = &all[n-1]
		}
		for i := n - 2; i >= 0; i-- {
			in := all[i]
			switch {
			case horizon != nil:
				drop = append(drop, in)
			case !in.Time.After(edge):
				horizon = &all[i]
			case kept.Time.Sub(in.Time) >= spacing:
				kept = in
			default:
				drop = append(drop, in)
			}
		}
	}
	if horizon == nil {
		return s.dropSnapshots(ctx, drop)
	}
	// The horizon is announced before anything below it goes.
	if old, err := s.store.Horizon(ctx); err != nil {
		return err
	} else if horizon.Seq > old {
		if err := s.store.setHorizon(ctx, horizon.Seq); err != nil {
			return err
		}
		s.metrics.horizon.Set(float64(horizon.Seq))
	}
	if err := s.dropSnapshots(ctx, drop); err != nil {
		return err
	}
	plan := s.set.PlanPurges(horizon.Seq, s.opts.MaxPurges)
	var deleted, superseded int
	for _, p := range plan {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(p.Subject), jetstream.WithPurgeSequence(p.Below)); err != nil {
			s.metrics.errors.WithLabelValues("purge").Inc()
			return fmt.Errorf("purge %s below %d: %w", p.Subject, p.Below, err)
		}
		s.set.Done(p)
		if p.Deleted {
			deleted++
		} else {
			superseded++
		}
	}
	s.metrics.purged.WithLabelValues("deleted").Add(float64(deleted))
	s.metrics.purged.WithLabelValues("superseded").Add(float64(superseded))
	if len(plan) > 0 {
		s.log.Info("compacted the change stream", "horizon_seq", horizon.Seq, "horizon_time", horizon.Time,
			"deleted_subjects_purged", deleted, "live_subjects_compacted", superseded, "limited", len(plan) == s.opts.MaxPurges)
	}
	return nil
}

// dropOrphanViews removes views whose snapshot is gone (removed by a
// snapshotter from before views, which left them).
func (s *Snapshotter) dropOrphanViews(ctx context.Context, all []Info, views []string) error {
	have := make(map[string]bool, len(all))
	for _, in := range all {
		have[viewName(in)] = true
	}
	for _, name := range views {
		if have[name] {
			continue
		}
		if err := s.store.deleteObject(ctx, name); err != nil {
			s.metrics.errors.WithLabelValues("delete").Inc()
			return err
		}
		s.log.Info("removed a snapshot view without its snapshot", "view", name)
	}
	return nil
}

func (s *Snapshotter) dropSnapshots(ctx context.Context, drop []Info) error {
	for _, in := range drop {
		if err := s.store.Delete(ctx, in); err != nil {
			s.metrics.errors.WithLabelValues("delete").Inc()
			return err
		}
		s.metrics.deleted.Inc()
	}
	return nil
}
