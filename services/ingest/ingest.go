package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// Run runs the ingest service until ctx ends: it reads what the CHANGES
// stream holds for the cluster (retrying until NATS answers), publishes the
// difference with the config dir, marks health ready and logs "ingest
// ready", then publishes every change of the directory. It returns nil when
// ctx ends. health may be nil.
func Run(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger, reg prometheus.Registerer, health *svc.Health) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	if health == nil {
		health = &svc.Health{}
	}
	health.SetNotReady("reading the change stream")
	pub, err := publish.New(js, publish.Options{
		Cluster:    cfg.ClusterID,
		Names:      names,
		Stream:     cfg.StreamOptions(),
		Log:        log,
		Registerer: reg,
	})
	if err != nil {
		return err
	}
	src, err := filesource.New(pub, filesource.Options{
		Dir:        cfg.ConfigDir,
		Debounce:   cfg.FileDebounce,
		Log:        log,
		Registerer: reg,
	})
	if err != nil {
		return err
	}
	if err := startPublisher(ctx, pub, log, health); err != nil {
		return nil // ctx ended
	}
	health.SetNotReady("publishing the initial scan")
	err = src.Run(ctx, func(res publish.Result) {
		health.SetReady()
		log.Info("ingest ready", "cluster", cfg.ClusterID, "config_dir", cfg.ConfigDir,
			"published", res.Published, "unchanged", res.Unchanged, "rejected", res.Rejected)
	})
	if err != nil {
		health.SetNotReady(err.Error())
		return fmt.Errorf("file source: %w", err)
	}
	return nil
}

// startPublisher retries Start with backoff: NATS or the stream may not be
// there yet. It returns an error only when ctx ends.
func startPublisher(ctx context.Context, pub *publish.Publisher, log *slog.Logger, health *svc.Health) error {
	wait := 500 * time.Millisecond
	for {
		err := pub.Start(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		health.SetNotReady("reading the change stream: " + err.Error())
		log.Warn("cannot read the change stream, retrying", "err", err, "backoff", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 30*time.Second)
	}
}
