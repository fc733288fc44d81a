// Command pilotwire is the operator CLI: `pilotwire up` runs the whole
// control plane on one machine (embedded NATS plus the four services as
// separate processes); status, history, render, diff, trace and
// proxy-config answer "why did proxy P get this config?" from the change
// and delivery streams and the registry; replay copies the history up to
// a point into another deployment.
package main

import (
	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

func main() {
	root := &cobra.Command{
		Use:           "pilotwire",
		Short:         "pilotwire: an event-sourced xDS control plane over NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newUpCmd(), newHistoryCmd(), newRenderCmd(), newDiffCmd(), newTraceCmd(), newStatusCmd(), newProxyConfigCmd(), newReplayCmd(), newStreamsCmd())
	svc.Main(root)
}
