package debouncer

import (
	"context"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestIteratorEndRestartsWork (issue 12 row 4): when the consumer is
// deleted under the active instance its message iterator ends; the
// instance must restart its work (and so consume again), not keep the
// lease doing nothing.
func TestIteratorEndRestartsWork(t *testing.T) {
	_, js, _, a := activeDebouncer(t, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	publishChange(ctx, t, js, 0, false)
	waitPublished(ctx, t, js)
	waitCovered(t, js, 1)
	if err := js.DeleteConsumer(ctx, names.ChangesStream(), names.DebouncerConsumer()); err != nil {
		t.Fatal(err)
	}
	publishChange(ctx, t, js, 1, false)
	waitPublished(ctx, t, js)
	prs := waitCovered(t, js, 2)
	checkExactlyOnce(t, prs, 2)
	if got := testutil.Metric(a.reg, "pilotwire_debounce_restarts_total"); got == 0 {
		t.Errorf("pilotwire_debounce_restarts_total = 0, want the restart counted")
	}
	found := false
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		found = found || mf.GetName() == "pilotwire_debounce_last_consumed_age_seconds"
	}
	if !found {
		t.Error("no pilotwire_debounce_last_consumed_age_seconds gauge")
	}
}
