// Command ingest publishes Kubernetes objects, from a directory of manifests,
// from live clusters, or both, to pilotwire's CHANGES stream. See package
// ingest.
package main

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest"
)

func main() { svc.Main(newCommand()) }

func newCommand() *cobra.Command {
	var cfg ingest.Config
	cmd := &cobra.Command{
		Use:           "ingest",
		Short:         "Publish Kubernetes objects (a manifest directory, live clusters, or both) to the pilotwire change stream",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true, // svc.Main prints the error
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), cfg)
		},
	}
	cfg.AddFlags(cmd.Flags())
	return cmd
}

func run(ctx context.Context, cfg ingest.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := svc.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat, "ingest")
	if err != nil {
		return err
	}
	reg := svc.NewRegistry()
	health := &svc.Health{}
	srv := svc.NewHTTPServer(cfg.HTTPAddr, reg, health, log)
	if err := srv.Listen(); err != nil {
		return err
	}
	log.Info("serving health and metrics", "addr", srv.Addr())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		httpErr error
	)
	wg.Go(func() {
		if err := srv.Serve(ctx); err != nil {
			httpErr = err
			cancel()
		}
	})

	health.SetNotReady("connecting to NATS")
	nc, js, err := svc.Connect(ctx, cfg.NATSURL, "pilotwire-ingest", log)
	if err == nil {
		err = ingest.Run(ctx, cfg, js, log, reg, health, ingest.WithHTTP(srv))
		nc.Close()
	} else if ctx.Err() != nil {
		err = nil // stopped before NATS answered
	}
	cancel()
	wg.Wait()
	return errors.Join(err, httpErr)
}
