package debouncer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// DefaultIndexRebuildMax bounds the records a new term reads to rebuild
// its endpoint index.
const DefaultIndexRebuildMax = 500_000

// rebuildIndex fills a new term's endpoint index with the state of every
// EndpointSlice, Pod and Node at the floor the term resumes from: the last
// record of each such subject (an ordered consumer, deliver last per
// subject, that lives for this read only). Without it, the index is empty
// after a restart or take-over, and the first label change of a pod whose
// slices did not change since reaches no proxy.
//
// A subject whose last record lies above the floor is left out: the
// durable consumer delivers that record (and those before it, down to the
// floor) again, and they update the index in order. Compaction keeps every
// live object's last record, so nothing below the floor is missed. The
// read stops after max records (or at ctx's end): the index then misses
// some pods and slices, which makes their first change after the restart
// conservative for slices (a full push) and silent for pod labels, as
// before the index was rebuilt; this is logged and counted.
func (a *active) rebuildIndex(ctx context.Context, floor uint64, maxRecords int) (*endpointIndex, error) {
	idx := newEndpointIndex()
	if floor == 0 {
		return idx, nil // the consumer delivers everything
	}
	start := time.Now()
	cons, err := a.changes.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{
			a.names.ChangesKind(&pb.ObjectRef{Group: "discovery.k8s.io", Kind: "EndpointSlice"}),
			a.names.ChangesKind(&pb.ObjectRef{Kind: "Pod"}),
			a.names.ChangesKind(&pb.ObjectRef{Kind: "Node"}),
		},
		DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("rebuild endpoint index: create consumer: %w", err)
	}
	defer func() {
		// Best effort: the server drops an idle ordered consumer anyway.
		if ci := cons.CachedInfo(); ci != nil {
			_ = a.changes.DeleteConsumer(context.WithoutCancel(ctx), ci.Name)
		}
	}()
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("rebuild endpoint index: consumer info: %w", err)
	}
	var read, slices, pods, later int
	truncated := false
	if info.NumPending > 0 {
		pull := 1024
		if si := a.changes.CachedInfo(); si != nil {
			pull = bus.ReplayPullSize(si.State)
		}
		it, err := cons.Messages(bus.PullMessages(pull)...)
		if err != nil {
			return nil, fmt.Errorf("rebuild endpoint index: %w", err)
		}
		defer it.Stop()
		for {
			if read >= maxRecords {
				truncated = true
				break
			}
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return nil, fmt.Errorf("rebuild endpoint index: next record: %w", err)
			}
			md, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("rebuild endpoint index: metadata: %w", err)
			}
			read++
			switch seq := md.Sequence.Stream; {
			case seq > floor:
				later++ // delivered again by the durable consumer
			default:
				switch idx.observe(msg.Data()) {
				case observedSlice:
					slices++
				case observedPod, observedNode:
					pods++
				}
			}
			if md.NumPending == 0 {
				break
			}
		}
	}
	took := time.Since(start)
	a.m.indexSlices.Set(float64(slices))
	a.m.indexPods.Set(float64(pods))
	a.m.indexSeconds.Set(took.Seconds())
	if truncated {
		a.m.indexTruncated.Inc()
		a.log.Error("endpoint index rebuild stopped at its bound: pods and slices not read reach no proxy on their first label change",
			"floor", floor, "records", read, "max_records", maxRecords, "slices", slices, "pods", pods, "took", took)
	} else {
		a.log.Info("endpoint index rebuilt", "floor", floor, "records", read, "slices", slices, "pods", pods, "above_floor", later, "took", took)
	}
	return idx, nil
}

type observed uint8

const (
	observedNothing observed = iota
	observedSlice
	observedPod
	observedNode
)

// observe applies a stored record of the state at the floor to the index:
// a live slice's pods and ports, a live pod's labels. Deletes and records
// that cannot be read leave it as it is.
func (x *endpointIndex) observe(data []byte) observed {
	rec := &pb.ChangeRecord{}
	if proto.Unmarshal(data, rec) != nil || rec.GetOp() == pb.Op_OP_DELETE {
		return observedNothing
	}
	ref := rec.GetRef()
	switch {
	case ref.GetGroup() == "discovery.k8s.io" && ref.GetKind() == "EndpointSlice":
		x.apply(rec.GetCluster(), ref.GetNamespace(), ref.GetName(), parseSlice(rec.GetObject()), false)
		return observedSlice
	case ref.GetGroup() == "" && ref.GetKind() == "Pod":
		x.podLabels[podID{rec.GetCluster(), ref.GetNamespace(), ref.GetName()}] = podLabels(rec.GetObject())
		return observedPod
	case ref.GetGroup() == "" && ref.GetKind() == "Node":
		x.nodeTopo[podID{rec.GetCluster(), "", ref.GetName()}] = nodeTopology(rec.GetObject())
		return observedNode
	}
	return observedNothing
}
