package ads

import (
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/model"
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
	// BootstrapGOGC is the garbage collector's target (GOGC) while the
	// model is built from the history at start-up, restored once it is:
	// replay allocates much short-lived garbage and the collector would
	// otherwise take about a quarter of its CPU. It never lowers the
	// process's own target; a memory limit (GOMEMLIMIT) still bounds the
	// heap. 0 leaves the collector alone (--bootstrap-gogc, env
	// PILOTWIRE_BOOTSTRAP_GOGC; default 400).
	BootstrapGOGC int
	// BootstrapHeap readies the heap for the model's first build: the
	// collector waits until the frontend is ready, bounded by a memory
	// limit of twice the heap estimated from what is replayed (snapshot
	// or change records), and where the kernel gives transparent huge
	// pages on request (THP madvise) that heap is mapped in huge pages up
	// front (--bootstrap-heap, env PILOTWIRE_BOOTSTRAP_HEAP; default
	// true). See bootHeap.
	BootstrapHeap bool
	// RecordDeliveries writes every response, ACK and NACK to the
	// DELIVERIES stream.
	RecordDeliveries bool
	// TLSCert and TLSKey enable TLS on the listener; ClientCA adds mutual
	// TLS with a SPIFFE identity check (TrustDomain, if set, must match).
	TLSCert, TLSKey, ClientCA, TrustDomain string
	// SyncingStreams bounds the new streams being admitted at once: a
	// stream holds a slot from admission until the client's first ACK (at
	// most AdmissionHold), and new streams beyond it wait for a slot, up to
	// AdmissionWait, instead of being refused; so the frontend admits
	// streams as fast as it serves them (--syncing-streams, env
	// PILOTWIRE_SYNCING_STREAMS; default 0: 1024 per core; negative: no
	// bound).
	SyncingStreams int
	// AdmissionWait is the longest a new stream waits for a slot before it
	// is refused with ResourceExhausted (--admission-wait, env
	// PILOTWIRE_ADMISSION_WAIT, default 30s, Envoy's longest backoff).
	AdmissionWait time.Duration
	// AdmissionHold is the longest a stream holds its slot without ACKing
	// (no flag; default 5s).
	AdmissionHold time.Duration
	// MaxWaitingStreams: beyond this many streams waiting for a slot, new
	// ones are refused at once (--max-waiting-streams, env
	// PILOTWIRE_MAX_WAITING_STREAMS, default 20000).
	MaxWaitingStreams int
	// NewStreamRate and NewStreamBurst, if set, also refuse new streams
	// beyond a fixed rate with ResourceExhausted (default 0: no fixed
	// rate; the slots above adapt instead).
	NewStreamRate  float64
	NewStreamBurst int
	// Limits on one stream's behaviour (0 disables each). A stream over a
	// limit is shed: closed with a gRPC status, a log line and a count in
	// pilotwire_ads_streams_shed_total{reason}.
	//
	// MaxResourceNames bounds the names one stream may watch per type, in a
	// request or a delta subscription (ResourceExhausted past it). Envoy and
	// Istio have no such limit; the default, 50,000, is above the clusters
	// one proxy of a very large mesh watches.
	MaxResourceNames int
	// RequestRate and RequestBurst bound the requests per second one stream
	// may send (ResourceExhausted past them). A well-behaved proxy sends one
	// request per response it gets; the defaults, 100/s with a burst of
	// 1,000, only stop a client that sends in a loop (a NACK storm).
	RequestRate  float64
	RequestBurst int
	// SendTimeout is how long a response may wait to be taken by the
	// client's transport; a client that stops reading is shed after it
	// (DeadlineExceeded). Istio's PILOT_XDS_SEND_TIMEOUT; Istio leaves it
	// off (0), pilotwire defaults to 30s so a non-reading proxy cannot hold
	// a connection loop and its push orders forever.
	SendTimeout time.Duration
	// DisableDebugEndpointAuth answers debug requests over xDS
	// (istio.io/debug/...) on streams without a verified identity, i.e.
	// without mutual TLS (--debug-endpoint-auth=false, env
	// ENABLE_DEBUG_ENDPOINT_AUTH=false; Istio's variable). The zero value
	// is Istio's default: such requests end the stream with
	// Unauthenticated. See debugads.go.
	DisableDebugEndpointAuth bool
	// MeshConfigPath is a mesh config file in Istio's MeshConfig YAML shape
	// (outboundTrafficPolicy); "" uses Istio's defaults. Read once, at start.
	MeshConfigPath string
	// Kubeconfig and InCluster name the Kubernetes cluster whose Secrets
	// the frontend serves to gateways over SDS (credentialName,
	// certificateRefs), read with its own client and kept in memory only
	// (--kubeconfig, env PILOTWIRE_KUBECONFIG; --in-cluster, env
	// PILOTWIRE_IN_CLUSTER). Neither: secrets are not served. See sds.go.
	Kubeconfig string
	InCluster  bool
	// OnListen, if set, is called with the bound ADS address (tests).
	OnListen func(addr string)

	// fullReplay builds the model from every record of the stream instead
	// of the newest snapshot (tests compare the two); ignoreSnapshots from
	// the last record of every subject (the start-up benchmark).
	fullReplay, ignoreSnapshots bool
	// bootHeapOptions, when set, adjusts the bootstrap heap before the
	// model is built (tests).
	bootHeapOptions func(*bootHeap)
	// onStore, when set, is handed the model's store as Run makes it
	// (tests).
	onStore func(*model.Store)
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
		BootstrapGOGC:     400,
		BootstrapHeap:     true,
		RecordDeliveries:  true,
		AdmissionWait:     30 * time.Second,
		AdmissionHold:     5 * time.Second,
		MaxWaitingStreams: 20000,
		NewStreamBurst:    1000,
		MaxResourceNames:  50000,
		RequestRate:       100,
		RequestBurst:      1000,
		SendTimeout:       30 * time.Second,
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
	fs.IntVar(&c.BootstrapGOGC, "bootstrap-gogc", svc.EnvInt("PILOTWIRE_BOOTSTRAP_GOGC", d.BootstrapGOGC), "garbage collector target (GOGC) while the model is replayed at start-up, restored after; never lowers the process's own; 0 leaves it alone (env PILOTWIRE_BOOTSTRAP_GOGC)")
	fs.BoolVar(&c.BootstrapHeap, "bootstrap-heap", svc.EnvBool("PILOTWIRE_BOOTSTRAP_HEAP", d.BootstrapHeap), "until ready, hold the garbage collector (bounded by a memory limit sized from the snapshot or change records replayed) and, with transparent huge pages in madvise mode, map the heap the replay fills in huge pages (env PILOTWIRE_BOOTSTRAP_HEAP)")
	fs.BoolVar(&c.RecordDeliveries, "record-deliveries", svc.EnvBool("PILOTWIRE_RECORD_DELIVERIES", d.RecordDeliveries), "record every response, ACK and NACK in the DELIVERIES stream (env PILOTWIRE_RECORD_DELIVERIES)")
	fs.StringVar(&c.TLSCert, "tls-cert", svc.EnvString("PILOTWIRE_TLS_CERT", d.TLSCert), "serve xDS over TLS with this certificate (PEM; env PILOTWIRE_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", svc.EnvString("PILOTWIRE_TLS_KEY", d.TLSKey), "private key of --tls-cert (PEM; env PILOTWIRE_TLS_KEY)")
	fs.StringVar(&c.ClientCA, "client-ca", svc.EnvString("PILOTWIRE_CLIENT_CA", d.ClientCA), "require client certificates signed by this CA and check their SPIFFE identity against the node's namespace (env PILOTWIRE_CLIENT_CA)")
	fs.StringVar(&c.TrustDomain, "trust-domain", svc.EnvString("PILOTWIRE_TRUST_DOMAIN", d.TrustDomain), "with --client-ca, the SPIFFE trust domain clients must have; empty accepts any (env PILOTWIRE_TRUST_DOMAIN)")
	fs.IntVar(&c.SyncingStreams, "syncing-streams", svc.EnvInt("PILOTWIRE_SYNCING_STREAMS", d.SyncingStreams), "new streams admitted at once, each until its client's first ACK; more wait for a slot; 0: 1024 per core; negative: no bound (env PILOTWIRE_SYNCING_STREAMS)")
	fs.DurationVar(&c.AdmissionWait, "admission-wait", svc.EnvDuration("PILOTWIRE_ADMISSION_WAIT", d.AdmissionWait), "a new stream waiting longer than this for an admission slot gets ResourceExhausted (env PILOTWIRE_ADMISSION_WAIT)")
	fs.IntVar(&c.MaxWaitingStreams, "max-waiting-streams", svc.EnvInt("PILOTWIRE_MAX_WAITING_STREAMS", d.MaxWaitingStreams), "new streams beyond this many waiting for a slot get ResourceExhausted at once (env PILOTWIRE_MAX_WAITING_STREAMS)")
	fs.Float64Var(&c.NewStreamRate, "new-stream-rate", float64(svc.EnvInt("PILOTWIRE_NEW_STREAM_RATE", int(d.NewStreamRate))), "also refuse new xDS streams beyond this many per second with ResourceExhausted; 0: no fixed rate (env PILOTWIRE_NEW_STREAM_RATE)")
	fs.IntVar(&c.NewStreamBurst, "new-stream-burst", svc.EnvInt("PILOTWIRE_NEW_STREAM_BURST", d.NewStreamBurst), "burst of new streams admitted at once (env PILOTWIRE_NEW_STREAM_BURST)")
	fs.IntVar(&c.MaxResourceNames, "max-resource-names", svc.EnvInt("PILOTWIRE_MAX_RESOURCE_NAMES", d.MaxResourceNames), "resource names one stream may watch per type; a stream asking for more is closed with ResourceExhausted; 0 disables (env PILOTWIRE_MAX_RESOURCE_NAMES)")
	fs.Float64Var(&c.RequestRate, "stream-request-rate", float64(svc.EnvInt("PILOTWIRE_STREAM_REQUEST_RATE", int(d.RequestRate))), "xDS requests per second one stream may send; a stream over it is closed with ResourceExhausted; 0 disables (env PILOTWIRE_STREAM_REQUEST_RATE)")
	fs.IntVar(&c.RequestBurst, "stream-request-burst", svc.EnvInt("PILOTWIRE_STREAM_REQUEST_BURST", d.RequestBurst), "burst of requests one stream may send at once (env PILOTWIRE_STREAM_REQUEST_BURST)")
	fs.DurationVar(&c.SendTimeout, "xds-send-timeout", svc.EnvDuration("PILOT_XDS_SEND_TIMEOUT", d.SendTimeout), "a response not taken by the client's transport within this is abandoned and the stream closed with DeadlineExceeded (a client that stops reading); 0 disables, as Istio's default (env PILOT_XDS_SEND_TIMEOUT)")
	c.DisableDebugEndpointAuth = !svc.EnvBool("ENABLE_DEBUG_ENDPOINT_AUTH", !d.DisableDebugEndpointAuth)
	fs.Var(negatedBool{&c.DisableDebugEndpointAuth}, "debug-endpoint-auth", "answer debug requests over xDS (istio.io/debug/syncz, config_dump; istioctl proxy-status) only on streams with a verified identity (mutual TLS with --client-ca): the root namespace sees every proxy, another namespace its own; false answers anyone (env ENABLE_DEBUG_ENDPOINT_AUTH)")
	fs.Lookup("debug-endpoint-auth").NoOptDefVal = "true"
	fs.StringVar(&c.Kubeconfig, "kubeconfig", svc.EnvString("PILOTWIRE_KUBECONFIG", d.Kubeconfig), "kubeconfig of the cluster whose Secrets are served to gateways over SDS (credentialName, certificateRefs); read by this frontend only, never recorded (env PILOTWIRE_KUBECONFIG)")
	fs.BoolVar(&c.InCluster, "in-cluster", svc.EnvBool("PILOTWIRE_IN_CLUSTER", d.InCluster), "read the Secrets served over SDS from the cluster the frontend runs in, through its pod's service account (env PILOTWIRE_IN_CLUSTER)")
	fs.StringVar(&c.MeshConfigPath, "mesh-config", svc.EnvString("PILOTWIRE_MESH_CONFIG", d.MeshConfigPath), "mesh config file in Istio's MeshConfig YAML shape, e.g. outboundTrafficPolicy: {mode: REGISTRY_ONLY}; empty uses Istio's defaults (ALLOW_ANY) (env PILOTWIRE_MESH_CONFIG)")
}

// negatedBool is a boolean flag that sets the negation of its field, so
// the field's zero value is the flag's default of true.
type negatedBool struct{ p *bool }

func (b negatedBool) String() string {
	if b.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*b.p)
}

func (b negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("parse %q: %w", s, err)
	}
	*b.p = !v
	return nil
}

func (negatedBool) Type() string { return "bool" }

// withDefaults fills the fields whose zero value means the default: the
// heartbeat interval and the admission's waits and bound (the frontend id,
// unique per process, is Run's to make). The others keep their zero
// meaning (0 disables a limit; SyncingStreams 0 is sized from the cores).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.AdmissionWait <= 0 {
		c.AdmissionWait = d.AdmissionWait
	}
	if c.AdmissionHold <= 0 {
		c.AdmissionHold = d.AdmissionHold
	}
	if c.MaxWaitingStreams <= 0 {
		c.MaxWaitingStreams = d.MaxWaitingStreams
	}
	return c
}

// syncingStreams is the admission's slot count: SyncingStreams, 1024 per
// core when 0, no bound (0) when negative.
func (c Config) syncingStreams() int {
	switch {
	case c.SyncingStreams < 0:
		return 0
	case c.SyncingStreams == 0:
		return 1024 * runtime.GOMAXPROCS(0)
	}
	return c.SyncingStreams
}
