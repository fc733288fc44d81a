package pusher

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// purgeFailKV is a registry bucket whose removals fail while failing is
// set, as they do while the bucket's stream has no leader.
type purgeFailKV struct {
	jetstream.KeyValue
	failing *atomic.Bool
}

func (kv purgeFailKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if kv.failing.Load() {
		return errors.New("nats: no response from stream")
	}
	return kv.KeyValue.Purge(ctx, key, opts...)
}

// TestForgottenFrontendRelearnedOnHeartbeat: a frontend whose heartbeats
// stop reaching the registry (its stream lost its leader, as when the NATS
// node leading it is killed) is forgotten with its connections, and the
// pusher's cleanup of its entries fails for the same reason. The frontend
// never sees its entry removed, so it does not register its connections
// again; once its heartbeats come back the pusher must learn them from the
// registry, or those proxies never get a push again (found by the fault
// matrix: a third of the proxies stuck after the PW_CHANGES leader was
// killed).
func TestForgottenFrontendRelearnedOnHeartbeat(t *testing.T) {
	url := natstest.Start(t)
	var failing atomic.Bool
	h := runPusherFault(t, url, Config{FrontendTimeout: time.Second}, names.RegistryBucket(), func(kv jetstream.KeyValue) jetstream.KeyValue {
		return purgeFailKV{KeyValue: kv, failing: &failing}
	})
	testutil.Eventually(t, "pusher active", func() bool { return h.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c1", 0)
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })

	failing.Store(true)
	testutil.Eventually(t, "frontend forgotten", func() bool { return h.metric("pilotwire_pusher_connections") == 0 })
	if _, err := fe.kv.Get(context.Background(), bus.ConnKey("fe-1", "c1")); err != nil {
		t.Fatalf("the connection's entry should have survived the failed cleanup: %v", err)
	}
	// Heartbeats resume: the connection is known again, and its entry is
	// kept once the registry takes removals again (the pusher retries
	// its cleanup only while it has not heard from the frontend).
	fe.heartbeat()
	testutil.Eventually(t, "connection read back", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	failing.Store(false)
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "connection pushed after the frontend came back", func() bool {
		fe.heartbeat()
		return equal(fe.ordersFor("c1"), []uint64{2})
	})
}

// purgeHookKV runs hook before every removal; a non-nil error from it is
// the removal's result.
type purgeHookKV struct {
	jetstream.KeyValue
	hook func(key string) error
}

func (kv purgeHookKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if err := kv.hook(key); err != nil {
		return err
	}
	return kv.KeyValue.Purge(ctx, key, opts...)
}

// TestDeadFrontendCleanupKeepsEntriesOfALiveOne: the cleanup of a frontend
// timed out for a silent heartbeat must not remove its connection entries
// unless its own entry was removed first (which the frontend notices, and
// then writes its connections again). Found by the fault matrix after the
// PW_CHANGES leader was killed: the registry lost its leader, the removal
// of the frontend's entry failed, the bucket came back during the cleanup
// and 103 of its 167 connection entries were removed. The frontend, whose
// entry was still there, never wrote them again, and the pusher read back
// only 64 when it heard from it again: 103 proxies were never pushed.
func TestDeadFrontendCleanupKeepsEntriesOfALiveOne(t *testing.T) {
	url := natstest.Start(t)
	var failFrontendKey atomic.Bool
	h := runPusherFault(t, url, Config{FrontendTimeout: time.Second}, names.RegistryBucket(), func(kv jetstream.KeyValue) jetstream.KeyValue {
		return purgeHookKV{KeyValue: kv, hook: func(key string) error {
			if failFrontendKey.Load() && key == bus.FrontendKey("fe-1") {
				return errors.New("nats: no response from stream")
			}
			return nil
		}}
	})
	testutil.Eventually(t, "pusher active", func() bool { return h.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c1", 0)
	fe.register("c2", 0)
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == 2 })

	failFrontendKey.Store(true)
	testutil.Eventually(t, "frontend forgotten", func() bool { return h.metric("pilotwire_pusher_connections") == 0 })
	// Two failed removals of the frontend's entry: the first cleanup pass
	// is over, and it is retried.
	testutil.Eventually(t, "cleanup tried twice", func() bool { return h.metric("pilotwire_pusher_registry_errors_total") >= 2 })
	for _, c := range []string{"c1", "c2"} {
		if _, err := fe.kv.Get(context.Background(), bus.ConnKey("fe-1", c)); err != nil {
			t.Errorf("connection %s: entry removed although its frontend's entry stayed: %v", c, err)
		}
	}
	failFrontendKey.Store(false)

	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "both connections pushed after the frontend came back", func() bool {
		fe.heartbeat()
		return equal(fe.ordersFor("c1"), []uint64{2}) && equal(fe.ordersFor("c2"), []uint64{2})
	})
}

// TestDeadFrontendCleanupKeepsReRegisteredEntries: once the cleanup has
// removed a frontend's entry, the frontend (alive after all) sees it gone
// and writes its connections again; the cleanup, still under way, must
// not remove those new entries: it removes only the revisions it knew.
func TestDeadFrontendCleanupKeepsReRegisteredEntries(t *testing.T) {
	url := natstest.Start(t)
	var fe *fakeFrontend
	var armed atomic.Bool
	h := runPusherFault(t, url, Config{FrontendTimeout: time.Second}, names.RegistryBucket(), func(kv jetstream.KeyValue) jetstream.KeyValue {
		return purgeHookKV{KeyValue: kv, hook: func(key string) error {
			if key == bus.ConnKey("fe-1", "c1") && armed.CompareAndSwap(true, false) {
				// The frontend re-registers between the removal of its
				// entry and that of its connection's.
				fe.register("c1", 0)
			}
			return nil
		}}
	})
	testutil.Eventually(t, "pusher active", func() bool { return h.metric("pilotwire_pusher_leader") == 1 })
	fe = newFrontend(t, url, "fe-1")
	fe.register("c1", 0)
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	armed.Store(true)
	testutil.Eventually(t, "cleanup reached the connection", func() bool { return !armed.Load() })
	testutil.Eventually(t, "frontend entry removed", func() bool {
		_, err := fe.kv.Get(context.Background(), bus.FrontendKey("fe-1"))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := fe.kv.Get(context.Background(), bus.ConnKey("fe-1", "c1")); err != nil {
		t.Fatalf("the re-registered connection's entry was removed: %v", err)
	}
	fe.heartbeat()
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "re-registered connection pushed", func() bool {
		fe.heartbeat()
		return equal(fe.ordersFor("c1"), []uint64{2})
	})
}
