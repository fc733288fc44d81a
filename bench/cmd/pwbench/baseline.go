package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/bench/internal/baseline"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
)

type baselineConfig struct {
	baseline.Config
	LogLevel   string
	CPUProfile string
}

func newBaselineCmd() *cobra.Command {
	var c baselineConfig
	cmd := &cobra.Command{
		Use:   "baseline",
		Short: "Serve a YAML directory with go-control-plane, the benchmark's baseline",
		Long: `baseline serves the Kubernetes manifests in --config-dir with
go-control-plane v0.14.0's snapshot cache (--eds-cache linear puts load
assignments in its linear cache instead), building the resources with
pilotwire's own model and generators, so that both control planes serve
identical bytes. It watches the directory and, after --file-debounce of
quiet, sets a new snapshot for every node it has seen.

With --bare it serves an ADS that only answers each new subscription with
an empty response: the memory a stream costs in grpc-go itself.

It serves /healthz, /readyz and /metrics on --http-addr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBaseline(cmd.Context(), c) },
	}
	fs := cmd.Flags()
	fs.StringVar(&c.Dir, "config-dir", "deploy/examples", "directory of Kubernetes YAML manifests to serve")
	fs.StringVar(&c.ADSAddr, "ads-addr", "127.0.0.1:18000", "gRPC ADS listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:18001", "address of /healthz, /readyz and /metrics")
	fs.StringVar(&c.EDS, "eds-cache", baseline.EDSSnapshot, "where load assignments live: snapshot (each node's snapshot) or linear (one shared linear cache)")
	fs.DurationVar(&c.Debounce, "file-debounce", filesource.DefaultQuiet, "quiet time after a file event before the directory is read (ingest's --file-debounce, the same default)")
	fs.BoolVar(&c.Bare, "bare", false, "serve empty responses only, to measure grpc-go's own cost per stream")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile to this file")
	return cmd
}

func runBaseline(ctx context.Context, c baselineConfig) error {
	log, err := svc.NewLogger(os.Stderr, c.LogLevel, "text", "baseline")
	if err != nil {
		return err
	}
	stop, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	c.Log = log
	c.Registry = svc.NewRegistry()
	return baseline.Run(ctx, c.Config)
}
