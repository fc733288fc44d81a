package debouncer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestTakeOverFailureDoesNotReplayHistory (issue 12 row 3): the new holder
// fails right after deleting the old consumer (a crash or a lost lease in
// that gap). The next holder must still start from the floor, not replay
// the whole change stream.
func TestTakeOverFailureDoesNotReplayHistory(t *testing.T) {
	url, js, dcfg, a := activeDebouncer(t, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const n = 200
	for i := range n {
		publishChange(ctx, t, js, i, false)
	}
	waitPublished(ctx, t, js)
	waitCovered(t, js, n)
	testutil.Eventually(t, "every change acked", func() bool {
		c, err := js.Consumer(ctx, names.ChangesStream(), names.DebouncerConsumer())
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream == n
	})
	if err := a.stop(); err != nil {
		t.Fatalf("a: %v", err)
	}

	failed := make(chan struct{})
	var once sync.Once
	b := startWith(t, url, "b", func(c *Config) {
		c.Debounce = dcfg
		c.hooks = &testHooks{afterConsumerDelete: func() error {
			err := error(nil)
			once.Do(func() {
				close(failed)
				err = errors.New("injected: failure after the old consumer was deleted")
			})
			return err
		}}
	})
	select {
	case <-failed:
	case <-ctx.Done():
		t.Fatal("b never took over")
	}
	c := startDebouncer(t, url, "c", dcfg)
	publishChange(ctx, t, js, n, false)
	waitPublished(ctx, t, js)
	prs := waitCovered(t, js, n+1)
	checkExactlyOnce(t, prs, n+1)
	replayed := testutil.Metric(b.reg, "pilotwire_debounce_redeliveries_skipped_total") +
		testutil.Metric(c.reg, "pilotwire_debounce_redeliveries_skipped_total")
	if replayed != 0 {
		t.Errorf("the next holder replayed %v changes already published, want 0 (it must start above the floor)", replayed)
	}
}
