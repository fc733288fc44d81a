package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// connConfig is what every debugging command shares: the NATS connection
// (the same flags and environment variables as the services: --nats-url /
// PILOTWIRE_NATS_URL, --prefix / PILOTWIRE_PREFIX, and svc.NATSAuth's
// credential and TLS flags), how long to wait, and the output format.
type connConfig struct {
	// NATSURL is the NATS server (--nats-url, env PILOTWIRE_NATS_URL,
	// default nats://127.0.0.1:4222).
	NATSURL string
	// Auth is the credentials and TLS (--nats-creds, --nats-nkey,
	// --nats-user, --nats-password-file, --nats-ca, --nats-cert,
	// --nats-key; the services' flags and env vars).
	Auth svc.NATSAuth
	// Prefix is the mesh's subject prefix (--prefix, env PILOTWIRE_PREFIX,
	// default pw).
	Prefix string
	// Timeout bounds the whole command (--timeout, env PILOTWIRE_TIMEOUT,
	// default 30s).
	Timeout time.Duration
	// Output is table, json or yaml (-o/--output, default table).
	Output string
}

func addConnFlags(cmd *cobra.Command, c *connConfig) {
	def := svc.DefaultCommon("")
	fs := cmd.Flags()
	fs.StringVar(&c.NATSURL, "nats-url", svc.EnvString("PILOTWIRE_NATS_URL", def.NATSURL), "NATS server URL (env PILOTWIRE_NATS_URL)")
	c.Auth.AddFlags(fs)
	fs.StringVar(&c.Prefix, "prefix", svc.EnvString("PILOTWIRE_PREFIX", def.Prefix), "subject prefix of the mesh (env PILOTWIRE_PREFIX)")
	fs.DurationVar(&c.Timeout, "timeout", svc.EnvDuration("PILOTWIRE_TIMEOUT", 30*time.Second), "give up after this long (env PILOTWIRE_TIMEOUT)")
	fs.StringVarP(&c.Output, "output", "o", "table", "output format: table, json or yaml")
}

// session is an open connection to the mesh's NATS.
type session struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names bus.Names
}

func (c connConfig) connect() (*session, error) {
	switch c.Output {
	case "", "table", "json", "yaml":
	default:
		return nil, fmt.Errorf("unknown output format %q (want table, json or yaml)", c.Output)
	}
	names, err := bus.NewNames(c.Prefix)
	if err != nil {
		return nil, err
	}
	opts, err := c.Auth.Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.NATSURL, append(opts, nats.Name("pilotwire-cli"))...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", svc.RedactURL(c.NATSURL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", svc.RedactURL(c.NATSURL), err)
	}
	return &session{nc: nc, js: js, names: names}, nil
}

func (s *session) close() { s.nc.Close() }

// open bounds ctx by the configured timeout and connects; done closes
// both. Every command that reads NATS starts with it.
func (c connConfig) open(ctx context.Context) (context.Context, *session, func(), error) {
	ctx, cancel := c.withTimeout(ctx)
	s, err := c.connect()
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, s, func() { s.close(); cancel() }, nil
}

// withTimeout bounds ctx by the configured timeout (none if it is 0).
func (c connConfig) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.Timeout)
}

// emit writes v as JSON or YAML, or calls table with a tab writer.
func emit(w io.Writer, format string, v any, table func(tw *tabwriter.Writer)) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// point is a position in the change stream's history: a sequence, or a
// time (the last record stored at or before it). The zero point is "now".
type point struct {
	Seq  uint64
	Time time.Time
}

func (p point) String() string {
	switch {
	case p.Seq != 0:
		return "seq " + strconv.FormatUint(p.Seq, 10)
	case !p.Time.IsZero():
		return p.Time.Format(time.RFC3339Nano)
	}
	return "now"
}

// parsePoint reads SEQ (a number), TIME (RFC 3339) or AGO (a duration
// before now, "10m"). "" and "now" are now.
func parsePoint(s string, now time.Time) (point, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "now" {
		return point{}, nil
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n == 0 {
			return point{}, fmt.Errorf("sequence 0: the change stream starts at 1")
		}
		return point{Seq: n}, nil
	}
	t, err := parseTime(s, now)
	if err != nil {
		return point{}, fmt.Errorf("%q is neither a sequence, an RFC 3339 time nor a duration ago", s)
	}
	return point{Time: t}, nil
}

// parseTime reads an RFC 3339 time or a duration before now ("90s").
func parseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration ago", s)
	}
	return now.Add(-d), nil
}

// opName is an op without its OP_ prefix.
func opName[T fmt.Stringer](op T) string { return strings.TrimPrefix(op.String(), "OP_") }

// short abbreviates a version for tables.
func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}
