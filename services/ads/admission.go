package ads

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// admission decides when a new stream is served. Instead of refusing
// beyond a fixed rate (which sends a fleet connecting at once into
// Envoy's backoff, up to 30 s), a new stream waits for one of a bounded
// number of syncing slots: a slot is held from admission until the
// client's first ACK (the server answered and the client applied it), or
// for at most hold. The frontend thus admits streams exactly as fast as it
// serves their first exchange, faster on more or idler cores, slower when
// busy, and the streams it already serves are never starved by a storm.
// Only a stream that waited longer than maxWait, or found maxWaiting
// streams already waiting, is refused (ResourceExhausted). An optional
// fixed rate (NewStreamRate) still refuses beyond it, for operators who
// want one.
type admission struct {
	// set at construction
	slots      chan struct{} // one token per syncing stream; nil: no slot limit
	maxWait    time.Duration
	hold       time.Duration
	maxWaiting int64
	limiter    *rate.Limiter // nil: no fixed rate
	m          *metrics

	waiting atomic.Int64
}

// newAdmission returns the admission of a frontend; syncing 0 means no
// slot limit.
func newAdmission(syncing int, maxWait, hold time.Duration, maxWaiting int, limiter *rate.Limiter, m *metrics) *admission {
	a := &admission{maxWait: maxWait, hold: hold, maxWaiting: int64(maxWaiting), limiter: limiter, m: m}
	if syncing > 0 {
		a.slots = make(chan struct{}, syncing)
	}
	return a
}

// admit waits until the stream may be served and returns the release of
// its slot (idempotent; also called when hold passes). It fails at once
// while draining, beyond the fixed rate or the waiting bound, and after
// maxWait.
func (a *admission) admit(ctx context.Context, draining <-chan struct{}) (func(), error) {
	select {
	case <-draining:
		return nil, status.Error(codes.Unavailable, "frontend draining: connect to another frontend")
	default:
	}
	if a == nil {
		return func() {}, nil
	}
	if a.limiter != nil && !a.limiter.Allow() {
		return nil, a.refuse("too many new xDS streams on this frontend: retry with backoff")
	}
	if a.slots == nil {
		return func() {}, nil
	}
	select {
	case a.slots <- struct{}{}:
		return a.releaser(), nil
	default:
	}
	if a.waiting.Add(1) > a.maxWaiting && a.maxWaiting > 0 {
		a.waiting.Add(-1)
		return nil, a.refuse("too many xDS streams waiting to be admitted on this frontend: retry with backoff")
	}
	a.m.admitWaiting.Inc()
	defer func() { a.waiting.Add(-1); a.m.admitWaiting.Dec() }()
	start := time.Now()
	t := time.NewTimer(a.maxWait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		a.m.admitWait.Observe(time.Since(start).Seconds())
		return a.releaser(), nil
	case <-t.C:
		return nil, a.refuse("waited too long to be admitted on this frontend: retry with backoff")
	case <-draining:
		return nil, status.Error(codes.Unavailable, "frontend draining: connect to another frontend")
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (a *admission) refuse(msg string) error {
	a.m.admitRejects.Inc()
	return status.Error(codes.ResourceExhausted, msg)
}

// releaser frees a taken slot once: at the stream's first ACK, its end,
// or after hold, whichever comes first.
func (a *admission) releaser() func() {
	var once sync.Once
	release := func() { once.Do(func() { <-a.slots }) }
	// Not stopped on release: firing after it does nothing.
	time.AfterFunc(a.hold, release)
	return release
}
