package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamOptions tune the streams a service creates. Zero values mean the
// defaults below.
type StreamOptions struct {
	// Replicas for every stream and bucket (3 in production clusters).
	Replicas int
	// MaxMsgSize caps one change record (default 1 MiB, NATS's default
	// max_payload). Ingest rejects bigger objects with a clear error.
	MaxMsgSize int32
	// DuplicateWindow is JetStream's message-id dedup window (default 2m).
	DuplicateWindow time.Duration
	// DeliveriesMaxAge bounds the delivery history (default 24h).
	DeliveriesMaxAge time.Duration
	// DeliveriesMaxBytes bounds the delivery history's size (default
	// DefaultDeliveriesMaxBytes; negative: no bound). The oldest go first.
	DeliveriesMaxBytes int64
	// ChangesMaxAge and ChangesMaxBytes are hard limits on the change
	// stream (default 0: none). JetStream drops the oldest records past
	// them whatever they are, also the only record of a live object, which
	// a consumer that starts from the last record of each subject (ingest)
	// would then miss; so they are off by default, and the history is
	// bounded by compaction instead (pkg/snapshot: deleted subjects purged
	// once a snapshot covers them and the retention window has passed).
	// Set them only as a disk guard well above what compaction leaves.
	ChangesMaxAge   time.Duration
	ChangesMaxBytes int64
	// Memory uses memory storage instead of file storage (tests only).
	Memory bool
}

// DefaultMaxMsgSize is the largest change record accepted by default.
const DefaultMaxMsgSize = 1 << 20

// DefaultDeliveriesMaxBytes bounds the delivery history by default (1 GiB).
const DefaultDeliveriesMaxBytes = 1 << 30

func (o StreamOptions) withDefaults() StreamOptions {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxMsgSize <= 0 {
		o.MaxMsgSize = DefaultMaxMsgSize
	}
	if o.DuplicateWindow <= 0 {
		o.DuplicateWindow = 2 * time.Minute
	}
	if o.DeliveriesMaxAge <= 0 {
		o.DeliveriesMaxAge = 24 * time.Hour
	}
	if o.DeliveriesMaxBytes == 0 {
		o.DeliveriesMaxBytes = DefaultDeliveriesMaxBytes
	}
	return o
}

func (o StreamOptions) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// ChangesConfig is the history stream: every record kept unless
// ChangesMaxAge or ChangesMaxBytes say otherwise, no per-subject limit
// (per-subject limits slow down sharply with many subjects, see
// nats-server issue 4043).
func (n Names) ChangesConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        n.ChangesStream(),
		Description: "pilotwire change records: the durable history of the mesh",
		Subjects:    []string{n.ChangesAll()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		MaxMsgSize:  o.MaxMsgSize,
		Duplicates:  o.DuplicateWindow,
		MaxAge:      max(o.ChangesMaxAge, 0),
		MaxBytes:    max(o.ChangesMaxBytes, 0),
		AllowDirect: true,
		Discard:     jetstream.DiscardOld,
	}
}

// PushesConfig is the stream of debounced PushRequests.
func (n Names) PushesConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        n.PushesStream(),
		Description: "pilotwire PushRequests from the debouncer",
		Subjects:    []string{n.PushesSubject()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		Duplicates:  o.DuplicateWindow,
		MaxAge:      7 * 24 * time.Hour,
		AllowDirect: true,
	}
}

// DeliveriesConfig is the stream of xDS exchanges per connection.
func (n Names) DeliveriesConfig(o StreamOptions) jetstream.StreamConfig {
	o = o.withDefaults()
	return jetstream.StreamConfig{
		Name:        n.DeliveriesStream(),
		Description: "pilotwire xDS responses, ACKs and NACKs per connection",
		Subjects:    []string{n.DeliveriesAll()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		MaxAge:      o.DeliveriesMaxAge,
		MaxBytes:    max(o.DeliveriesMaxBytes, -1),
		AllowDirect: true,
		Discard:     jetstream.DiscardOld,
	}
}

// RegistryMarkerTTL is how long the marker of a removed registry key stays
// in the bucket. A watcher that is connected sees the removal at once; the
// marker only has to outlive a watcher's reconnect. Without a TTL every
// connection ever made would leave one marker forever, and a pusher's
// watch would replay them all at each take-over.
const RegistryMarkerTTL = 5 * time.Minute

// RegistryConfig is the KV bucket of frontends and connections. Liveness is
// judged by frontend heartbeats, not by key TTLs; per-message TTLs are on
// so that removal markers expire (RemoveKey).
func (n Names) RegistryConfig(o StreamOptions) jetstream.KeyValueConfig {
	o = o.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:         n.RegistryBucket(),
		Description:    "pilotwire ADS frontends and their connections",
		History:        1,
		Storage:        o.storage(),
		Replicas:       o.Replicas,
		LimitMarkerTTL: RegistryMarkerTTL,
	}
}

// RemoveKey removes key from a bucket with a purge marker that the server
// deletes after ttl (the bucket needs per-message TTLs: LimitMarkerTTL).
// Watchers see the removal as a purge; after ttl nothing of the key is
// left.
func RemoveKey(ctx context.Context, kv jetstream.KeyValue, key string, ttl time.Duration) error {
	return RemoveKeyAt(ctx, kv, key, 0, ttl)
}

// KVKeySubject is the subject key of bucket is written on, for a writer
// that publishes to the bucket itself (asynchronously, where
// jetstream.KeyValue waits for each write).
func KVKeySubject(bucket, key string) string { return kvKey(bucket, key) }

// KVOperationHeader and KVOperationPurge mark a published message as a
// purge of its key, as jetstream.KeyValue.Purge writes it (with a
// jetstream.MsgRollup of the subject).
const (
	KVOperationHeader = "KV-Operation"
	KVOperationPurge  = "PURGE"
)

// RemoveKeyAt is RemoveKey only if the key's latest revision is rev (0:
// any); otherwise it fails with jetstream.ErrKeyRevisionMismatch and the
// key keeps its newer value.
func RemoveKeyAt(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64, ttl time.Duration) error {
	opts := []jetstream.KVDeleteOpt{jetstream.PurgeTTL(ttl)}
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	if err := kv.Purge(ctx, key, opts...); err != nil {
		return fmt.Errorf("remove key %s: %w", key, err)
	}
	return nil
}

// LastMsg returns the last message on a stream subject, or nil when the
// subject holds no message.
func LastMsg(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	return m, nil
}

// LeaseConfig is the KV bucket of active/standby leases.
func (n Names) LeaseConfig(o StreamOptions) jetstream.KeyValueConfig {
	o = o.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:      n.LeaseBucket(),
		Description: "pilotwire active/standby leases (debouncer, pusher shards)",
		History:     1,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
	}
}

// SnapshotsConfig is the object store of change-stream snapshots: the
// compacted set of live objects' last records at a sequence, one object
// each (pkg/snapshot).
func (n Names) SnapshotsConfig(o StreamOptions) jetstream.ObjectStoreConfig {
	o = o.withDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket:      n.SnapshotBucket(),
		Description: "pilotwire snapshots of the change stream's live objects",
		Storage:     o.storage(),
		Replicas:    o.Replicas,
	}
}

// EnsureObjectStore opens the object store cfg names, creating it when
// missing; an existing one is never changed (see EnsureStream), and a
// failure to open one is returned as it is, not taken for "missing".
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	os, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		os, err = js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile
			os, err = js.ObjectStore(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ensure object store %s: %w", cfg.Bucket, err)
	}
	return os, nil
}
