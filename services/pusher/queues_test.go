package pusher

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/pushqueue"
)

// TestQueueAfterShutDownTakesNoWork (found by the race detector in a
// stressed TestDrainKeepsTheLease): the registry watch loaded a frontend
// after the active term had begun its shutdown, and its queue was made
// then, with a dispatcher of its own. That queue was never shut down (it
// took work the drain did not wait for), and starting its dispatcher
// added to the dispatchers' WaitGroup while shutDown waited on it. After
// shutDown, no queue is made and no work is taken.
func TestQueueAfterShutDownTakesNoWork(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dispatchers atomic.Int32
	fq := newFrontendQueues(ctx, 10, 0, func(ctx context.Context, q *pushqueue.Queue[*request]) {
		dispatchers.Add(1)
		for {
			if _, _, err := q.Dequeue(ctx); err != nil {
				return
			}
		}
	})
	fq.get("fe-a")
	testutil.Receive(t, fq.shutDown(), "the dispatchers drained")
	if q := fq.get("fe-b"); q != nil && q.Enqueue("c", catchUp(1, time.Now())) {
		t.Error("a queue made after shutDown took work")
	}
	if n := dispatchers.Load(); n != 1 {
		t.Errorf("dispatchers started = %d, want 1: none after shutDown", n)
	}
}
