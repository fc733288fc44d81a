package debouncer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/debounce"
)

// TestDeliveriesLostInTransitArePushed (fault matrix, clean-clone CI of
// 2026-12-03 08:52: "kill -9 one NATS node" left change sequences 704 and
// 705 in no PushRequest): the server delivered two changes to the
// debouncer's pull request, the connection died with them in flight, and
// after the reconnect the next change came. The debouncer took "delivered
// in stream order" to mean every sequence under the newest was carried,
// published complete_through_seq past the two, and a take-over resumed
// above them: no push ever carried them. Here the two are lost for real,
// in a proxy that drops what the server sends until the connection is
// cut. They must be pushed well within the consumer's ack wait (50 s),
// every change exactly once, and no request may claim complete through a
// sequence no request carried.
func TestDeliveriesLostInTransitArePushed(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	px := natstest.NewDropProxy(t, strings.TrimPrefix(url, "nats://"))
	quickActiveOn(t, "nats://"+px.Addr(), url, nil, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	for i := 1; i <= 3; i++ {
		publishChange(ctx, t, js, i, false)
	}
	waitCovered(t, js, 3)

	// Changes 4 and 5 are delivered into the hole.
	px.Drop(true)
	publishChange(ctx, t, js, 4, false)
	publishChange(ctx, t, js, 5, false)
	cons, err := js.Consumer(ctx, names.ChangesStream(), names.DebouncerConsumer())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "changes 4 and 5 delivered", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.Delivered.Stream >= 5
	})
	px.Cut()
	publishChange(ctx, t, js, 6, false)

	// The consumer redelivers lost changes only after its 50 s ack wait.
	testutil.EventuallyWithin(t, 15*time.Second, "changes 1–6 covered", func() bool { return len(coverage(pushRequests(t, js))) >= 6 })
	prs := pushRequests(t, js)
	checkExactlyOnce(t, prs, 6)
	carried := map[uint64]bool{}
	for _, pr := range prs {
		for _, r := range pr.GetCovered() {
			for s := r.GetFirst(); s <= r.GetLast(); s++ {
				carried[s] = true
			}
		}
		for s := uint64(1); s <= pr.GetCompleteThroughSeq(); s++ {
			if !carried[s] {
				t.Errorf("push request through %d claims complete through %d, but no request so far carried %d", pr.GetThroughSeq(), pr.GetCompleteThroughSeq(), s)
				break
			}
		}
	}
}

// quickActiveOn connects to clientURL with opts and runs debouncer "a" on
// that connection (10 ms quiet, no snapshotter, then mod), until active.
func quickActiveOn(t *testing.T, clientURL, url string, mod func(*Config), opts ...nats.Option) *instance {
	t.Helper()
	nc, err := nats.Connect(clientURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	djs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dcfg := debounce.DefaultConfig()
	dcfg.DebounceAfter = 10 * time.Millisecond
	a := startOn(t, nc, djs, url, "a", func(c *Config) {
		c.Debounce, c.SnapshotInterval = dcfg, -1
		if mod != nil {
			mod(c)
		}
	})
	testutil.Eventually(t, "a active", a.leader)
	return a
}
