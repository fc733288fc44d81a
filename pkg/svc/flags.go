package svc

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// Common is the configuration every service binary shares.
type Common struct {
	// NATSURL is the NATS server to use (--nats-url, env PILOTWIRE_NATS_URL,
	// default nats://127.0.0.1:4222).
	NATSURL string
	// Auth is how to authenticate to NATS and secure the connection
	// (--nats-creds, --nats-nkey, --nats-user, --nats-password-file,
	// --nats-ca, --nats-cert, --nats-key; see NATSAuth).
	Auth NATSAuth
	// Prefix is the subject prefix (--prefix, env PILOTWIRE_PREFIX, default pw).
	Prefix string
	// HTTPAddr serves /healthz, /readyz, /metrics (--http-addr, env
	// PILOTWIRE_HTTP_ADDR; each service has its own default).
	HTTPAddr string
	// DebugAddr serves /debug/* (config dumps, sync state) and pprof, on a
	// listener of their own so that the metrics port can be exposed
	// without them (--debug-addr, env PILOTWIRE_DEBUG_ADDR; default
	// loopback, 127.0.0.1 on the HTTP port + 100, so 127.0.0.1:9192 for
	// the debouncer; "" turns it off). They show the whole mesh config:
	// bind it beyond loopback only behind an authenticating proxy.
	DebugAddr string
	// LogLevel is debug, info, warn or error (--log-level, env
	// PILOTWIRE_LOG_LEVEL, default info).
	LogLevel string
	// LogFormat is text or json (--log-format, env PILOTWIRE_LOG_FORMAT,
	// default text).
	LogFormat string
	// Replicas for streams and buckets this service creates (--replicas, env
	// PILOTWIRE_REPLICAS, default 1; use 3 on a NATS cluster).
	Replicas int
	// Profiling serves pprof on the debug address (--enable-profiling, env
	// ENABLE_PROFILING as Istio, default true).
	Profiling bool

	// Retention of the streams this service creates or updates. Give every
	// service the same values (a stream has one config).
	//
	// ChangesMaxAge and ChangesMaxBytes are hard limits on PW_CHANGES
	// (--changes-max-age, env PILOTWIRE_CHANGES_MAX_AGE; --changes-max-bytes,
	// env PILOTWIRE_CHANGES_MAX_BYTES; default 0: none). They drop the
	// oldest records whatever they are, a live object's only record too, so
	// they are off by default: the history is bounded by the snapshotter's
	// compaction (--snapshot-retention on the debouncer). Set them only as a
	// disk guard, well above what compaction leaves.
	ChangesMaxAge   time.Duration
	ChangesMaxBytes int64
	// DeliveriesMaxAge and DeliveriesMaxBytes bound PW_DELIVERIES
	// (--deliveries-max-age, env PILOTWIRE_DELIVERIES_MAX_AGE, default 24h;
	// --deliveries-max-bytes, env PILOTWIRE_DELIVERIES_MAX_BYTES, default
	// 1 GiB, -1: none). The oldest exchanges go first.
	DeliveriesMaxAge   time.Duration
	DeliveriesMaxBytes int64
}

// DefaultCommon is the common configuration every flag defaults to;
// httpAddr is the service's own --http-addr.
func DefaultCommon(httpAddr string) Common {
	return Common{
		NATSURL:   "nats://127.0.0.1:4222",
		Prefix:    bus.DefaultPrefix,
		HTTPAddr:  httpAddr,
		DebugAddr: DefaultDebugAddr(httpAddr),
		LogLevel:  "info",
		LogFormat: "text",
		Replicas:  1,
		Profiling: true,

		DeliveriesMaxAge:   24 * time.Hour,
		DeliveriesMaxBytes: bus.DefaultDeliveriesMaxBytes,
	}
}

// DefaultDebugAddr is the debug address that goes with an HTTP address:
// always on loopback, on its port + 100 (port 0 stays 0: any free port).
func DefaultDebugAddr(httpAddr string) string {
	_, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return ""
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return ""
	}
	if n != 0 {
		n += 100
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n))
}

// AddFlags registers the common flags on fs, each defaulting to def's value
// unless its environment variable is set.
func (c *Common) AddFlags(fs *pflag.FlagSet, def Common) {
	fs.StringVar(&c.NATSURL, "nats-url", EnvString("PILOTWIRE_NATS_URL", def.NATSURL), "NATS server URL (env PILOTWIRE_NATS_URL)")
	c.Auth.AddFlags(fs)
	fs.StringVar(&c.Prefix, "prefix", EnvString("PILOTWIRE_PREFIX", def.Prefix), "subject prefix shared by every service of one mesh (env PILOTWIRE_PREFIX)")
	c.addHTTPFlags(fs, def)
	fs.IntVar(&c.Replicas, "replicas", EnvInt("PILOTWIRE_REPLICAS", def.Replicas), "replicas of the streams and buckets this service creates (env PILOTWIRE_REPLICAS)")
	fs.DurationVar(&c.ChangesMaxAge, "changes-max-age", EnvDuration("PILOTWIRE_CHANGES_MAX_AGE", def.ChangesMaxAge), "hard age limit of the change stream; 0: none. Drops live objects' only records too: a disk guard, not retention (the snapshotter compacts) (env PILOTWIRE_CHANGES_MAX_AGE)")
	fs.Int64Var(&c.ChangesMaxBytes, "changes-max-bytes", int64(EnvInt("PILOTWIRE_CHANGES_MAX_BYTES", int(def.ChangesMaxBytes))), "hard size limit of the change stream in bytes; 0: none (a disk guard, see --changes-max-age) (env PILOTWIRE_CHANGES_MAX_BYTES)")
	fs.DurationVar(&c.DeliveriesMaxAge, "deliveries-max-age", EnvDuration("PILOTWIRE_DELIVERIES_MAX_AGE", def.DeliveriesMaxAge), "how long the deliveries stream keeps xDS exchanges (env PILOTWIRE_DELIVERIES_MAX_AGE)")
	fs.Int64Var(&c.DeliveriesMaxBytes, "deliveries-max-bytes", int64(EnvInt("PILOTWIRE_DELIVERIES_MAX_BYTES", int(def.DeliveriesMaxBytes))), "size limit of the deliveries stream in bytes, oldest dropped first; -1: none (env PILOTWIRE_DELIVERIES_MAX_BYTES)")
}

// AddLocalFlags registers the common flags of a service that uses no NATS
// (ServeLocal): the HTTP and debug addresses, logging and profiling.
func (c *Common) AddLocalFlags(fs *pflag.FlagSet, def Common) {
	c.addHTTPFlags(fs, def)
}

// addHTTPFlags registers the flags every service has, NATS or not.
func (c *Common) addHTTPFlags(fs *pflag.FlagSet, def Common) {
	fs.StringVar(&c.HTTPAddr, "http-addr", EnvString("PILOTWIRE_HTTP_ADDR", def.HTTPAddr), "address for /healthz, /readyz and /metrics (env PILOTWIRE_HTTP_ADDR)")
	fs.StringVar(&c.DebugAddr, "debug-addr", EnvString("PILOTWIRE_DEBUG_ADDR", def.DebugAddr), `address for /debug/* and pprof, loopback by default; "" turns it off (env PILOTWIRE_DEBUG_ADDR)`)
	fs.StringVar(&c.LogLevel, "log-level", EnvString("PILOTWIRE_LOG_LEVEL", def.LogLevel), "log level: debug, info, warn, error (env PILOTWIRE_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", EnvString("PILOTWIRE_LOG_FORMAT", def.LogFormat), "log format: text or json (env PILOTWIRE_LOG_FORMAT)")
	fs.BoolVar(&c.Profiling, "enable-profiling", EnvBool("ENABLE_PROFILING", def.Profiling), "serve Go profiles on /debug/pprof/ of --debug-addr (env ENABLE_PROFILING)")
}

// CommonConfig returns c; a service's Config, which embeds Common, gets it
// too, and so satisfies Config.
func (c *Common) CommonConfig() *Common { return c }

// Names returns the bus names for the configured prefix.
func (c *Common) Names() (bus.Names, error) { return bus.NewNames(c.Prefix) }

// StreamOptions returns the stream options for the configured replicas and
// retention.
func (c *Common) StreamOptions() bus.StreamOptions {
	return bus.StreamOptions{
		Replicas:           c.Replicas,
		ChangesMaxAge:      c.ChangesMaxAge,
		ChangesMaxBytes:    c.ChangesMaxBytes,
		DeliveriesMaxAge:   c.DeliveriesMaxAge,
		DeliveriesMaxBytes: c.DeliveriesMaxBytes,
	}
}

// EnvString returns the environment variable name, or def when unset.
func EnvString(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// EnvInt returns the environment variable name as an int, or def when unset
// or invalid (an invalid value is reported on stderr once at start-up).
func EnvInt(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", name, v, err)
		return def
	}
	return n
}

// EnvBool returns the environment variable name as a bool, or def.
func EnvBool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", name, v, err)
		return def
	}
	return b
}

// EnvDuration returns the environment variable name as a duration, or def.
func EnvDuration(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", name, v, err)
		return def
	}
	return d
}

// EnvList returns the environment variable name split at commas, blanks
// trimmed and empty items dropped, or def when it names nothing.
func EnvList(name string, def []string) []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if out == nil {
		return def
	}
	return out
}
