package pusher

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/pilotwire/pilotwire/pkg/pushqueue"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// frontendQueues holds one push queue per frontend, each with its own
// throttle and dispatcher. Istio's PILOT_PUSH_THROTTLE bounds the pushes one
// istiod generates at once; here the frontend holding a connection
// generates its pushes, so the throttle applies per frontend and is sized
// from that frontend's cores (its heartbeat says how many), and frontends
// added to scale out add push capacity.
type frontendQueues struct {
	// set at construction
	throttle int                                                     // PILOT_PUSH_THROTTLE; 0: derived from each frontend's cores and rate
	window   time.Duration                                           // work in flight per frontend when sized by its rate
	run      func(ctx context.Context, q *pushqueue.Queue[*request]) // a dispatcher
	ctx      context.Context

	// guarded by mu; taken after Pusher.mu and before any Queue's lock
	// (the lock order is written down at Pusher.mu)
	mu     sync.Mutex
	byFE   map[string]*pushqueue.Queue[*request]
	cores  map[string]int     // each frontend's cores, from its heartbeat
	rates  map[string]float64 // each frontend's measured push rate, from its heartbeat
	closed bool               // shut down: no queue is made any more
	wg     sync.WaitGroup     // dispatchers
}

func newFrontendQueues(ctx context.Context, throttle int, window time.Duration, run func(context.Context, *pushqueue.Queue[*request])) *frontendQueues {
	return &frontendQueues{
		throttle: throttle, window: window, run: run, ctx: ctx,
		byFE: make(map[string]*pushqueue.Queue[*request]), cores: make(map[string]int), rates: make(map[string]float64),
	}
}

// throttleLocked is the frontend's throttle: PILOT_PUSH_THROTTLE if set,
// else sized from the frontend's cores and measured push rate (at least
// Istio's default for its cores; this process's cores until its heartbeat
// has said).
func (fq *frontendQueues) throttleLocked(fe string) int {
	if fq.throttle > 0 {
		return fq.throttle
	}
	cores := fq.cores[fe]
	if cores <= 0 {
		cores = runtime.GOMAXPROCS(0)
	}
	return pushqueue.ThrottleForRate(cores, fq.rates[fe], fq.window)
}

// setCapacity records what a frontend's heartbeat says of its capacity
// (cores, measured push rate) and resizes its throttle.
func (fq *frontendQueues) setCapacity(fe string, info *pb.FrontendInfo) {
	fq.mu.Lock()
	defer fq.mu.Unlock()
	if n := int(info.GetCores()); n > 0 {
		fq.cores[fe] = n
	}
	if r := info.GetPushRate(); r > 0 {
		fq.rates[fe] = r
	}
	if q, ok := fq.byFE[fe]; ok {
		q.SetMaxInFlight(fq.throttleLocked(fe))
	}
}

// get returns the frontend's queue, creating it and its dispatcher; nil
// once shut down, for a frontend that had none (the term is ending, and
// the next holder rebuilds the queues).
func (fq *frontendQueues) get(fe string) *pushqueue.Queue[*request] {
	fq.mu.Lock()
	defer fq.mu.Unlock()
	q, ok := fq.byFE[fe]
	if !ok && fq.closed {
		return nil
	}
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
	delete(fq.rates, fe)
	fq.mu.Unlock()
	if q != nil {
		q.ShutDown()
	}
}

// shutDown stops every queue taking work and returns a channel closed when
// every dispatcher has drained its queue.
func (fq *frontendQueues) shutDown() <-chan struct{} {
	fq.mu.Lock()
	fq.closed = true
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
