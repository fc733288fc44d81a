package publish

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// load reads the last record of every subject of the cluster with an
// ordered consumer (deliver last per subject) and stops when none is
// pending. An empty stream, or one without this cluster, is fine.
func (p *Publisher) load(ctx context.Context, s jetstream.Stream) error {
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{p.opts.Names.ChangesCluster(p.opts.Cluster)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
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
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
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
		p.absorb(msg.Subject(), msg.Data(), meta.Sequence.Stream)
		if meta.NumPending == 0 {
			return nil
		}
	}
}

// absorb records a subject's last record, read from the stream.
func (p *Publisher) absorb(subject string, data []byte, seq uint64) {
	var rec pb.ChangeRecord
	if err := proto.Unmarshal(data, &rec); err != nil || rec.GetRef() == nil {
		// Not ours to judge: the record stays on the stream, but this
		// publisher cannot track it and will not delete it.
		p.log.Warn("skipping undecodable change record", "subject", subject, "seq", seq, "err", err)
		return
	}
	r := rec.GetRef()
	k := Key{Group: r.GetGroup(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName()}
	if got := p.opts.Names.ChangeSubject(p.opts.Cluster, r); got != subject {
		p.log.Warn("change record does not match its subject; skipping", "subject", subject, "want", got, "seq", seq)
		return
	}
	p.setEntry(k, entry{
		uid: rec.GetUid(), rv: rec.GetResourceVersion(), version: r.GetVersion(), source: rec.GetSource(),
		seq: seq, live: rec.GetOp() != pb.Op_OP_DELETE,
	})
}
