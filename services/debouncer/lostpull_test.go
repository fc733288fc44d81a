package debouncer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestLostPullRequestIsReissued (fault matrix, 18:27 run: the debouncer
// consumed nothing for 30 s of a quiet cluster, then logged "next change:
// nats: no heartbeat received"): a pull request the server never gets
// leaves a pull consumer waiting for messages that are not coming until it
// misses two idle heartbeats. With nats.go's defaults (30 s pulls, 15 s
// heartbeats) that is 30 s without a push. The test loses one for real:
// the server refuses the debouncer's next pull (its permission to publish
// pull requests is taken away until one is refused, then given back). A
// change published then must be pushed well within nats.go's 30 s; before
// the fix it took about 30 s and the test failed at its 15 s bound.
func TestLostPullRequestIsReissued(t *testing.T) {
	srv := natstest.StartPullRefuser(t)
	url := srv.URL()
	adminNC, js := srv.Admin(t)
	setupStreams(t, js)

	// No snapshotter: its reads would race the server's reload too.
	quickActiveOn(t, url, url, func(c *Config) { c.LeaseTTL = time.Minute }, srv.ServiceOptions()...)
	// PushRequests are watched on a plain subscription: reading them back
	// from the stream (direct gets) would race the server's reload of its
	// options, which an in-process server's direct gets read unlocked.
	var mu sync.Mutex
	covered := map[uint64]bool{}
	sub, err := adminNC.Subscribe(names.PushesSubject(), func(m *nats.Msg) {
		pr := &pb.PushRequest{}
		if err := proto.Unmarshal(m.Data, pr); err != nil {
			t.Errorf("push request: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range pr.GetCovered() {
			for s := r.GetFirst(); s <= r.GetLast(); s++ {
				covered[s] = true
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	nCovered := func() int { mu.Lock(); defer mu.Unlock(); return len(covered) }
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	publishChange(ctx, t, js, 1, false)
	testutil.Eventually(t, "the first change pushed", func() bool { return nCovered() == 1 })

	// Lose the next pull request: it is refused when the one waiting at
	// the server expires and the consumer asks again.
	srv.Refuse(t, true)
	testutil.Eventually(t, "a pull request refused", func() bool { return srv.Refused() > 0 })
	srv.Refuse(t, false)

	publishChange(ctx, t, js, 2, false)
	// nats.go's default pull waits 30 s to notice the lost one.
	testutil.EventuallyWithin(t, 15*time.Second, "the change published after the lost pull request pushed", func() bool { return nCovered() >= 2 })
}
