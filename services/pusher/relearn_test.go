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
	failing.Store(false)

	// Heartbeats resume (each poll is one); the connection is known again
	// and pushed.
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "connection pushed after the frontend came back", func() bool {
		fe.heartbeat()
		return equal(fe.ordersFor("c1"), []uint64{2})
	})
}
