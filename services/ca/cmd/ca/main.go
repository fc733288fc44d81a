// Command ca is pilotwire's certificate authority for istio-agent and
// proxyless gRPC workloads. See package ca.
package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ca"
)

func main() { svc.Main(newCommand()) }

func newCommand() *cobra.Command {
	cfg := ca.DefaultConfig()
	return svc.LocalCommand("ca", "Issue workload certificates to istio-agent (Istio's CreateCertificate API) and publish the mesh's root certificate", &cfg,
		func(ctx context.Context, d svc.Deps) error { return ca.Run(ctx, cfg, d) })
}
