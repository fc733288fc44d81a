package pusher

import (
	"time"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// Config of the pusher. Each field with a flag names it and its env var;
// the defaults are DefaultConfig's.
type Config struct {
	svc.Common
	// Throttle is the most connections processed at once per frontend
	// (--push-throttle, env PILOT_PUSH_THROTTLE; default 0: for each
	// frontend min(15+5*cores, 100) with the cores its heartbeat reports, as
	// Istio sizes its throttle from the cores of the istiod that generates;
	// this pusher's own cores until a frontend has reported; raised to
	// PushWindow of the frontend's measured push rate once it reports one).
	Throttle int
	// PushWindow: with Throttle 0, a frontend that reports its push rate
	// (orders completed per second of work) gets that rate times PushWindow
	// in flight, if that is above Istio's default for its cores: enough to
	// keep it busy across the round trip of orders and completions (a few
	// milliseconds over NATS), little more queued at it. Measured on 2
	// shared cores, 100ms (300 in flight instead of 25) doubled the CPU of
	// an endpoint push: responses generated at once contend (docs/
	// benchmarks.md). (--push-window, env PILOTWIRE_PUSH_WINDOW, default
	// 10ms; capped at 10,000 connections.)
	PushWindow time.Duration
	// Shard names this pusher's durable consumer; one active pusher per
	// shard (--shard, env PILOTWIRE_PUSHER_SHARD, default "0"). Sharding by
	// frontend comes later.
	Shard string
	// ID is unique per process; PushDone reports come to its subject
	// (--id, env PILOTWIRE_INSTANCE_ID; default pusher-<hostname>-<random>).
	ID string
	// PushTimeout is how long a dispatched order may wait for its PushDone
	// before it counts as lost: its throttle slot is freed and the
	// connection resynced after a backoff (--push-timeout, env
	// PILOTWIRE_PUSH_TIMEOUT, default 30s).
	PushTimeout time.Duration
	// FrontendTimeout: a frontend without a heartbeat for this long is
	// dead and its connections are forgotten (--frontend-timeout, env
	// PILOTWIRE_FRONTEND_TIMEOUT, default 6s).
	FrontendTimeout time.Duration
	// LeaseTTL: a standby takes over after the active pusher has not
	// renewed its shard's lease for this long (--lease-ttl, env
	// PILOTWIRE_LEASE_TTL, default 3s).
	LeaseTTL time.Duration
	// MaxBatch caps the orders sent to one frontend in one message (no
	// flag; default 256).
	MaxBatch int
	// MaxBatchBytes caps the encoded size of one PushOrderBatch below the
	// server's max payload, which always caps it (no flag; default 0: the
	// max payload alone).
	MaxBatchBytes int
	// ResyncInterval is the first wait before a connection whose push was
	// lost (done timed out, send or frontend failed) is resynced; each
	// further resync of a connection still behind waits twice as long, up
	// to ResyncMax (--resync-interval, env PILOTWIRE_PUSHER_RESYNC_INTERVAL,
	// default 1s).
	ResyncInterval time.Duration
	// ResyncMax caps the resync backoff (no flag; default 1m).
	ResyncMax time.Duration
	// BehindGrace: a connection behind the latest request with no push in
	// flight and none lost is resynced after this long (no flag; default
	// 15s, longer than PILOT_DEBOUNCE_MAX, so that a request overtaken by
	// an endpoint-only one has arrived).
	BehindGrace time.Duration
	// DrainTimeout bounds the dispatch of queued work on shutdown (no flag;
	// default 5s).
	DrainTimeout time.Duration

	// beforeSend, in tests, runs just before a batch is published: after
	// every check, where a paused process would sit.
	beforeSend func(*pb.PushOrderBatch)
	// now, in tests, is the pusher's clock (nil: time.Now); afterSweep
	// runs at the end of each sweep, afterLateCheck right after a sweep
	// checked whether it ran late.
	now            func() time.Time
	afterSweep     func()
	afterLateCheck func()
}

// DefaultConfig is the configuration every flag defaults to; Run also takes
// from it every field left zero.
func DefaultConfig() Config {
	return Config{
		Common:          svc.DefaultCommon("127.0.0.1:9093"),
		Shard:           "0",
		PushTimeout:     30 * time.Second,
		FrontendTimeout: 6 * time.Second,
		LeaseTTL:        lease.DefaultTTL,
		MaxBatch:        256,
		PushWindow:      10 * time.Millisecond,
		ResyncInterval:  time.Second,
		ResyncMax:       time.Minute,
		BehindGrace:     15 * time.Second,
		DrainTimeout:    5 * time.Second,
	}
}

// AddFlags registers the pusher's flags on fs, each defaulting to
// DefaultConfig's value unless its environment variable is set.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	d := DefaultConfig()
	c.Common.AddFlags(fs, d.Common)
	fs.IntVar(&c.Throttle, "push-throttle", svc.EnvInt("PILOT_PUSH_THROTTLE", d.Throttle), "most connections pushed at once per frontend; 0: min(15+5*cores, 100) from each frontend's cores (env PILOT_PUSH_THROTTLE)")
	fs.DurationVar(&c.PushWindow, "push-window", svc.EnvDuration("PILOTWIRE_PUSH_WINDOW", d.PushWindow), "with no --push-throttle, each frontend gets this long of its measured push rate in flight, at least min(15+5*cores, 100) (env PILOTWIRE_PUSH_WINDOW)")
	fs.StringVar(&c.Shard, "shard", svc.EnvString("PILOTWIRE_PUSHER_SHARD", d.Shard), "pusher shard: names the durable consumer (env PILOTWIRE_PUSHER_SHARD)")
	fs.DurationVar(&c.PushTimeout, "push-timeout", svc.EnvDuration("PILOTWIRE_PUSH_TIMEOUT", d.PushTimeout), "a push order without a done report after this long is lost: its slot is freed and the connection resynced (env PILOTWIRE_PUSH_TIMEOUT)")
	fs.DurationVar(&c.FrontendTimeout, "frontend-timeout", svc.EnvDuration("PILOTWIRE_FRONTEND_TIMEOUT", d.FrontendTimeout), "a frontend without a heartbeat for this long is forgotten with its connections (env PILOTWIRE_FRONTEND_TIMEOUT)")
	fs.DurationVar(&c.ResyncInterval, "resync-interval", svc.EnvDuration("PILOTWIRE_PUSHER_RESYNC_INTERVAL", d.ResyncInterval), "first wait before a connection whose push was lost is resynced; doubles up to 1m while it stays behind (env PILOTWIRE_PUSHER_RESYNC_INTERVAL)")
	fs.StringVar(&c.ID, "id", svc.EnvString("PILOTWIRE_INSTANCE_ID", d.ID), "unique id of this instance in the lease (env PILOTWIRE_INSTANCE_ID; default pusher-<hostname>-<random>)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", svc.EnvDuration("PILOTWIRE_LEASE_TTL", d.LeaseTTL), "a standby takes over when the active instance has not renewed its lease for this long (env PILOTWIRE_LEASE_TTL)")
}

// withDefaults fills every zero field from DefaultConfig (the instance id,
// unique per process, is Run's to make).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Throttle = max(c.Throttle, 0) // 0: derived per frontend
	if c.Shard == "" {
		c.Shard = d.Shard
	}
	if c.PushTimeout <= 0 {
		c.PushTimeout = d.PushTimeout
	}
	if c.FrontendTimeout <= 0 {
		c.FrontendTimeout = d.FrontendTimeout
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.PushWindow <= 0 {
		c.PushWindow = d.PushWindow
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = d.ResyncInterval
	}
	if c.ResyncMax <= 0 {
		c.ResyncMax = d.ResyncMax
	}
	c.ResyncMax = max(c.ResyncMax, c.ResyncInterval)
	if c.BehindGrace <= 0 {
		c.BehindGrace = d.BehindGrace
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	return c
}

// pushesAckWait is the PUSHES consumer's ack wait: how long a request
// delivered to a pusher that died stays stuck, and how long the periodic
// check waits for the consumer before it catches up on its own.
const pushesAckWait = 5 * time.Second
