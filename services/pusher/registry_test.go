package pusher

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
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
	p := bareRegistryPusher()
	p.kv = kv
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

// TestRegistryEntriesShareStrings: the pusher keeps each connection's
// entry as the frontend wrote it, with the strings the fleet repeats
// (resource names, versions) held once across connections.
func TestRegistryEntriesShareStrings(t *testing.T) {
	p := bareRegistryPusher()
	entries := sidecarEntries(t, 2)
	for _, e := range entries {
		p.applyEntry(e)
	}
	var infos []*pb.ConnectionInfo
	for i, e := range entries {
		want := &pb.ConnectionInfo{}
		if err := proto.Unmarshal(e.value, want); err != nil {
			t.Fatal(err)
		}
		c := p.conns[want.GetConnId()]
		if c == nil {
			t.Fatalf("entry %d: connection %s not known", i, want.GetConnId())
		}
		if !proto.Equal(c.info, want) {
			t.Fatalf("entry %d kept as %v, want %v", i, c.info, want)
		}
		infos = append(infos, c.info)
	}
	a, b := infos[0].GetWatches()[1], infos[1].GetWatches()[1]
	for i := range a.GetNames() {
		if unsafe.StringData(a.GetNames()[i]) != unsafe.StringData(b.GetNames()[i]) {
			t.Fatalf("name %q held twice", a.GetNames()[i])
		}
	}
	if unsafe.StringData(a.GetAckedVersion()) != unsafe.StringData(b.GetAckedVersion()) {
		t.Error("the acked version is held twice")
	}
}
