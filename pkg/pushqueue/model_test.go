package pushqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// refQueue is the reference model: the rules of the package comment
// written as plainly as possible, single-threaded, with no care for cost.
type refQueue struct {
	maxInFlight int
	order       []string         // pending connections, FIFO
	pending     map[string]reqs  // their requests
	processing  map[string]*reqs // processing connections; nil slot = empty
	shutdown    bool
}

func newRef(maxInFlight int) *refQueue {
	return &refQueue{maxInFlight: maxInFlight, pending: map[string]reqs{}, processing: map[string]*reqs{}}
}

func (r *refQueue) enqueue(conn string, req reqs) bool {
	if r.shutdown {
		return false
	}
	if s, ok := r.processing[conn]; ok {
		if s == nil {
			r.processing[conn] = &req
		} else {
			*s = mergeReqs(*s, req)
		}
		return true
	}
	if p, ok := r.pending[conn]; ok {
		r.pending[conn] = mergeReqs(p, req)
		return true
	}
	r.pending[conn] = req
	r.order = append(r.order, conn)
	return true
}

func (r *refQueue) tryDequeue() (string, reqs, bool) {
	if len(r.order) == 0 || (r.maxInFlight > 0 && len(r.processing) >= r.maxInFlight) {
		return "", nil, false
	}
	conn := r.order[0]
	r.order = r.order[1:]
	req := r.pending[conn]
	delete(r.pending, conn)
	r.processing[conn] = nil
	return conn, req, true
}

func (r *refQueue) markDone(conn string) {
	s, ok := r.processing[conn]
	if !ok {
		return
	}
	delete(r.processing, conn)
	if s != nil {
		r.pending[conn] = *s
		r.order = append(r.order, conn)
	}
}

func (r *refQueue) remove(conn string) {
	delete(r.pending, conn)
	r.order = slices.DeleteFunc(r.order, func(c string) bool { return c == conn })
	delete(r.processing, conn)
}

// finished reports whether Dequeue must return ErrShutdown: shut down, and
// no work pending or waiting in a processing slot.
func (r *refQueue) finished() bool {
	if !r.shutdown || len(r.order) > 0 {
		return false
	}
	for _, s := range r.processing {
		if s != nil {
			return false
		}
	}
	return true
}

// view is the full observable state, for comparing the Queue with the
// model.
type view struct {
	Order      []string
	Pending    map[string]reqs
	Processing map[string]reqs // empty slot = nil
	Len        int
	InFlight   int
}

func (r *refQueue) view() view {
	v := view{
		Order:      slices.Clip(slices.Clone(r.order)),
		Pending:    map[string]reqs{},
		Processing: map[string]reqs{},
		Len:        len(r.order),
		InFlight:   len(r.processing),
	}
	if len(v.Order) == 0 {
		v.Order = nil
	}
	for c, p := range r.pending {
		v.Pending[c] = p
	}
	for c, s := range r.processing {
		if s == nil {
			v.Processing[c] = nil
		} else {
			v.Processing[c] = *s
		}
	}
	return v
}

// viewOf reads the Queue's internals, checking its bookkeeping on the way.
func viewOf(q *Queue[reqs]) (view, error) {
	v := view{Pending: map[string]reqs{}, Processing: map[string]reqs{}, Len: q.Len(), InFlight: q.InFlight()}
	q.mu.Lock()
	defer q.mu.Unlock()
	stale := 0
	for _, e := range q.fifo.items[q.fifo.head:] {
		if p, ok := q.pending[e.conn]; ok && p.gen == e.gen {
			v.Order = append(v.Order, e.conn)
		} else {
			stale++
		}
	}
	if stale != q.stale {
		return v, fmt.Errorf("%d stale FIFO entries, bookkeeping says %d", stale, q.stale)
	}
	if len(v.Order) != len(q.pending) {
		return v, fmt.Errorf("%d live FIFO entries for %d pending connections", len(v.Order), len(q.pending))
	}
	for c, p := range q.pending {
		v.Pending[c] = p.req
	}
	slotted := 0
	for c, s := range q.processing {
		if s.set {
			slotted++
			v.Processing[c] = s.req
		} else {
			v.Processing[c] = nil
		}
	}
	if slotted != q.slotted {
		return v, fmt.Errorf("%d filled slots, bookkeeping says %d", slotted, q.slotted)
	}
	return v, nil
}

// TestModel applies random operations to a Queue and to the reference
// model and compares every result and the whole observable state after
// each operation.
func TestModel(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range uint64(seeds) {
		if err := runModel(t, seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func runModel(t *testing.T, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0xbeef))
	maxInFlight := []int{0, 1, 2, 5}[rng.IntN(4)]
	// Few connections exercise merging; many, with rare dequeues and
	// frequent removals, exercise the FIFO's stale-entry compaction.
	conns := make([]string, 1+rng.IntN([]int{12, 12, 200}[rng.IntN(3)]))
	var weights [5]int // enqueue, dequeue, done, remove, other
	for i := range weights {
		weights[i] = 1 + rng.IntN(40)
	}
	for i := range conns {
		conns[i] = fmt.Sprintf("c%d", i)
	}
	q := newTestQueue(maxInFlight)
	ref := newRef(maxInFlight)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	nextID := 0
	ops := 200 + rng.IntN(2000)
	for i := range ops {
		conn := conns[rng.IntN(len(conns))]
		var what string
		k, total := rng.IntN(sum(weights[:])), 0
		pick := func(i int) bool { total += weights[i]; return k < total }
		switch {
		case pick(0):
			nextID++
			what = fmt.Sprintf("Enqueue(%s, %d)", conn, nextID)
			got, want := q.Enqueue(conn, reqs{nextID}), ref.enqueue(conn, reqs{nextID})
			if got != want {
				return fmt.Errorf("op %d %s = %v, want %v", i, what, got, want)
			}
		case pick(1):
			what = "TryDequeue()"
			gc, gr, gok := q.TryDequeue()
			wc, wr, wok := ref.tryDequeue()
			if gc != wc || gok != wok || !slices.Equal(gr, wr) {
				return fmt.Errorf("op %d %s = %s %v %v, want %s %v %v", i, what, gc, gr, gok, wc, wr, wok)
			}
		case pick(2):
			what = fmt.Sprintf("MarkDone(%s)", conn)
			q.MarkDone(conn)
			ref.markDone(conn)
		case pick(3):
			what = fmt.Sprintf("Remove(%s)", conn)
			q.Remove(conn)
			ref.remove(conn)
		case rng.IntN(2) == 0:
			// A cancelled context never takes work; a finished queue
			// answers ErrShutdown without blocking.
			what = "Dequeue(cancelled)"
			if _, _, err := q.Dequeue(cancelled); !errors.Is(err, context.Canceled) {
				return fmt.Errorf("op %d %s error = %v", i, what, err)
			}
			if ref.finished() {
				what = "Dequeue(finished)"
				if _, _, err := q.Dequeue(t.Context()); !errors.Is(err, ErrShutdown) {
					return fmt.Errorf("op %d %s error = %v, want ErrShutdown", i, what, err)
				}
			}
		default:
			if rng.IntN(20) == 0 {
				what = "ShutDown()"
				q.ShutDown()
				ref.shutdown = true
			}
		}
		got, err := viewOf(q)
		if err != nil {
			return fmt.Errorf("op %d %s: %v", i, what, err)
		}
		// reflect.DeepEqual first: cmp is too slow for every step.
		if want := ref.view(); !reflect.DeepEqual(want, got) {
			return fmt.Errorf("op %d %s: state mismatch (-model +queue):\n%s", i, what, cmp.Diff(want, got))
		}
	}
	return nil
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
