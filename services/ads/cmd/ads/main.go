// Command ads runs one pilotwire ADS frontend.
package main

import (
	"context"
	"time"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
)

func main() {
	var cfg ads.Config
	cmd := svc.Command("ads", "pilotwire ADS frontend: serves xDS to Envoys and proxyless gRPC clients", "127.0.0.1:9094",
		&cfg.Common, nil, func(ctx context.Context, d svc.Deps) error { return ads.Run(ctx, cfg, d) })
	fs := cmd.Flags()
	fs.StringVar(&cfg.ADSAddr, "ads-addr", svc.EnvString("PILOTWIRE_ADS_ADDR", "127.0.0.1:15010"), "gRPC ADS listen address (env PILOTWIRE_ADS_ADDR)")
	fs.StringVar(&cfg.FrontendID, "frontend-id", svc.EnvString("PILOTWIRE_FRONTEND_ID", ""), "unique id of this frontend in the registry (env PILOTWIRE_FRONTEND_ID; default <hostname>-<random>)")
	fs.DurationVar(&cfg.MaxConnectionAge, "max-connection-age", svc.EnvDuration("PILOTWIRE_MAX_CONNECTION_AGE", 30*time.Minute), "clients reconnect after this long, with jitter, to rebalance across frontends (env PILOTWIRE_MAX_CONNECTION_AGE)")
	fs.DurationVar(&cfg.DrainDuration, "drain-duration", svc.EnvDuration("PILOTWIRE_DRAIN_DURATION", 5*time.Second), "on SIGTERM, keep serving existing streams this long before closing them (env PILOTWIRE_DRAIN_DURATION)")
	fs.BoolVar(&cfg.RecordDeliveries, "record-deliveries", svc.EnvBool("PILOTWIRE_RECORD_DELIVERIES", true), "record every response, ACK and NACK in the DELIVERIES stream (env PILOTWIRE_RECORD_DELIVERIES)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", svc.EnvString("PILOTWIRE_TLS_CERT", ""), "serve xDS over TLS with this certificate (PEM; env PILOTWIRE_TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", svc.EnvString("PILOTWIRE_TLS_KEY", ""), "private key of --tls-cert (PEM; env PILOTWIRE_TLS_KEY)")
	fs.StringVar(&cfg.ClientCA, "client-ca", svc.EnvString("PILOTWIRE_CLIENT_CA", ""), "require client certificates signed by this CA and check their SPIFFE identity against the node's namespace (env PILOTWIRE_CLIENT_CA)")
	fs.StringVar(&cfg.TrustDomain, "trust-domain", svc.EnvString("PILOTWIRE_TRUST_DOMAIN", ""), "with --client-ca, the SPIFFE trust domain clients must have; empty accepts any (env PILOTWIRE_TRUST_DOMAIN)")
	fs.Float64Var(&cfg.NewStreamRate, "new-stream-rate", float64(svc.EnvInt("PILOTWIRE_NEW_STREAM_RATE", 1000)), "new xDS streams admitted per second; the rest get ResourceExhausted; 0 disables (env PILOTWIRE_NEW_STREAM_RATE)")
	fs.IntVar(&cfg.NewStreamBurst, "new-stream-burst", svc.EnvInt("PILOTWIRE_NEW_STREAM_BURST", 1000), "burst of new streams admitted at once (env PILOTWIRE_NEW_STREAM_BURST)")
	fs.StringVar(&cfg.MeshConfigPath, "mesh-config", svc.EnvString("PILOTWIRE_MESH_CONFIG", ""), "mesh config file in Istio's MeshConfig YAML shape, e.g. outboundTrafficPolicy: {mode: REGISTRY_ONLY}; empty uses Istio's defaults (ALLOW_ANY) (env PILOTWIRE_MESH_CONFIG)")
	svc.Main(cmd)
}
