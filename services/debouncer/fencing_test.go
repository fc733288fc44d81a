package debouncer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/debounce"
)

// TestPausedHolderIsFenced (issue 12 row 5): the active instance is paused
// with a PushRequest on its way out; its lease lapses and the standby
// takes over and publishes. When the paused instance resumes, its stale
// publish must be rejected: no change is in two requests.
func TestPausedHolderIsFenced(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	dcfg := debounce.DefaultConfig()
	dcfg.DebounceAfter = 200 * time.Millisecond
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := startWith(t, url, "a", func(c *Config) {
		c.Debounce = dcfg
		c.hooks = &testHooks{publishCtx: func(ctx context.Context) context.Context {
			first := false
			once.Do(func() { first = true })
			if !first {
				return ctx
			}
			close(paused)
			<-resume
			// The process was stopped inside the publish, past its own
			// checks of the lease: the bytes go out when it resumes.
			return context.WithoutCancel(ctx)
		}}
	})
	testutil.Eventually(t, "a active", a.leader)
	b := startDebouncer(t, url, "b", dcfg)
	const n = 100
	for i := range n / 2 {
		publishChange(ctx, t, js, i, false)
	}
	waitPublished(ctx, t, js)
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("a never published")
	}
	for i := n / 2; i < n; i++ {
		publishChange(ctx, t, js, i, false)
	}
	waitPublished(ctx, t, js)
	// a is paused past the TTL: its lease lapses and moves on (here a
	// write by no one in particular, which a standby takes over as silent).
	kv, err := js.KeyValue(ctx, names.LeaseBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "debouncer", []byte("lapsed")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "b active", b.leader)
	waitCovered(t, js, n)
	close(resume)
	testutil.Eventually(t, "a's stale publish answered", func() bool {
		return testutil.Metric(a.reg, "pilotwire_debounce_push_requests_total")+testutil.Metric(a.reg, "pilotwire_debounce_fenced_total") > 0
	})
	prs := pushRequests(t, js)
	checkExactlyOnce(t, prs, n)
	if got := testutil.Metric(a.reg, "pilotwire_debounce_push_requests_total"); got != 0 {
		t.Errorf("the paused ex-holder published %v requests, want 0", got)
	}
}
