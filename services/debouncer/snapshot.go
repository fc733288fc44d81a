package debouncer

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// runSnapshotter runs the snapshotter while this instance holds the lease
// "snapshot", until ctx ends. The lease is its own, not the debouncer's:
// the two terms fail and move independently, and a standby debouncer may
// be the one that snapshots. A failed term is logged and counted, and the
// instance campaigns again after TTL/3.
func runSnapshotter(ctx context.Context, cfg Config, names bus.Names, d svc.Deps, leases jetstream.KeyValue) {
	log := d.Log.With("role", "snapshot")
	restarts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pilotwire_snapshot_restarts_total",
		Help: "Snapshotter terms that failed; the lease is given up and the instance campaigns again.",
	})
	leader := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pilotwire_snapshot_leader", Help: "1 while this instance writes snapshots.",
	})
	if d.Reg != nil {
		d.Reg.MustRegister(restarts, leader)
	}
	// The snapshot bucket's writer checks it against its declaration once,
	// as every service does its streams at start (drift is logged and
	// reported, never changed). It waits beside the debouncer's own work.
	streams := svc.NewStreams(svc.Deps{JS: d.JS, Log: log, Reg: d.Reg})
	streams.OnWait = nil // the debouncer's readiness does not wait for snapshots
	if _, err := streams.ObjectStore(ctx, names.SnapshotsConfig(cfg.StreamOptions())); err != nil {
		return // ctx ended
	}
	el := &lease.Elector{KV: leases, Key: "snapshot", Holder: cfg.ID, TTL: cfg.LeaseTTL, Log: log, Leader: leader}
	snap := snapshot.New(snapshot.Options{
		JS: d.JS, Names: names, Stream: cfg.StreamOptions(),
		Interval: cfg.SnapshotInterval, Retention: cfg.SnapshotRetention,
		Log: log, Registerer: d.Reg,
		// Frontends starting from a snapshot decode these instead of JSON.
		Model: model.CompactRecord,
	})
	_ = el.Run(ctx, func(ctx context.Context) error {
		// Each term starts afresh from the newest snapshot.
		if err := snap.Run(ctx); err != nil && ctx.Err() == nil {
			restarts.Inc()
			log.Error("snapshotter failed: giving up the lease and starting again", "err", err)
		}
		return nil
	})
}
