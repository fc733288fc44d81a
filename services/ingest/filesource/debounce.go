package filesource

import "time"

// debouncer coalesces bursts of touches per key: a key is due quiet after
// its last touch, but never later than maxDelay after its first, so a file
// written continuously is still read. It is pure: time comes from callers.
type debouncer[K comparable] struct {
	quiet, maxDelay time.Duration
	pending         map[K]window
}

type window struct{ first, due time.Time }

func newDebouncer[K comparable](quiet, maxDelay time.Duration) *debouncer[K] {
	return &debouncer[K]{quiet: quiet, maxDelay: max(quiet, maxDelay), pending: make(map[K]window)}
}

func (d *debouncer[K]) touch(k K, now time.Time) {
	w, ok := d.pending[k]
	if !ok {
		w.first = now
	}
	w.due = now.Add(d.quiet)
	if limit := w.first.Add(d.maxDelay); w.due.After(limit) {
		w.due = limit
	}
	d.pending[k] = w
}

// next returns the earliest due time, if any key is pending.
func (d *debouncer[K]) next() (time.Time, bool) {
	var at time.Time
	found := false
	for _, w := range d.pending {
		if !found || w.due.Before(at) {
			at, found = w.due, true
		}
	}
	return at, found
}

// popDue removes and returns the keys due at now.
func (d *debouncer[K]) popDue(now time.Time) []K {
	var out []K
	for k, w := range d.pending {
		if !w.due.After(now) {
			out = append(out, k)
			delete(d.pending, k)
		}
	}
	return out
}

func (d *debouncer[K]) len() int { return len(d.pending) }
