package debouncer

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// Config of the debouncer. Each field with a flag names it and its env var;
// the defaults are DefaultConfig's.
type Config struct {
	svc.Common
	// Debounce holds the windows: --debounce-after (env
	// PILOT_DEBOUNCE_AFTER, default 100ms), --debounce-max (env
	// PILOT_DEBOUNCE_MAX, default 10s), --enable-eds-debounce (env
	// PILOT_ENABLE_EDS_DEBOUNCE, default true), as Istio; and
	// --max-bypass-ranges (env PILOTWIRE_DEBOUNCE_MAX_BYPASS_RANGES, default
	// 64): with EDS debounce off, an endpoint-only request whose sequences
	// break into more runs than this (debounced changes pending between
	// them) takes the pending debounced batch along.
	Debounce debounce.Config
	// ID names this instance in the lease (--id, env PILOTWIRE_INSTANCE_ID;
	// default debouncer-<hostname>-<random>).
	ID string
	// LeaseTTL: a standby takes over after the active instance has not
	// renewed the lease for this long (--lease-ttl, env PILOTWIRE_LEASE_TTL,
	// default 3s).
	LeaseTTL time.Duration
	// MaxAckPending bounds the change records held un-acked (merged into a
	// pending request). It must exceed the records one max window can hold
	// (--max-ack-pending, env PILOTWIRE_DEBOUNCE_MAX_ACK_PENDING, default
	// 200000).
	MaxAckPending int
	// MaxRequestBytes bounds one PushRequest: past it the request drops
	// its config keys and becomes a full push. Run lowers it to half the
	// largest message NATS and the PUSHES stream accept (--max-request-bytes,
	// env PILOTWIRE_DEBOUNCE_MAX_REQUEST_BYTES, default 512 KiB), never
	// below 16 KiB (minRequestBytes).
	MaxRequestBytes int
	// SnapshotInterval is how often the snapshotter (one debouncer
	// instance, under the lease "snapshot") writes a snapshot of the change
	// stream's live objects and compacts the stream (--snapshot-interval,
	// env PILOTWIRE_SNAPSHOT_INTERVAL, default 10m; negative: no snapshots
	// and no compaction, the history then grows forever).
	SnapshotInterval time.Duration
	// SnapshotRetention is how far back the history stays exact: records
	// older than this that no live object needs (deleted objects, a live
	// object's superseded versions) are purged once a snapshot covers them
	// (--snapshot-retention, env PILOTWIRE_SNAPSHOT_RETENTION, default 72h).
	SnapshotRetention time.Duration
	// IndexRebuildMax bounds the records (the last EndpointSlice and Pod
	// records) a new active term reads to rebuild its pod → service index
	// (--index-rebuild-max, env PILOTWIRE_DEBOUNCE_INDEX_REBUILD_MAX,
	// default 500000).
	IndexRebuildMax int

	hooks *testHooks // tests only
}

// DefaultConfig is the configuration every flag defaults to; Run also takes
// from it every field left zero.
func DefaultConfig() Config {
	return Config{
		Common:          svc.DefaultCommon("127.0.0.1:9092"),
		Debounce:        debounce.DefaultConfig(),
		LeaseTTL:        lease.DefaultTTL,
		MaxAckPending:   200_000,
		MaxRequestBytes: 512 << 10,

		SnapshotInterval:  snapshot.DefaultInterval,
		SnapshotRetention: snapshot.DefaultRetention,
		IndexRebuildMax:   DefaultIndexRebuildMax,
	}
}

// AddFlags registers the debouncer's flags on fs, each defaulting to
// DefaultConfig's value unless its environment variable is set.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	d := DefaultConfig()
	c.Common.AddFlags(fs, d.Common)
	fs.DurationVar(&c.Debounce.DebounceAfter, "debounce-after", svc.EnvDuration("PILOT_DEBOUNCE_AFTER", d.Debounce.DebounceAfter), "quiet window: emit when no change arrived for this long (env PILOT_DEBOUNCE_AFTER)")
	fs.DurationVar(&c.Debounce.DebounceMax, "debounce-max", svc.EnvDuration("PILOT_DEBOUNCE_MAX", d.Debounce.DebounceMax), "emit at the latest this long after the first merged change (env PILOT_DEBOUNCE_MAX)")
	fs.BoolVar(&c.Debounce.EnableEDSDebounce, "enable-eds-debounce", svc.EnvBool("PILOT_ENABLE_EDS_DEBOUNCE", d.Debounce.EnableEDSDebounce), "debounce endpoint-only changes too (env PILOT_ENABLE_EDS_DEBOUNCE)")
	fs.IntVar(&c.Debounce.MaxBypassRanges, "max-bypass-ranges", svc.EnvInt("PILOTWIRE_DEBOUNCE_MAX_BYPASS_RANGES", d.Debounce.MaxBypassRanges), "with EDS debounce off, an endpoint-only request broken into more sequence ranges than this takes the pending debounced changes along (env PILOTWIRE_DEBOUNCE_MAX_BYPASS_RANGES)")
	fs.IntVar(&c.MaxAckPending, "max-ack-pending", svc.EnvInt("PILOTWIRE_DEBOUNCE_MAX_ACK_PENDING", d.MaxAckPending), "change records held un-acknowledged while merged (env PILOTWIRE_DEBOUNCE_MAX_ACK_PENDING)")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", svc.EnvInt("PILOTWIRE_DEBOUNCE_MAX_REQUEST_BYTES", d.MaxRequestBytes), "a PushRequest larger than this drops its config keys and becomes a full push (env PILOTWIRE_DEBOUNCE_MAX_REQUEST_BYTES)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", svc.EnvDuration("PILOTWIRE_SNAPSHOT_INTERVAL", d.SnapshotInterval), "write a snapshot of the change stream's live objects and compact the stream this often; negative disables both (env PILOTWIRE_SNAPSHOT_INTERVAL)")
	fs.DurationVar(&c.SnapshotRetention, "snapshot-retention", svc.EnvDuration("PILOTWIRE_SNAPSHOT_RETENTION", d.SnapshotRetention), "keep the change history exact this far back; older records no live object needs are purged (env PILOTWIRE_SNAPSHOT_RETENTION)")
	fs.IntVar(&c.IndexRebuildMax, "index-rebuild-max", svc.EnvInt("PILOTWIRE_DEBOUNCE_INDEX_REBUILD_MAX", d.IndexRebuildMax), "at the start of a term, read at most this many EndpointSlice and Pod records to rebuild the pod to service index (env PILOTWIRE_DEBOUNCE_INDEX_REBUILD_MAX)")
	fs.StringVar(&c.ID, "id", svc.EnvString("PILOTWIRE_INSTANCE_ID", d.ID), "unique id of this instance in the lease (env PILOTWIRE_INSTANCE_ID; default debouncer-<hostname>-<random>)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", svc.EnvDuration("PILOTWIRE_LEASE_TTL", d.LeaseTTL), "a standby takes over when the active instance has not renewed its lease for this long (env PILOTWIRE_LEASE_TTL)")
}

// withDefaults fills every zero field from DefaultConfig (the instance id,
// unique per process, is Run's to make). The debounce windows are filled by
// pkg/debounce; EnableEDSDebounce is taken as given.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Debounce = debounce.New(c.Debounce).Config()
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = d.LeaseTTL
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = d.MaxAckPending
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = d.SnapshotInterval
	}
	if c.IndexRebuildMax <= 0 {
		c.IndexRebuildMax = d.IndexRebuildMax
	}
	if c.SnapshotRetention <= 0 {
		c.SnapshotRetention = d.SnapshotRetention
	}
	return c
}
