// Command ads runs one pilotwire ADS frontend.
package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
)

func main() {
	var cfg ads.Config
	cmd := &cobra.Command{
		Use:           "ads",
		Short:         "pilotwire ADS frontend: serves xDS to Envoys and proxyless gRPC clients",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return svc.Serve(cmd.Context(), cfg.Common, "ads", func(ctx context.Context, d svc.Deps) error {
				return ads.Run(ctx, cfg, d)
			})
		},
	}
	fs := cmd.Flags()
	cfg.Common.AddFlags(fs, "127.0.0.1:9094")
	fs.StringVar(&cfg.ADSAddr, "ads-addr", svc.EnvString("PILOTWIRE_ADS_ADDR", "127.0.0.1:15010"), "gRPC ADS listen address (env PILOTWIRE_ADS_ADDR)")
	fs.StringVar(&cfg.FrontendID, "frontend-id", svc.EnvString("PILOTWIRE_FRONTEND_ID", ""), "unique id of this frontend in the registry (env PILOTWIRE_FRONTEND_ID; default <hostname>-<random>)")
	fs.DurationVar(&cfg.MaxConnectionAge, "max-connection-age", svc.EnvDuration("PILOTWIRE_MAX_CONNECTION_AGE", 30*time.Minute), "clients reconnect after this long, with jitter, to rebalance across frontends (env PILOTWIRE_MAX_CONNECTION_AGE)")
	fs.DurationVar(&cfg.DrainDuration, "drain-duration", svc.EnvDuration("PILOTWIRE_DRAIN_DURATION", 5*time.Second), "on SIGTERM, keep serving existing streams this long before closing them (env PILOTWIRE_DRAIN_DURATION)")
	fs.BoolVar(&cfg.RecordDeliveries, "record-deliveries", svc.EnvBool("PILOTWIRE_RECORD_DELIVERIES", true), "record every response, ACK and NACK in the DELIVERIES stream (env PILOTWIRE_RECORD_DELIVERIES)")
	svc.Main(cmd)
}
