package publish

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/services/ingest/internal/promreg"
)

// LeaseKey is the key, in the lease bucket, of the lease whose holder is
// the one active writer of a cluster id's subjects.
func LeaseKey(cluster string) string { return "ingest-" + bus.EscapeToken(cluster) }

// LeaseOptions configure the writer leases of one ingest instance.
type LeaseOptions struct {
	// KV is the lease bucket (bus.Names.LeaseConfig); nil means no lease:
	// every instance writes (a single instance, tests).
	KV jetstream.KeyValue
	// Holder names this instance in the leases; unique per process.
	Holder string
	// TTL of the leases (default lease.DefaultTTL).
	TTL time.Duration
}

// Elector returns the elector of cluster's writer lease, or nil without a
// bucket. reg (labelled with the cluster, like the publisher's) receives
// pilotwire_ingest_writer_active; waiting hears of rounds in which another
// instance holds the lease.
func (o LeaseOptions) Elector(cluster string, log *slog.Logger, reg prometheus.Registerer, waiting func(holder string)) *lease.Elector {
	if o.KV == nil {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &lease.Elector{
		KV: o.KV, Key: LeaseKey(cluster), Holder: o.Holder, TTL: o.TTL,
		Log: log.With("cluster", cluster),
		Leader: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pilotwire_ingest_writer_active",
			Help: "1 while this instance holds the cluster's writer lease (is the cluster's one active writer), else 0.",
		})),
		Waiting: waiting,
	}
}
