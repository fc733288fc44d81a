package pushqueue

import (
	"context"
	"errors"
	"sync"
)

// ErrShutdown is returned by Dequeue once the queue is shut down and no
// work is left to hand out.
var ErrShutdown = errors.New("pushqueue: shut down")

// Config configures a Queue.
type Config struct {
	// MaxInFlight caps the connections being processed (dequeued and not
	// yet marked done) at once; 0 or less means no limit. The pusher uses
	// DefaultThrottle unless PILOT_PUSH_THROTTLE says otherwise.
	MaxInFlight int
}

// MergeFunc merges a newer request from into an older one into and returns
// the result. It is called with the queue's lock held, so it must be quick
// and must not call the queue. It may modify and return into; the queue
// never uses into or from again.
type MergeFunc[R any] func(into, from R) R

// Queue is a per-connection push queue. See the package comment.
type Queue[R any] struct {
	// set at construction
	merge MergeFunc[R]
	final chan struct{} // closed once shut down with no work left to hand out

	mu sync.Mutex
	// guarded by mu
	maxInFlight int
	fifo        fifo                     // pending connections in order; may hold stale entries
	pending     map[string]pendingReq[R] // connections in the FIFO and their merged request
	processing  map[string]slot[R]       // dequeued, not yet marked done
	stale       int                      // stale entries in fifo
	slotted     int                      // processing entries whose slot holds a request
	gen         uint64                   // generation of the latest pending entry
	shutdown    bool
	finalClosed bool
	waiters     []*waiter // blocked Dequeue calls, oldest first
	spare       []*waiter // waiters kept for reuse
}

type pendingReq[R any] struct {
	req R
	gen uint64 // matches the connection's live FIFO entry
}

// slot holds what was enqueued for a connection while it was processing.
type slot[R any] struct {
	req R
	set bool
}

// New returns an empty queue that merges requests with merge.
func New[R any](cfg Config, merge MergeFunc[R]) *Queue[R] {
	if merge == nil {
		panic("pushqueue: nil MergeFunc")
	}
	return &Queue[R]{
		merge:       merge,
		maxInFlight: max(cfg.MaxInFlight, 0),
		final:       make(chan struct{}),
		pending:     make(map[string]pendingReq[R]),
		processing:  make(map[string]slot[R]),
	}
}

// Enqueue adds req for conn. If conn is processing, req is merged into its
// processing slot, which MarkDone puts back in the queue. If conn is
// pending, req is merged into its pending request and conn keeps its place.
// Otherwise conn joins the end of the FIFO. After ShutDown, Enqueue drops
// req and returns false.
func (q *Queue[R]) Enqueue(conn string, req R) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return false
	}
	if s, ok := q.processing[conn]; ok {
		if s.set {
			s.req = q.merge(s.req, req)
		} else {
			s = slot[R]{req: req, set: true}
			q.slotted++
		}
		q.processing[conn] = s
		return true
	}
	if p, ok := q.pending[conn]; ok {
		p.req = q.merge(p.req, req)
		q.pending[conn] = p
		return true
	}
	q.pushLocked(conn, req)
	q.signalLocked()
	return true
}

// Dequeue takes the connection at the head of the FIFO and its request and
// marks it processing, with an empty slot. It blocks while the FIFO is
// empty or MaxInFlight connections are processing. It returns ctx.Err() if
// ctx is done (even when work is available), and ErrShutdown once the queue
// is shut down and no work is left: nothing pending, and no processing slot
// that MarkDone would put back.
func (q *Queue[R]) Dequeue(ctx context.Context) (conn string, req R, err error) {
	var w *waiter
	q.mu.Lock()
	for {
		if err := ctx.Err(); err != nil {
			return q.failLocked(w, err)
		}
		if conn, req, ok := q.popLocked(); ok {
			q.releaseLocked(w)
			q.signalLocked()
			q.mu.Unlock()
			return conn, req, nil
		}
		if q.finalClosed {
			return q.failLocked(w, ErrShutdown)
		}
		if w == nil {
			w = q.newWaiterLocked()
		}
		q.waiters = append(q.waiters, w)
		q.mu.Unlock()
		select {
		case <-w.wake:
			// The waker took w off the list.
			q.mu.Lock()
			continue
		case <-q.final:
		case <-ctx.Done():
		}
		q.mu.Lock()
		if !q.dropWaiterLocked(w) {
			// Woken at the same time: take the wake-up (it was sent under
			// the lock, so it is there) and pass it on below.
			<-w.wake
		}
	}
}

// failLocked ends a Dequeue without work. It passes on a wake-up the call
// may have taken, then unlocks.
func (q *Queue[R]) failLocked(w *waiter, err error) (string, R, error) {
	q.releaseLocked(w)
	q.signalLocked()
	q.mu.Unlock()
	var zero R
	return "", zero, err
}

// TryDequeue is Dequeue without waiting: ok is false when Dequeue would
// block or return ErrShutdown.
func (q *Queue[R]) TryDequeue() (conn string, req R, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	conn, req, ok = q.popLocked()
	if ok {
		q.signalLocked()
	}
	return conn, req, ok
}

// MarkDone ends the processing of conn. If requests were enqueued for conn
// meanwhile, conn goes to the end of the FIFO with their merge. MarkDone
// for a connection that is not processing (never dequeued, or removed) does
// nothing.
func (q *Queue[R]) MarkDone(conn string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s, ok := q.processing[conn]
	if !ok {
		return
	}
	delete(q.processing, conn)
	if s.set {
		q.slotted--
		q.pushLocked(conn, s.req)
	}
	q.signalLocked()
}

// Remove drops a closed connection: its pending request and its processing
// slot are discarded, it no longer counts against MaxInFlight, and it is
// never handed out again. A later MarkDone for it does nothing. A later
// Enqueue for the same id adds it again as a new connection, so ids must
// not be reused while a worker may still call MarkDone for the old one:
// that MarkDone would end the new connection's processing. (pilotwire's
// connection ids are unique per stream.)
func (q *Queue[R]) Remove(conn string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.pending[conn]; ok {
		delete(q.pending, conn)
		q.stale++
		q.compactLocked()
	}
	if s, ok := q.processing[conn]; ok {
		if s.set {
			q.slotted--
		}
		delete(q.processing, conn)
	}
	q.signalLocked()
}

// SetMaxInFlight changes the cap on connections processing at once (0 or
// less: no limit). Lowering it hands out nothing until enough are done;
// connections already processing are not affected.
func (q *Queue[R]) SetMaxInFlight(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.maxInFlight = max(n, 0)
	q.signalLocked()
}

// Len is the number of connections pending in the FIFO. Connections
// processing with a filled slot are not counted until MarkDone.
func (q *Queue[R]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// InFlight is the number of connections processing.
func (q *Queue[R]) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.processing)
}

// ShutDown stops the queue from accepting requests. Work already queued is
// still handed out by Dequeue, which returns ErrShutdown once none is left.
// ShutDown is idempotent.
func (q *Queue[R]) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.signalLocked()
}

// pushLocked appends conn to the FIFO as pending with req.
func (q *Queue[R]) pushLocked(conn string, req R) {
	q.gen++
	q.pending[conn] = pendingReq[R]{req: req, gen: q.gen}
	q.fifo.push(entry{conn: conn, gen: q.gen})
}

// readyLocked reports whether a Dequeue can take work now.
func (q *Queue[R]) readyLocked() bool {
	return len(q.pending) > 0 && (q.maxInFlight == 0 || len(q.processing) < q.maxInFlight)
}

// popLocked takes the head of the FIFO if a Dequeue can take work now.
func (q *Queue[R]) popLocked() (string, R, bool) {
	if !q.readyLocked() {
		var zero R
		return "", zero, false
	}
	for {
		// Every pending connection has one live entry, so this ends.
		e := q.fifo.pop()
		p, ok := q.pending[e.conn]
		if !ok || p.gen != e.gen {
			q.stale--
			continue
		}
		delete(q.pending, e.conn)
		q.processing[e.conn] = slot[R]{}
		return e.conn, p.req, true
	}
}

// compactLocked drops stale FIFO entries once they outnumber live ones.
func (q *Queue[R]) compactLocked() {
	if q.stale < 64 || q.stale <= len(q.pending) {
		return
	}
	q.fifo.filter(func(e entry) bool {
		p, ok := q.pending[e.conn]
		return ok && p.gen == e.gen
	})
	q.stale = 0
}

// signalLocked is called after every change of state: it closes the
// shutdown channels when their condition holds and wakes one waiting
// Dequeue if one can take work. A woken Dequeue that takes work signals
// again, so wake-ups chain as long as work and waiters remain.
func (q *Queue[R]) signalLocked() {
	if q.shutdown {
		if !q.finalClosed && len(q.pending) == 0 && q.slotted == 0 {
			q.finalClosed = true
			close(q.final)
		}
	}
	if len(q.waiters) > 0 && q.readyLocked() {
		q.wakeOneLocked()
	}
}
