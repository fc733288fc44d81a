package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// load reads, with an ordered consumer that stops when none is pending,
// the last record of every subject of the cluster (from 0: deliver last
// per subject), or every record of the cluster after sequence from (the
// state holds a snapshot at from; later records replace its entries). An
// empty stream, or one without this cluster, is fine.
func (p *Publisher) load(ctx context.Context, s jetstream.Stream, from uint64) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{p.opts.Names.ChangesCluster(p.opts.Cluster)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("read current objects: create consumer: %w", err)
	}
	defer func() {
		// Best effort: the server would drop the idle consumer anyway.
		if ci := cons.CachedInfo(); ci != nil {
			_ = s.DeleteConsumer(ctx, ci.Name)
		}
	}()
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read current objects: consumer info: %w", err)
	}
	if info.NumPending == 0 {
		return nil
	}
	if from == 0 && len(p.state) == 0 {
		p.state = make(map[Key]*entry, info.NumPending) // one record per subject
	}
	// The services' pulls (bus.PullMessages): a lost pull is noticed after
	// two missed heartbeats of a second, where nats.go's defaults took 30 s
	// (TestStartAfterALostPull). A pull takes as many records as a
	// frontend's replay does (bus.ReplayPullSize).
	pull := 1024
	if si := s.CachedInfo(); si != nil {
		pull = bus.ReplayPullSize(si.State)
	}
	it, err := cons.Messages(bus.PullMessages(pull)...)
	if err != nil {
		return fmt.Errorf("read current objects: %w", err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read current objects: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("read current objects: metadata: %w", err)
		}
		p.absorb(msg.Subject(), msg.Data(), msg.Headers().Get(ContentVersionHeader), meta.Sequence.Stream)
		if meta.NumPending == 0 {
			return nil
		}
	}
}

// absorb records a subject's last record, read from the stream, with its
// ContentVersionHeader (content, possibly empty). A record
// this publisher cannot read (undecodable, or from a writer version whose
// shape it does not know) still moves the subject's sequence: it is
// recorded as not live, so the next record follows it (and Sync never
// deletes it), instead of expecting a sequence the subject has left.
func (p *Publisher) absorb(subject string, data []byte, content string, seq uint64) {
	var rec pb.ChangeRecord
	err := proto.Unmarshal(data, &rec)
	if err == nil && rec.GetRef() != nil {
		r := rec.GetRef()
		if got := p.opts.Names.ChangeSubject(p.opts.Cluster, r); got == subject {
			k := Key{Group: r.GetGroup(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName()}
			if !p.recorded(k) {
				p.markUnrecorded(subject, k)
				return
			}
			p.setEntry(k, entry{
				uid: rec.GetUid(), rv: rec.GetResourceVersion(), version: r.GetVersion(), source: rec.GetSource(),
				content: content, seq: seq, live: rec.GetOp() != pb.Op_OP_DELETE,
			})
			return
		}
		err = errors.New("record does not match its subject")
	}
	if err == nil {
		err = errors.New("record has no object reference")
	}
	p.metrics.unreadable.Inc()
	k, ok := p.keyOf(subject)
	if !ok {
		p.log.Warn("skipping an unreadable change record on a subject that names no object", "subject", subject, "seq", seq, "err", err)
		return
	}
	if !p.recorded(k) {
		p.markUnrecorded(subject, k)
		return
	}
	p.log.Warn("unreadable change record: keeping its sequence, treating the object as unknown (not deleted, the next record follows it)",
		"subject", subject, "seq", seq, "err", err)
	p.setEntry(k, entry{seq: seq})
}

// keyOf parses one of the cluster's change subjects:
// <prefix>.changes.<cluster>.<kind>[.<group>].<namespace>.<name>, tokens
// escaped.
func (p *Publisher) keyOf(subject string) (Key, bool) {
	prefix := strings.TrimSuffix(p.opts.Names.ChangesCluster(p.opts.Cluster), ">")
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return Key{}, false
	}
	toks := strings.Split(rest, ".")
	if len(toks) != 3 {
		return Key{}, false
	}
	var parts [3]string
	for i, t := range toks {
		u, err := bus.UnescapeToken(t)
		if err != nil {
			return Key{}, false
		}
		parts[i] = u
	}
	k := Key{Namespace: parts[1], Name: parts[2]}
	if toks[1] == "_" {
		k.Namespace = ""
	}
	k.Kind, k.Group, _ = strings.Cut(parts[0], ".")
	if k.Kind == "" || k.Name == "" || p.opts.Names.ChangeSubject(p.opts.Cluster, k.ref("")) != subject {
		return Key{}, false
	}
	return k, true
}

// recorded reports whether the publisher records k's kind (Options.Records).
func (p *Publisher) recorded(k Key) bool {
	return p.opts.Records == nil || p.opts.Records(k.Group, k.Kind)
}

func (p *Publisher) markUnrecorded(subject string, k Key) {
	if p.unrecorded == nil {
		p.unrecorded = make(map[string]Key)
	}
	p.unrecorded[subject] = k
}

// purgeUnrecorded removes from the stream every subject of the cluster
// whose kind is off the allowlist, each with all its records: what an
// older ingest stored there (a Secret's data, say) is not kept for the
// stream's retention, and no delete carrying it is ever written. Each
// purge is logged and counted. Caller holds mu.
func (p *Publisher) purgeUnrecorded(ctx context.Context, s jetstream.Stream) error {
	if len(p.unrecorded) == 0 {
		return nil
	}
	subjects := make([]string, 0, len(p.unrecorded))
	for subj := range p.unrecorded {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	kinds := make(map[string]int)
	for _, subj := range subjects {
		k := p.unrecorded[subj]
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("purge %s (kind %s is not recorded): %w", subj, k.KindLabel(), err)
		}
		p.metrics.purged.WithLabelValues(k.KindLabel()).Inc()
		kinds[k.KindLabel()]++
		delete(p.unrecorded, subj)
	}
	p.log.Warn("purged the records of kinds ingest does not record (an older ingest stored them; they are not kept in the history)",
		"subjects", len(subjects), "kinds", kinds)
	return nil
}
