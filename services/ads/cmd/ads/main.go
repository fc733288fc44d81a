// Command ads runs one pilotwire ADS frontend.
package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
)

func main() { svc.Main(newCommand()) }

func newCommand() *cobra.Command {
	cfg := ads.DefaultConfig()
	return svc.Command("ads", "pilotwire ADS frontend: serves xDS to Envoys and proxyless gRPC clients", &cfg,
		func(ctx context.Context, d svc.Deps) error { return ads.Run(ctx, cfg, d) })
}
