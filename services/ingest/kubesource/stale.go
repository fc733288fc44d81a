package kubesource

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// secretSourcePrefix starts the source of every record of a cluster that
// came from a multicluster Secret.
const secretSourcePrefix = "kube:" + originSecret + " "

// reconcileStale deletes the objects of clusters that came from a
// multicluster Secret and that no Secret names any more: their Secret was
// removed while ingest was down, and no owner is left to delete them. It
// runs once the Secrets are listed and applied. Clusters whose records came
// from anywhere else (another ingest's flags, a file source) are not this
// instance's to judge and are left alone. The deletes go through the
// cluster's writer lease and the mass-delete guard.
func (s *Source) reconcileStale(ctx context.Context) {
	names := s.opts.Publish.Names
	if names.Prefix == "" {
		names.Prefix = bus.DefaultPrefix
	}
	stream, err := s.js.Stream(ctx, names.ChangesStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err != nil {
		s.log.Warn("cannot look for clusters removed while ingest was down", "err", err)
		return
	}
	// One subject per object: this lists them all, once at start.
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(names.ChangesAll()))
	if err != nil {
		s.log.Warn("cannot look for clusters removed while ingest was down", "err", err)
		return
	}
	prefix := strings.TrimSuffix(names.ChangesAll(), ">")
	sample := make(map[string]string) // cluster id → one of its subjects
	for subj := range info.State.Subjects {
		tok, _, ok := strings.Cut(strings.TrimPrefix(subj, prefix), ".")
		if !ok {
			continue
		}
		id, err := bus.UnescapeToken(tok)
		if err != nil {
			continue
		}
		if _, seen := sample[id]; !seen {
			sample[id] = subj
		}
	}
	ids := make([]string, 0, len(sample))
	for id := range sample {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.mu.Lock()
		_, running := s.clusters[id]
		s.mu.Unlock()
		if running || slices.Contains(s.opts.ReservedIDs, id) {
			continue
		}
		raw, err := bus.LastMsg(ctx, stream, sample[id])
		if err != nil || raw == nil {
			continue
		}
		var rec pb.ChangeRecord
		if proto.Unmarshal(raw.Data, &rec) != nil || !strings.HasPrefix(rec.GetSource(), secretSourcePrefix) {
			continue
		}
		s.log.Info("cluster from a multicluster Secret that no Secret names any more; deleting its objects",
			"cluster", id, "source", rec.GetSource())
		s.metrics.stale.Inc()
		s.purge(ctx, id, "cluster no longer named by any multicluster Secret")
	}
}
