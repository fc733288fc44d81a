package bus

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/nats-io/nats.go/jetstream"
)

// Declared is every stream, bucket and object store of one mesh with the
// config this version of pilotwire wants: the one owner of their
// configuration. A service opens what it needs with
// EnsureStream/EnsureKV/EnsureObjectStore (create when missing, never
// change) and reports any drift; only `pilotwire streams apply` (Apply)
// changes an existing stream.
type Declared struct {
	Streams      []jetstream.StreamConfig
	Buckets      []jetstream.KeyValueConfig
	ObjectStores []jetstream.ObjectStoreConfig
}

// Declared lists every stream, bucket and object store (the Config
// functions in streams.go declare each one).
func (n Names) Declared(o StreamOptions) Declared {
	return Declared{
		Streams: []jetstream.StreamConfig{
			n.ChangesConfig(o),
			n.PushesConfig(o),
			n.DeliveriesConfig(o),
		},
		Buckets: []jetstream.KeyValueConfig{
			n.RegistryConfig(o),
			n.LeaseConfig(o),
		},
		ObjectStores: []jetstream.ObjectStoreConfig{
			n.SnapshotsConfig(o),
		},
	}
}

// Drift is one field in which a stream or bucket on the server differs from
// its declaration.
type Drift struct {
	Field      string
	Have, Want string
}

func (d Drift) String() string { return fmt.Sprintf("%s: have %s, want %s", d.Field, d.Have, d.Want) }

type drifts []Drift

func (d *drifts) check(field string, have, want any) {
	if !reflect.DeepEqual(have, want) {
		*d = append(*d, Drift{Field: field, Have: fmt.Sprint(have), Want: fmt.Sprint(want)})
	}
}

// limit normalises a JetStream limit: zero and negative both mean none.
func limit[T int32 | int64](v T) T {
	if v <= 0 {
		return -1
	}
	return v
}

// StreamDrift lists the fields that matter for pilotwire (subjects,
// retention, storage, replicas, limits, dedup window, direct get, message
// TTLs) in which have differs from want. Zero limits mean none on both
// sides; a zero dedup window in want is the server's default and not
// compared.
func StreamDrift(have, want jetstream.StreamConfig) []Drift {
	var d drifts
	d.check("subjects", have.Subjects, want.Subjects)
	d.check("retention", have.Retention, want.Retention)
	d.check("storage", have.Storage, want.Storage)
	d.check("replicas", max(have.Replicas, 1), max(want.Replicas, 1))
	d.check("max_msgs", limit(have.MaxMsgs), limit(want.MaxMsgs))
	d.check("max_bytes", limit(have.MaxBytes), limit(want.MaxBytes))
	d.check("max_age", have.MaxAge, want.MaxAge)
	d.check("max_msgs_per_subject", limit(have.MaxMsgsPerSubject), limit(want.MaxMsgsPerSubject))
	d.check("max_msg_size", limit(have.MaxMsgSize), limit(want.MaxMsgSize))
	d.check("discard", have.Discard, want.Discard)
	if want.Duplicates != 0 {
		d.check("duplicate_window", have.Duplicates, want.Duplicates)
	}
	d.check("allow_direct", have.AllowDirect, want.AllowDirect)
	d.check("allow_msg_ttl", have.AllowMsgTTL, want.AllowMsgTTL)
	d.check("subject_delete_marker_ttl", have.SubjectDeleteMarkerTTL, want.SubjectDeleteMarkerTTL)
	return d
}

// BucketDrift is StreamDrift for a KV bucket.
func BucketDrift(have, want jetstream.KeyValueConfig) []Drift {
	var d drifts
	d.check("storage", have.Storage, want.Storage)
	d.check("replicas", max(have.Replicas, 1), max(want.Replicas, 1))
	d.check("history", max(have.History, 1), max(want.History, 1))
	d.check("ttl", have.TTL, want.TTL)
	d.check("max_bytes", limit(have.MaxBytes), limit(want.MaxBytes))
	d.check("max_value_size", limit(have.MaxValueSize), limit(want.MaxValueSize))
	d.check("limit_marker_ttl", have.LimitMarkerTTL, want.LimitMarkerTTL)
	return d
}

// ObjectStoreDrift is StreamDrift for an object store.
func ObjectStoreDrift(have, want jetstream.ObjectStoreConfig) []Drift {
	var d drifts
	d.check("storage", have.Storage, want.Storage)
	d.check("replicas", max(have.Replicas, 1), max(want.Replicas, 1))
	d.check("ttl", have.TTL, want.TTL)
	d.check("max_bytes", limit(have.MaxBytes), limit(want.MaxBytes))
	d.check("compression", have.Compression, want.Compression)
	return d
}

// ObjectStoreConfig reads an object store's config back from the server.
func ObjectStoreConfig(ctx context.Context, obj jetstream.ObjectStore) (jetstream.ObjectStoreConfig, error) {
	st, err := obj.Status(ctx)
	if err != nil {
		return jetstream.ObjectStoreConfig{}, fmt.Errorf("status of object store: %w", err)
	}
	bs, ok := st.(*jetstream.ObjectBucketStatus)
	if !ok {
		return jetstream.ObjectStoreConfig{}, fmt.Errorf("status of object store %s: unexpected type %T", st.Bucket(), st)
	}
	cfg := bs.StreamInfo().Config
	return jetstream.ObjectStoreConfig{
		Bucket: bs.Bucket(), Description: cfg.Description, TTL: cfg.MaxAge, MaxBytes: cfg.MaxBytes,
		Storage: cfg.Storage, Replicas: cfg.Replicas, Placement: cfg.Placement,
		Compression: cfg.Compression != jetstream.NoCompression, Metadata: cfg.Metadata,
	}, nil
}

// EnsureStream opens the stream cfg names, creating it with cfg when it is
// missing. An existing stream is never changed, whatever its config: check
// it with StreamDrift, change it with ApplyStream.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile, by another service
			s, err = js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// EnsureKV opens the bucket cfg names, creating it when missing; an
// existing bucket is never changed (see EnsureStream).
func EnsureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// BucketConfig reads a bucket's config back from the server.
func BucketConfig(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyValueConfig, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return jetstream.KeyValueConfig{}, fmt.Errorf("status of bucket %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return jetstream.KeyValueConfig{}, fmt.Errorf("status of bucket %s: unexpected type %T", kv.Bucket(), st)
	}
	return bs.Config(), nil
}

// Status is what Check or Apply found of one declared stream or bucket.
type Status struct {
	// Name is the stream's, bucket's or object store's name; Kind is
	// "stream", "bucket" or "object store".
	Name, Kind string
	// Missing: it does not exist (Check), or did not and was created
	// (Apply).
	Missing bool
	// Drift: how it differs from its declaration (Check), or differed and
	// was changed (Apply).
	Drift []Drift
}

// OK reports a stream, bucket or object store that exists as declared.
func (s Status) OK() bool { return !s.Missing && len(s.Drift) == 0 }

// Check compares every declared stream, bucket and object store with the
// server's, changing nothing; with keepReplicas, replica counts are not
// compared.
func (d Declared) Check(ctx context.Context, js jetstream.JetStream, keepReplicas bool) ([]Status, error) {
	return d.walk(ctx, js, false, keepReplicas)
}

// Apply makes every declared stream, bucket and object store as declared:
// it creates the missing ones and updates those that drift. With
// keepReplicas an existing stream keeps its replica count. It returns what
// it found before changing it.
func (d Declared) Apply(ctx context.Context, js jetstream.JetStream, keepReplicas bool) ([]Status, error) {
	return d.walk(ctx, js, true, keepReplicas)
}

func (d Declared) walk(ctx context.Context, js jetstream.JetStream, apply, keepReplicas bool) ([]Status, error) {
	var out []Status
	for _, cfg := range d.Streams {
		st := Status{Name: cfg.Name, Kind: "stream"}
		s, err := js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			st.Missing = true
		case err != nil:
			return out, fmt.Errorf("stream %s: %w", cfg.Name, err)
		default:
			if keepReplicas {
				cfg.Replicas = s.CachedInfo().Config.Replicas
			}
			st.Drift = StreamDrift(s.CachedInfo().Config, cfg)
		}
		if apply && !st.OK() {
			if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
				return out, fmt.Errorf("apply stream %s: %w", cfg.Name, err)
			}
		}
		out = append(out, st)
	}
	for _, cfg := range d.Buckets {
		st := Status{Name: cfg.Bucket, Kind: "bucket"}
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			st.Missing = true
		case err != nil:
			return out, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
		default:
			have, err := BucketConfig(ctx, kv)
			if err != nil {
				return out, err
			}
			if keepReplicas {
				cfg.Replicas = have.Replicas
			}
			st.Drift = BucketDrift(have, cfg)
		}
		if apply && !st.OK() {
			if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
				return out, fmt.Errorf("apply bucket %s: %w", cfg.Bucket, err)
			}
		}
		out = append(out, st)
	}
	for _, cfg := range d.ObjectStores {
		st := Status{Name: cfg.Bucket, Kind: "object store"}
		obj, err := js.ObjectStore(ctx, cfg.Bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			st.Missing = true
		case err != nil:
			return out, fmt.Errorf("object store %s: %w", cfg.Bucket, err)
		default:
			have, err := ObjectStoreConfig(ctx, obj)
			if err != nil {
				return out, err
			}
			if keepReplicas {
				cfg.Replicas = have.Replicas
			}
			st.Drift = ObjectStoreDrift(have, cfg)
		}
		if apply && !st.OK() {
			if _, err := js.CreateOrUpdateObjectStore(ctx, cfg); err != nil {
				return out, fmt.Errorf("apply object store %s: %w", cfg.Bucket, err)
			}
		}
		out = append(out, st)
	}
	return out, nil
}
