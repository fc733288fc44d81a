// Command pusher runs the pilotwire pusher.
package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/pusher"
)

func main() { svc.Main(newCommand()) }

func newCommand() *cobra.Command {
	cfg := pusher.DefaultConfig()
	return svc.Command("pusher", "pilotwire pusher: fans PushRequests out to connections on the ADS frontends", &cfg,
		func(ctx context.Context, d svc.Deps) error { return pusher.Run(ctx, cfg, d) })
}
