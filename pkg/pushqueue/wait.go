package pushqueue

// waiter is one blocked Dequeue. A waker removes it from Queue.waiters and
// sends on wake in the same critical section, so a waiter that is no longer
// on the list has exactly one wake-up buffered or already received.
type waiter struct {
	wake chan struct{} // capacity 1
}

// maxSpareWaiters bounds the waiters kept for reuse.
const maxSpareWaiters = 64

func (q *Queue[R]) newWaiterLocked() *waiter {
	if n := len(q.spare); n > 0 {
		w := q.spare[n-1]
		q.spare[n-1] = nil
		q.spare = q.spare[:n-1]
		return w
	}
	return &waiter{wake: make(chan struct{}, 1)}
}

// releaseLocked keeps w, off the list and with no wake-up pending, for
// reuse. w may be nil.
func (q *Queue[R]) releaseLocked(w *waiter) {
	if w != nil && len(q.spare) < maxSpareWaiters {
		q.spare = append(q.spare, w)
	}
}

// wakeOneLocked wakes the oldest waiter.
func (q *Queue[R]) wakeOneLocked() {
	w := q.waiters[0]
	n := copy(q.waiters, q.waiters[1:])
	q.waiters[n] = nil
	q.waiters = q.waiters[:n]
	w.wake <- struct{}{}
}

// dropWaiterLocked takes w off the list. It reports false if w was not on
// it, that is, if w was woken.
func (q *Queue[R]) dropWaiterLocked(w *waiter) bool {
	for i, x := range q.waiters {
		if x == w {
			n := copy(q.waiters[i:], q.waiters[i+1:])
			q.waiters[i+n] = nil
			q.waiters = q.waiters[:i+n]
			return true
		}
	}
	return false
}
