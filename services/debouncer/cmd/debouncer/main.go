// Command debouncer runs the pilotwire debouncer.
package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/debouncer"
)

func main() { svc.Main(newCommand()) }

func newCommand() *cobra.Command {
	cfg := debouncer.DefaultConfig()
	return svc.Command("debouncer", "pilotwire debouncer: merges change records into PushRequests", &cfg,
		func(ctx context.Context, d svc.Deps) error { return debouncer.Run(ctx, cfg, d) })
}
