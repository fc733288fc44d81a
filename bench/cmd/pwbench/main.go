// Command pwbench is pilotwire's benchmark harness, kept apart from the
// product: `pwbench run` benchmarks pilotwire against go-control-plane side
// by side (docs/benchmarks.md), `pwbench loadgen` simulates Envoy sidecars,
// `pwbench baseline` serves a YAML directory with go-control-plane,
// `pwbench mesh` writes the benchmark's mesh as YAML, `pwbench faults`
// runs the fault matrix (docs/reliability.md), and `pwbench replay` times
// fresh frontends of several builds replaying one change stream.
package main

import (
	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

func main() {
	root := &cobra.Command{
		Use:           "pwbench",
		Short:         "pwbench: pilotwire's benchmark harness",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newBenchCmd(), newMeshCmd(), newLoadgenCmd(), newBaselineCmd(), newFaultsCmd(), newReplayCmd())
	svc.Main(root)
}
