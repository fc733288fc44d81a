// Command ingest publishes Kubernetes objects, from a directory of manifests,
// from live clusters, or both, to pilotwire's CHANGES stream. See package
// ingest.
package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest"
)

func main() { svc.Main(newCommand()) }

func newCommand() *cobra.Command {
	cfg := ingest.DefaultConfig()
	return svc.Command("ingest", "Publish Kubernetes objects (a manifest directory, live clusters, or both) to the pilotwire change stream", &cfg,
		func(ctx context.Context, d svc.Deps) error { return ingest.Run(ctx, cfg, d) })
}
