package ads

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

// Config of one ADS frontend. Each field with a flag names it in AddFlags;
// the defaults are DefaultConfig's.
type Config struct {
	svc.Common
	// ADSAddr is the gRPC listen address (default 127.0.0.1:15010).
	ADSAddr string
	// FrontendID names this frontend in the registry; unique per process
	// (default <hostname>-<random>).
	FrontendID string
	// MaxConnectionAge makes clients reconnect (and so rebalance across
	// frontends) after this long; grpc-go adds jitter. Default 30m, as Istio.
	MaxConnectionAge time.Duration
	// DrainDuration is how long a stopping frontend keeps serving existing
	// streams after it stopped accepting new ones.
	DrainDuration time.Duration
	// HeartbeatInterval of the registry entry.
	HeartbeatInterval time.Duration
	// RecordDeliveries writes every response, ACK and NACK to the
	// DELIVERIES stream.
	RecordDeliveries bool
	// TLSCert and TLSKey enable TLS on the listener; ClientCA adds mutual
	// TLS with a SPIFFE identity check (TrustDomain, if set, must match).
	TLSCert, TLSKey, ClientCA, TrustDomain string
	// NewStreamRate and NewStreamBurst bound how fast new streams are
	// admitted (0: no limit); the rest get ResourceExhausted.
	NewStreamRate  float64
	NewStreamBurst int
	// MeshConfigPath is a mesh config file in Istio's MeshConfig YAML shape
	// (outboundTrafficPolicy); "" uses Istio's defaults. Read once, at start.
	MeshConfigPath string
	// OnListen, if set, is called with the bound ADS address (tests).
	OnListen func(addr string)

	// fullReplay builds the model from every record of the stream instead
	// of the newest snapshot (tests compare the two); ignoreSnapshots from
	// the last record of every subject (the start-up benchmark).
	fullReplay, ignoreSnapshots bool
}

// DefaultConfig is the configuration every flag defaults to; Run also takes
// from it HeartbeatInterval when left zero.
func DefaultConfig() Config {
	return Config{
		Common:            svc.DefaultCommon("127.0.0.1:9094"),
		ADSAddr:           "127.0.0.1:15010",
		MaxConnectionAge:  30 * time.Minute,
		DrainDuration:     5 * time.Second,
		HeartbeatInterval: 2 * time.Second,
		RecordDeliveries:  true,
		NewStreamRate:     1000,
		NewStreamBurst:    1000,
	}
}

// AddFlags registers the frontend's flags on fs, each defaulting to
// DefaultConfig's value unless its environment variable is set.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	d := DefaultConfig()
	c.Common.AddFlags(fs, d.Common)
	fs.StringVar(&c.ADSAddr, "ads-addr", svc.EnvString("PILOTWIRE_ADS_ADDR", d.ADSAddr), "gRPC ADS listen address (env PILOTWIRE_ADS_ADDR)")
	fs.StringVar(&c.FrontendID, "frontend-id", svc.EnvString("PILOTWIRE_FRONTEND_ID", d.FrontendID), "unique id of this frontend in the registry (env PILOTWIRE_FRONTEND_ID; default <hostname>-<random>)")
	fs.DurationVar(&c.MaxConnectionAge, "max-connection-age", svc.EnvDuration("PILOTWIRE_MAX_CONNECTION_AGE", d.MaxConnectionAge), "clients reconnect after this long, with jitter, to rebalance across frontends (env PILOTWIRE_MAX_CONNECTION_AGE)")
	fs.DurationVar(&c.DrainDuration, "drain-duration", svc.EnvDuration("PILOTWIRE_DRAIN_DURATION", d.DrainDuration), "on SIGTERM, keep serving existing streams this long before closing them (env PILOTWIRE_DRAIN_DURATION)")
	fs.BoolVar(&c.RecordDeliveries, "record-deliveries", svc.EnvBool("PILOTWIRE_RECORD_DELIVERIES", d.RecordDeliveries), "record every response, ACK and NACK in the DELIVERIES stream (env PILOTWIRE_RECORD_DELIVERIES)")
	fs.StringVar(&c.TLSCert, "tls-cert", svc.EnvString("PILOTWIRE_TLS_CERT", d.TLSCert), "serve xDS over TLS with this certificate (PEM; env PILOTWIRE_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", svc.EnvString("PILOTWIRE_TLS_KEY", d.TLSKey), "private key of --tls-cert (PEM; env PILOTWIRE_TLS_KEY)")
	fs.StringVar(&c.ClientCA, "client-ca", svc.EnvString("PILOTWIRE_CLIENT_CA", d.ClientCA), "require client certificates signed by this CA and check their SPIFFE identity against the node's namespace (env PILOTWIRE_CLIENT_CA)")
	fs.StringVar(&c.TrustDomain, "trust-domain", svc.EnvString("PILOTWIRE_TRUST_DOMAIN", d.TrustDomain), "with --client-ca, the SPIFFE trust domain clients must have; empty accepts any (env PILOTWIRE_TRUST_DOMAIN)")
	fs.Float64Var(&c.NewStreamRate, "new-stream-rate", float64(svc.EnvInt("PILOTWIRE_NEW_STREAM_RATE", int(d.NewStreamRate))), "new xDS streams admitted per second; the rest get ResourceExhausted; 0 disables (env PILOTWIRE_NEW_STREAM_RATE)")
	fs.IntVar(&c.NewStreamBurst, "new-stream-burst", svc.EnvInt("PILOTWIRE_NEW_STREAM_BURST", d.NewStreamBurst), "burst of new streams admitted at once (env PILOTWIRE_NEW_STREAM_BURST)")
	fs.StringVar(&c.MeshConfigPath, "mesh-config", svc.EnvString("PILOTWIRE_MESH_CONFIG", d.MeshConfigPath), "mesh config file in Istio's MeshConfig YAML shape, e.g. outboundTrafficPolicy: {mode: REGISTRY_ONLY}; empty uses Istio's defaults (ALLOW_ANY) (env PILOTWIRE_MESH_CONFIG)")
}

// withDefaults fills the fields whose zero value means the default: the
// heartbeat interval (the frontend id, unique per process, is Run's to
// make). The others keep their zero meaning (0 disables a limit).
func (c Config) withDefaults() Config {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultConfig().HeartbeatInterval
	}
	return c
}
