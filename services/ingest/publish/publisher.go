package publish

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// Options configure a Publisher. Zero values mean the defaults noted.
type Options struct {
	// Cluster is the cluster id every record carries (required).
	Cluster string
	// Names derives the stream and subjects (zero value: prefix "pw").
	Names bus.Names
	// Stream configures the CHANGES stream if Start creates it.
	Stream bus.StreamOptions
	// Log receives the publisher's logs (default: discarded).
	Log *slog.Logger
	// Registerer receives the publisher's metrics (default: none).
	Registerer prometheus.Registerer
	// MaxInFlight bounds publishes awaiting an ack (default 512). Keep it
	// below the JetStream context's async max pending (nats.go default 4000).
	MaxInFlight int
	// AckTimeout bounds the wait for one ack before the publish is retried
	// (default 5s).
	AckTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between retries (defaults
	// 50ms and 5s).
	RetryMin, RetryMax time.Duration
	// MassDeleteThreshold guards Sync: a Sync that would delete more than
	// this fraction of the cluster's live objects, and more than
	// MassDeleteFloor objects, publishes its adds and updates but none of
	// its deletes (logged and counted; Result.Withheld). 0 means 0.5; 1 or
	// more turns the guard off. An empty or wrong source at start, or a
	// cluster re-added before it listed, then deletes nothing. Apply is
	// never guarded: a source's single deletes flow.
	MassDeleteThreshold float64
	// MassDeleteFloor: a Sync deleting at most this many objects is never
	// withheld (default 10; negative: 0).
	MassDeleteFloor int
	// MassDeleteOverride tells, in the log line of withheld deletes, how
	// to allow them ("set --mass-delete-threshold=1", say).
	MassDeleteOverride string
	// Reread, if set, is the source's current view of an object. After a
	// conflict (another writer moved the object's subject on) the
	// publisher plans what Reread returns instead of the queued change,
	// which may be older than what the other writer stored; ok false
	// drops the change (the source has nothing to say now). Without
	// Reread the queued change is planned again. It is called with the
	// publisher's lock held, from within Apply or Sync.
	Reread func(Key) (c Change, ok bool)
	// MaxReplans bounds how often one change is planned again after its
	// subject moved on under it (default 5). The first re-plan is at
	// once, each further round waits a backoff (RetryMin doubling up to
	// RetryMax, with the lock held: the cluster's other changes wait too,
	// for a bounded time).
	MaxReplans int
	// Now is the clock of observed_at (default time.Now).
	Now func() time.Time
	// Records, if set, is the allowlist of kinds the publisher records
	// (ingest passes manifest.Recorded). A change of another kind is
	// never published (logged, rejected_records_total{reason=
	// "kind_not_recorded"}), and Start purges the cluster's subjects of
	// such kinds from the stream (logged, purged_subjects_total{kind}):
	// an older ingest may have recorded them, and a delete would carry
	// their last content. Nil records every kind.
	Records func(group, kind string) bool
	// IgnoreSnapshots makes Start read the last record of every subject
	// of the cluster even when the snapshot bucket (pkg/snapshot) has a
	// snapshot to start from. By default Start reads the newest snapshot
	// and then only the records after it; a snapshot it cannot use is
	// logged and counted (snapshot_unusable_total{reason}) and the stream
	// read instead.
	IgnoreSnapshots bool
}

func (o Options) withDefaults() Options {
	if o.Names.Prefix == "" {
		o.Names.Prefix = bus.DefaultPrefix
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 512
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 5 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 50 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(5*time.Second, o.RetryMin)
	}
	if o.MassDeleteThreshold <= 0 {
		o.MassDeleteThreshold = 0.5
	}
	switch {
	case o.MassDeleteFloor == 0:
		o.MassDeleteFloor = 10
	case o.MassDeleteFloor < 0:
		o.MassDeleteFloor = 0
	}
	if o.MaxReplans <= 0 {
		o.MaxReplans = 5
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Result counts what one Apply or Sync did.
type Result struct {
	// Published records were stored by this call.
	Published int
	// Deduplicated records were already stored (JetStream recognised the
	// message id, or the subject's last record was ours).
	Deduplicated int
	// Unchanged changes matched what the stream already had.
	Unchanged int
	// Rejected changes can never be stored (too large, empty object), or
	// were given up after MaxReplans conflicts; each was logged and counted.
	Rejected int
	// Withheld deletes were not published by a Sync that would have
	// deleted too much (the mass-delete guard, Options.MaxDeleteFraction).
	Withheld int
}

func (r *Result) add(o Result) {
	r.Published += o.Published
	r.Deduplicated += o.Deduplicated
	r.Unchanged += o.Unchanged
	r.Rejected += o.Rejected
	r.Withheld += o.Withheld
}

// entry is what the stream says about one object: its subject's last record.
type entry struct {
	uid, rv, version, source string
	content                  string // Object.ContentVersion of the record, if any
	seq                      uint64
	live                     bool // the last record is not a DELETE
}

// Publisher publishes one cluster's change records. It is safe for
// concurrent use; calls are serialised.
type Publisher struct {
	// set at construction
	js      jetstream.JetStream
	opts    Options
	log     *slog.Logger
	metrics *metrics

	// mu serialises Start, Apply, Sync and Live; it is held for a whole
	// batch, which is what keeps each object's records in order.
	mu sync.Mutex
	// guarded by mu, set by Start
	stream  jetstream.Stream
	maxSize int // largest message (payload + headers) the stream and server take
	// guarded by mu
	state   map[Key]*entry
	live    int
	lastSeq uint64
	// unrecorded: subjects of kinds off Options.Records found by load,
	// purged by Start.
	unrecorded map[string]Key
}

// New returns a publisher; it does no I/O (see Start).
func New(js jetstream.JetStream, o Options) (*Publisher, error) {
	if o.Cluster == "" {
		return nil, errors.New("publisher: cluster id is required")
	}
	o = o.withDefaults()
	return &Publisher{
		js:      js,
		opts:    o,
		log:     o.Log.With("cluster", o.Cluster),
		metrics: newMetrics(o.Registerer),
		state:   make(map[Key]*entry),
	}, nil
}

// Start ensures the CHANGES stream and reads the last record of every
// subject of the cluster: from the newest snapshot and the records after
// it, or from the stream alone (see Options.IgnoreSnapshots). It must
// succeed before Apply and Sync.
func (p *Publisher) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, err := bus.EnsureStream(ctx, p.js, p.opts.Names.ChangesConfig(p.opts.Stream))
	if err != nil {
		return err
	}
	maxSize := int(s.CachedInfo().Config.MaxMsgSize)
	if mp := int(p.js.Conn().MaxPayload()); mp > 0 && (maxSize <= 0 || mp < maxSize) {
		maxSize = mp
	}
	if maxSize <= 0 {
		maxSize = bus.DefaultMaxMsgSize
	}
	p.state = make(map[Key]*entry)
	p.live, p.lastSeq = 0, 0
	start := time.Now()
	p.unrecorded = nil
	from, err := p.startState(ctx, s)
	if err != nil {
		return err
	}
	if err := p.purgeUnrecorded(ctx, s); err != nil {
		return err
	}
	p.stream, p.maxSize = s, maxSize
	p.metrics.objects.Set(float64(p.live))
	p.metrics.lastSeq.Set(float64(p.lastSeq))
	p.log.Info("read current objects from the change stream",
		"stream", s.CachedInfo().Config.Name, "objects", p.live, "subjects", len(p.state),
		"seq", p.lastSeq, "snapshot_seq", from, "max_msg_size", maxSize, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// StartRetrying calls Start until it succeeds or ctx ends, with backoff
// from 500ms to 30s: NATS or the stream may not be there yet. Each failure
// is logged, counted and passed to onFailure if set. It returns an error
// only when ctx ends.
func (p *Publisher) StartRetrying(ctx context.Context, onFailure func(err error, wait time.Duration)) error {
	return svc.Retry(ctx, svc.RetryOptions{
		First: 500 * time.Millisecond, Max: 30 * time.Second,
		Log: p.log, Msg: "cannot read the change stream, retrying", Failures: p.metrics.retries.WithLabelValues(retryStart),
		OnFailure: onFailure,
	}, func() error { return p.Start(ctx) })
}

// Apply publishes what changes mean against the stream's current state,
// in order, and returns once every resulting record is stored. A failing
// publish is retried with backoff until it succeeds or ctx ends; the only
// error is ctx's (or a publisher that was not started).
func (p *Publisher) Apply(ctx context.Context, changes ...Change) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.apply(ctx, changes)
}

// Sync makes the stream match desired, a source's complete set of objects:
// objects that differ are published, and every live object of the cluster
// that desired lacks is deleted.
func (p *Publisher) Sync(ctx context.Context, desired []Object) (Result, error) {
	return p.SyncKeeping(ctx, desired, nil)
}

// SyncKeeping is Sync but for the live objects keep (if not nil) reports,
// which are left as they are: a source that cannot see some of its objects
// (a Kubernetes kind it may not list) says they are unknown, not gone.
func (p *Publisher) SyncKeeping(ctx context.Context, desired []Object, keep func(Key) bool) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changes := make([]Change, 0, len(desired))
	want := make(map[Key]struct{}, len(desired))
	for _, o := range desired {
		changes = append(changes, Upsert(o))
		want[o.Key] = struct{}{}
	}
	var gone []Key
	for k, e := range p.state {
		if _, ok := want[k]; e.live && !ok && (keep == nil || !keep(k)) {
			gone = append(gone, k)
		}
	}
	if p.massDelete(len(gone)) {
		res, err := p.apply(ctx, changes)
		res.Withheld = len(gone)
		return res, err
	}
	slices.SortFunc(gone, CompareKeys)
	for _, k := range gone {
		changes = append(changes, Delete(Object{Key: k}))
	}
	return p.apply(ctx, changes)
}

// massDelete reports, logs and counts a Sync whose deletes the mass-delete
// guard withholds. Caller holds mu.
func (p *Publisher) massDelete(deletes int) bool {
	t := p.opts.MassDeleteThreshold
	if t >= 1 || deletes <= p.opts.MassDeleteFloor || float64(deletes) <= t*float64(p.live) {
		return false
	}
	p.metrics.massDeletes.Inc()
	p.log.Error("sync would delete most of the cluster's objects; withholding its deletes (its adds and updates are published; an empty or wrong source, or a cluster that has not listed, looks like this)",
		"deletes", deletes, "live", p.live, "threshold", t, "override", p.opts.MassDeleteOverride)
	return true
}

// LiveObject is what the stream says about one live object.
type LiveObject struct {
	Key             Key
	Version         string
	UID             string
	ResourceVersion string
	Source          string
	Seq             uint64
}

// Live lists the cluster's live objects as the stream has them, sorted by key.
func (p *Publisher) Live() []LiveObject {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]LiveObject, 0, p.live)
	for k, e := range p.state {
		if e.live {
			out = append(out, LiveObject{Key: k, Version: e.version, UID: e.uid, ResourceVersion: e.rv, Source: e.source, Seq: e.seq})
		}
	}
	slices.SortFunc(out, func(a, b LiveObject) int { return CompareKeys(a.Key, b.Key) })
	return out
}

// setEntry records that m is the subject's last record, stored at seq.
func (p *Publisher) setEntry(k Key, e entry) {
	old := p.state[k]
	switch {
	case old == nil:
		old = &entry{}
		p.state[k] = old
		if e.live {
			p.live++
		}
	case old.live && !e.live:
		p.live--
	case !old.live && e.live:
		p.live++
	}
	*old = e
	if e.seq > p.lastSeq {
		p.lastSeq = e.seq
	}
}
