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
	// Memory uses memory storage instead of file storage (tests only).
	Memory bool
}

// DefaultMaxMsgSize is the largest change record accepted by default.
const DefaultMaxMsgSize = 1 << 20

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
	return o
}

func (o StreamOptions) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// ChangesConfig is the history stream: every record kept, no per-subject
// limit (per-subject limits slow down sharply with many subjects, see
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
		AllowDirect: true,
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
	if err := kv.Purge(ctx, key, jetstream.PurgeTTL(ttl)); err != nil {
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
