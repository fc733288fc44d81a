package pusher

import (
	"context"
	"sync"

	"github.com/pilotwire/pilotwire/pkg/pushqueue"
)

// frontendQueues holds one push queue per frontend, each with its own
// throttle and dispatcher. Istio's PILOT_PUSH_THROTTLE bounds the pushes one
// istiod generates at once; here the frontend holding a connection
// generates its pushes, so the throttle applies per frontend and is sized
// from that frontend's cores (its heartbeat says how many), and frontends
// added to scale out add push capacity.
type frontendQueues struct {
	// set at construction
	throttle int                                                     // PILOT_PUSH_THROTTLE; 0: derived from each frontend's cores
	run      func(ctx context.Context, q *pushqueue.Queue[*request]) // a dispatcher
	ctx      context.Context

	// guarded by mu; taken after Pusher.mu and before any Queue's lock
	// (the lock order is written down at Pusher.mu)
	mu    sync.Mutex
	byFE  map[string]*pushqueue.Queue[*request]
	cores map[string]int // each frontend's cores, from its heartbeat
	wg    sync.WaitGroup // dispatchers
}

func newFrontendQueues(ctx context.Context, throttle int, run func(context.Context, *pushqueue.Queue[*request])) *frontendQueues {
	return &frontendQueues{throttle: throttle, run: run, ctx: ctx, byFE: make(map[string]*pushqueue.Queue[*request]), cores: make(map[string]int)}
}

// throttleLocked is the frontend's throttle: PILOT_PUSH_THROTTLE if set,
// else Istio's default for the frontend's cores, or for this process's
// until its heartbeat has said.
func (fq *frontendQueues) throttleLocked(fe string) int {
	if fq.throttle > 0 {
		return fq.throttle
	}
	if n := fq.cores[fe]; n > 0 {
		return pushqueue.ThrottleFor(n)
	}
	return pushqueue.DefaultThrottle()
}

// setCores records a frontend's cores and resizes its throttle.
func (fq *frontendQueues) setCores(fe string, cores int) {
	fq.mu.Lock()
	defer fq.mu.Unlock()
	if cores <= 0 || fq.cores[fe] == cores {
		return
	}
	fq.cores[fe] = cores
	if q, ok := fq.byFE[fe]; ok {
		q.SetMaxInFlight(fq.throttleLocked(fe))
	}
}

// get returns the frontend's queue, creating it and its dispatcher.
func (fq *frontendQueues) get(fe string) *pushqueue.Queue[*request] {
	fq.mu.Lock()
	defer fq.mu.Unlock()
	q, ok := fq.byFE[fe]
	if !ok {
		q = pushqueue.New(pushqueue.Config{MaxInFlight: fq.throttleLocked(fe)}, (*request).Merge)
		fq.byFE[fe] = q
		fq.wg.Add(1)
		go func() {
			defer fq.wg.Done()
			fq.run(fq.ctx, q)
		}()
	}
	return q
}

// lookup returns the frontend's queue or nil.
func (fq *frontendQueues) lookup(fe string) *pushqueue.Queue[*request] {
	fq.mu.Lock()
	defer fq.mu.Unlock()
	return fq.byFE[fe]
}

// drop shuts a dead frontend's queue down; its dispatcher ends once what
// it handed out is done or removed.
func (fq *frontendQueues) drop(fe string) {
	fq.mu.Lock()
	q := fq.byFE[fe]
	delete(fq.byFE, fe)
	delete(fq.cores, fe)
	fq.mu.Unlock()
	if q != nil {
		q.ShutDown()
	}
}

// shutDown stops every queue taking work and returns a channel closed when
// every dispatcher has drained its queue.
func (fq *frontendQueues) shutDown() <-chan struct{} {
	fq.mu.Lock()
	for _, q := range fq.byFE {
		q.ShutDown()
	}
	fq.mu.Unlock()
	done := make(chan struct{})
	go func() {
		fq.wg.Wait()
		close(done)
	}()
	return done
}

// totals sums pending and in-flight connections over every queue.
func (fq *frontendQueues) totals() (pending, inFlight int) {
	fq.mu.Lock()
	defer fq.mu.Unlock()
	for _, q := range fq.byFE {
		pending += q.Len()
		inFlight += q.InFlight()
	}
	return pending, inFlight
}
