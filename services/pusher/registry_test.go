package pusher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
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

// TestSharedEDSIndexScopesAsItsOwn: connections whose only load
// assignment watch names the same list share one scoping index, and every
// connection, sharing or not, is scoped exactly as by an index of its own
// entry; an entry rewritten with other names is scoped by the new ones.
func TestSharedEDSIndexScopesAsItsOwn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	hosts := []string{"a.x", "b.x", "c.y", "d.y", "e.z"}
	list := func() []string {
		var out []string
		for _, h := range hosts {
			if rng.IntN(2) == 0 {
				out = append(out, "outbound|80||"+h+".svc.cluster.local")
			}
		}
		return out
	}
	lists := [][]string{list(), list(), list()}
	p := bareRegistryPusher()
	want := map[string]*pb.ConnectionInfo{}
	for round := range 3 {
		for i := range 40 {
			id := fmt.Sprintf("c%d", i)
			info := &pb.ConnectionInfo{ConnId: id, Frontend: "fe-1", SyncedSeq: 1, Watches: []*pb.Watch{{TypeUrl: resource.ClusterType, Wildcard: true}}}
			switch rng.IntN(5) {
			case 0: // two load assignment watches
				info.Watches = append(info.Watches, &pb.Watch{TypeUrl: resource.EndpointType, Names: lists[0]}, &pb.Watch{TypeUrl: resource.EndpointType, Names: lists[1]})
			case 1: // wildcard
				info.Watches = append(info.Watches, &pb.Watch{TypeUrl: resource.EndpointType, Wildcard: true, Names: lists[2]})
			case 2: // none
			default:
				info.Watches = append(info.Watches, &pb.Watch{TypeUrl: resource.EndpointType, Names: lists[rng.IntN(len(lists))]})
			}
			b, err := proto.Marshal(info)
			if err != nil {
				t.Fatal(err)
			}
			p.applyEntry(entry{key: bus.ConnKey("fe-1", id), value: b, rev: uint64(round*100 + i + 1)})
			want[id] = info
		}
		byList := map[*nameList]*edsWatches{}
		for id, info := range want {
			c := p.conns[id]
			for _, h := range hosts {
				name, ns, _ := strings.Cut(h, ".")
				r := newRequest(&pb.PushRequest{ThroughSeq: 2, ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: ns, Name: name}}}, zeroTime)
				if got, own := needsPush(c, r), needsPush(&connState{info: info}, r); got != own {
					t.Fatalf("round %d, %s, endpoints of %s: needsPush = %v, with an index of its own %v (watches %v)", round, id, h, got, own, info.GetWatches())
				}
			}
			if l := c.edsList; l != nil {
				if x, ok := byList[l]; ok && x != c.watchedEDS() {
					t.Errorf("round %d, %s: an index of its own for a shared list", round, id)
				}
				byList[l] = c.watchedEDS()
			}
		}
		if len(byList) == 0 {
			t.Fatalf("round %d: no connection shares a list", round)
		}
	}
}
