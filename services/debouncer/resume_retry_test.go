package debouncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// failingLookupStream is a CHANGES stream whose consumer lookup fails
// while fails is above zero, as it does while the stream's or the
// consumer's raft group elects a leader after a NATS node is lost.
type failingLookupStream struct {
	jetstream.Stream
	fails *atomic.Int32
}

func (s failingLookupStream) Consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, context.DeadlineExceeded
	}
	return s.Stream.Consumer(ctx, name)
}

// TestResumeRetriedWithinTheTerm (fault matrix, "kill -9 the PW_CHANGES
// leader"): the new active instance's first look at its durable consumer
// timed out while PW_CHANGES elected a leader. That cost the whole term:
// the lease was given up and a standby took over seconds later. The
// resume is now retried within the term, so the instance that holds the
// lease goes on at once.
func TestResumeRetriedWithinTheTerm(t *testing.T) {
	url := natstest.Start(t)
	nc, js := natstest.Connect(t, url)
	setupStreams(t, js)
	var fails atomic.Int32
	fails.Store(1)
	wrapped := natstest.Wrap(js, natstest.Hooks{
		Stream: func(s jetstream.Stream) jetstream.Stream {
			if s.CachedInfo().Config.Name != names.ChangesStream() {
				return s
			}
			return failingLookupStream{Stream: s, fails: &fails}
		},
	})
	a := startOn(t, nc, wrapped, url, "a", func(c *Config) { c.Debounce.DebounceAfter = 20 * time.Millisecond })
	testutil.Eventually(t, "a active", a.leader)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	publishChange(ctx, t, js, 0, false)
	waitPublished(ctx, t, js)
	checkExactlyOnce(t, waitCovered(t, js, 1), 1)
	if got := testutil.Metric(a.reg, "pilotwire_debounce_restarts_total"); got != 0 {
		t.Errorf("pilotwire_debounce_restarts_total = %v, want 0 (retried within the term)", got)
	}
	if got := testutil.Metric(a.reg, "pilotwire_debounce_resume_retries_total"); got != 1 {
		t.Errorf("pilotwire_debounce_resume_retries_total = %v, want 1", got)
	}
}
