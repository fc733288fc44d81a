package bus_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// awkwardIDs are ids operators and Kubernetes really use: FQDN host names
// as frontend ids, host:port connection ids, dotted shard names, non-ASCII.
var awkwardIDs = []string{"fe-0", "ads-7f9c.example.com", "10.0.0.1:15010", "a.b", "naïve", "a b", "%", "=", "a/b", ""}

// registry starts JetStream and creates the registry bucket.
func registry(t *testing.T) (context.Context, jetstream.JetStream, bus.Names, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	_, js := natstest.Connect(t, natstest.Start(t))
	n, err := bus.NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.EnsureKV(ctx, js, n.RegistryConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, n, kv
}

// TestNamesAcceptedByJetStream puts every key and subject pilotwire
// derives from an id into a real JetStream: KV keys (registry, leases),
// consumer names and subjects must all be accepted, and the id must come
// back from the key.
func TestNamesAcceptedByJetStream(t *testing.T) {
	ctx, js, n, kv := registry(t)
	leases, err := bus.EnsureKV(ctx, js, n.LeaseConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	changes, err := bus.EnsureStream(ctx, js, n.ChangesConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range awkwardIDs {
		t.Run(id, func(t *testing.T) {
			for _, key := range []string{bus.FrontendKey(id), bus.ConnKey(id, id)} {
				if _, err := kv.Put(ctx, key, []byte("x")); err != nil {
					t.Errorf("registry Put(%q) for id %q: %v", key, id, err)
				}
				for _, tok := range strings.Split(key, ".")[1:] {
					if back, err := bus.UnescapeToken(tok); err != nil || back != id {
						t.Errorf("key %q: token %q unescapes to %q, %v; want %q", key, tok, back, err, id)
					}
				}
			}
			if _, err := leases.Put(ctx, "pusher-"+bus.EscapeToken(id), []byte("x")); err != nil {
				t.Errorf("lease Put for shard %q: %v", id, err)
			}
			if _, err := js.CreateOrUpdateConsumer(ctx, n.ChangesStream(), jetstream.ConsumerConfig{Durable: n.PusherConsumer(id)}); err != nil {
				t.Errorf("consumer %q for shard %q: %v", n.PusherConsumer(id), id, err)
			}
			subj := n.ChangeSubject(id, &pb.ObjectRef{Kind: "Service", Namespace: id, Name: id})
			if _, err := js.Publish(ctx, subj, []byte("{}")); err != nil {
				t.Errorf("publish on %q: %v", subj, err)
			}
		})
	}
	if _, err := changes.Info(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRemovedKeysLeaveNothingBehind: keys removed with RemoveKey are gone
// from the bucket's stream once the marker TTL has passed, so the bucket's
// size is bounded by its live keys.
func TestRemovedKeysLeaveNothingBehind(t *testing.T) {
	ctx, js, n, kv := registry(t)
	const live, removed = 3, 50
	for i := range live + removed {
		if _, err := kv.Put(ctx, bus.ConnKey("fe", strconv.Itoa(i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for i := live; i < live+removed; i++ {
		if err := bus.RemoveKey(ctx, kv, bus.ConnKey("fe", strconv.Itoa(i)), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, "KV_"+n.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "only the live keys left in the bucket", func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == live
	})
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != live {
		t.Errorf("keys %v, %v; want %d live keys", keys, err, live)
	}
}

// TestEnsureNeverChangesStreams: ensuring a stream or bucket that exists
// sends no update, even when its config differs: every service ensures
// them at start, and one service started with other options (one replica
// on a 3-node cluster) must not reconfigure the mesh's streams. Only Apply
// changes them, and reports what it changed; Check reports and changes
// nothing.
func TestEnsureNeverChangesStreams(t *testing.T) {
	ctx, js, n, _ := registry(t)
	nc := js.Conn()
	updates, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := bus.EnsureStream(ctx, js, n.ChangesConfig(bus.StreamOptions{})); err != nil {
			t.Fatal(err)
		}
		if _, err := bus.EnsureKV(ctx, js, n.RegistryConfig(bus.StreamOptions{})); err != nil {
			t.Fatal(err)
		}
	}
	changed := n.ChangesConfig(bus.StreamOptions{DuplicateWindow: time.Minute})
	s, err := bus.EnsureStream(ctx, js, changed)
	if err != nil {
		t.Fatal(err)
	}
	want := []bus.Drift{{Field: "duplicate_window", Have: "2m0s", Want: "1m0s"}}
	if diff := cmp.Diff(want, bus.StreamDrift(s.CachedInfo().Config, changed)); diff != "" {
		t.Errorf("drift (-want +got):\n%s", diff)
	}
	if m, err := updates.NextMsg(testutil.ShortTimeout); err == nil {
		t.Errorf("ensure sent an update: advisory %s", m.Subject)
	}

	decl := bus.Declared{Streams: []jetstream.StreamConfig{changed}, Buckets: []jetstream.KeyValueConfig{n.RegistryConfig(bus.StreamOptions{})}}
	check, err := decl.Check(ctx, js, true)
	if err != nil {
		t.Fatal(err)
	}
	wantCheck := []bus.Status{{Name: n.ChangesStream(), Kind: "stream", Drift: want}, {Name: n.RegistryBucket(), Kind: "bucket"}}
	if diff := cmp.Diff(wantCheck, check); diff != "" {
		t.Errorf("check (-want +got):\n%s", diff)
	}
	if m, err := updates.NextMsg(testutil.ShortTimeout); err == nil {
		t.Errorf("check sent an update: advisory %s", m.Subject)
	}
	applied, err := decl.Apply(ctx, js, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCheck, applied); diff != "" {
		t.Errorf("apply (-want +got):\n%s", diff)
	}
	m, err := updates.NextMsg(testutil.DefaultTimeout)
	if err != nil {
		t.Fatalf("no update advisory from apply: %v", err)
	}
	if !strings.HasSuffix(m.Subject, "."+n.ChangesStream()) {
		t.Errorf("update advisory %s, want only the changed %s", m.Subject, n.ChangesStream())
	}
	if m, err := updates.NextMsg(testutil.ShortTimeout); err == nil {
		t.Errorf("unexpected update advisory %s", m.Subject)
	}
	after, err := decl.Check(ctx, js, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range after {
		if !st.OK() {
			t.Errorf("after apply: %+v, want as declared", st)
		}
	}
}

// TestDeclaredObjectStores: the snapshot object store is declared with
// the streams and buckets, so Check reports it missing or drifting and
// Apply creates it or puts it back as declared.
func TestDeclaredObjectStores(t *testing.T) {
	ctx, js, n, _ := registry(t)
	decl := n.Declared(bus.StreamOptions{})
	decl.Streams, decl.Buckets = nil, nil // the registry above is not this test's
	want := n.SnapshotsConfig(bus.StreamOptions{})
	if diff := cmp.Diff([]jetstream.ObjectStoreConfig{want}, decl.ObjectStores); diff != "" {
		t.Fatalf("declared object stores (-want +got):\n%s", diff)
	}
	check := func(what string) []bus.Status {
		t.Helper()
		st, err := decl.Check(ctx, js, false)
		if err != nil {
			t.Fatalf("check %s: %v", what, err)
		}
		return st
	}
	if diff := cmp.Diff([]bus.Status{{Name: n.SnapshotBucket(), Kind: "object store", Missing: true}}, check("with none")); diff != "" {
		t.Errorf("check with no object store (-want +got):\n%s", diff)
	}

	// One created by hand (or by an older version) with other limits.
	drifted := want
	drifted.TTL, drifted.MaxBytes = time.Hour, 1<<20
	if _, err := js.CreateObjectStore(ctx, drifted); err != nil {
		t.Fatal(err)
	}
	wantDrift := []bus.Status{{Name: n.SnapshotBucket(), Kind: "object store", Drift: []bus.Drift{
		{Field: "ttl", Have: "1h0m0s", Want: "0s"},
		{Field: "max_bytes", Have: "1048576", Want: "-1"},
	}}}
	if diff := cmp.Diff(wantDrift, check("drifted")); diff != "" {
		t.Errorf("check of a drifted object store (-want +got):\n%s", diff)
	}
	applied, err := decl.Apply(ctx, js, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDrift, applied); diff != "" {
		t.Errorf("apply (-want +got):\n%s", diff)
	}
	for _, st := range check("after apply") {
		if !st.OK() {
			t.Errorf("after apply: %+v, want as declared", st)
		}
	}
	s, err := js.Stream(ctx, "OBJ_"+n.SnapshotBucket())
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != 0 || cfg.MaxBytes > 0 {
		t.Errorf("object store stream after apply: max age %v, max bytes %d; want no limits", cfg.MaxAge, cfg.MaxBytes)
	}

	// Apply creates a missing one.
	if err := js.DeleteObjectStore(ctx, n.SnapshotBucket()); err != nil {
		t.Fatal(err)
	}
	if _, err := decl.Apply(ctx, js, false); err != nil {
		t.Fatal(err)
	}
	if _, err := js.ObjectStore(ctx, n.SnapshotBucket()); err != nil {
		t.Errorf("object store after apply: %v", err)
	}
}

// TestEnsureObjectStoreNeverChangesIt: like a stream or a bucket, an
// object store that exists is never changed by EnsureObjectStore, also
// when opening it fails for another reason than its absence (a timeout,
// a stream without a leader): the error is returned. A missing one is
// created.
func TestEnsureObjectStoreNeverChangesIt(t *testing.T) {
	ctx, js, n, _ := registry(t)
	want := n.SnapshotsConfig(bus.StreamOptions{})
	drifted := want
	drifted.TTL = time.Hour
	if _, err := js.CreateObjectStore(ctx, drifted); err != nil {
		t.Fatal(err)
	}
	ttl := func(what string) time.Duration {
		t.Helper()
		obj, err := js.ObjectStore(ctx, want.Bucket)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		cfg, err := bus.ObjectStoreConfig(ctx, obj)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return cfg.TTL
	}

	if _, err := bus.EnsureObjectStore(ctx, js, want); err != nil {
		t.Fatal(err)
	}
	if got := ttl("after ensure"); got != time.Hour {
		t.Errorf("TTL after ensuring an existing store: %v, want it left at 1h", got)
	}

	failing := natstest.Wrap(js, natstest.Hooks{Fail: func(method, _ string) error {
		if method == "ObjectStore" {
			return nats.ErrTimeout
		}
		return nil
	}})
	if _, err := bus.EnsureObjectStore(ctx, failing, want); !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("ensure while opening times out: err %v, want %v", err, nats.ErrTimeout)
	}
	if got := ttl("after a failed open"); got != time.Hour {
		t.Errorf("TTL after ensuring while opening times out: %v, want it left at 1h", got)
	}

	if err := js.DeleteObjectStore(ctx, want.Bucket); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureObjectStore(ctx, js, want); err != nil {
		t.Fatal(err)
	}
	if got := ttl("after creating"); got != 0 {
		t.Errorf("TTL of a created store: %v, want none", got)
	}
}
