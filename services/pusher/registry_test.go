package pusher

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// TestRegistryWatchEndsWithItsContext: the registry watcher returns once
// its context ends, so a stopping pusher does not wait for it forever.
// With nats.go v1.55.0 this passes without watchRegistry's stopWatch too
// (the watcher's subscription follows the context it was made with); the
// hang commit 8e653b4 fixed came by a path this test does not reproduce.
func TestRegistryWatchEndsWithItsContext(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := bus.EnsureKV(ctx, js, names.RegistryConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	p := &Pusher{
		kv:        kv,
		log:       slog.New(slog.DiscardHandler),
		m:         newMetrics(prometheus.NewRegistry()),
		now:       time.Now,
		frontends: make(map[string]time.Time),
		conns:     make(map[string]*connState),
		inflight:  make(map[uint64]*inflight),
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ended := make(chan struct{})
	go func() { defer close(ended); p.watchRegistry(wctx) }()
	testutil.Eventually(t, "initial registry values read", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.synced
	})
	stop()
	timeout := time.NewTimer(testutil.DefaultTimeout)
	defer timeout.Stop()
	select {
	case <-ended:
	case <-timeout.C:
		t.Fatalf("watchRegistry still running %v after its context ended", testutil.DefaultTimeout)
	}
}
