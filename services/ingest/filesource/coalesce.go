package filesource

import "time"

// coalescer coalesces bursts of touches per key: a key is due quiet after
// its last touch, but never later than maxDelay after its first, so a file
// written continuously is still read. It is pure: time comes from callers.
type coalescer[K comparable] struct {
	quiet, maxDelay time.Duration
	pending         map[K]window
}

type window struct{ first, due time.Time }

func newCoalescer[K comparable](quiet, maxDelay time.Duration) *coalescer[K] {
	return &coalescer[K]{quiet: quiet, maxDelay: max(quiet, maxDelay), pending: make(map[K]window)}
}

func (c *coalescer[K]) touch(k K, now time.Time) {
	w, ok := c.pending[k]
	if !ok {
		w.first = now
	}
	w.due = now.Add(c.quiet)
	if limit := w.first.Add(c.maxDelay); w.due.After(limit) {
		w.due = limit
	}
	c.pending[k] = w
}

// next returns the earliest due time, if any key is pending.
func (c *coalescer[K]) next() (time.Time, bool) {
	var at time.Time
	found := false
	for _, w := range c.pending {
		if !found || w.due.Before(at) {
			at, found = w.due, true
		}
	}
	return at, found
}

// popDue removes and returns the keys due at now.
func (c *coalescer[K]) popDue(now time.Time) []K {
	var out []K
	for k, w := range c.pending {
		if !w.due.After(now) {
			out = append(out, k)
			delete(c.pending, k)
		}
	}
	return out
}

// popWhere removes and returns every pending key that match holds for,
// due or not.
func (c *coalescer[K]) popWhere(match func(K) bool) []K {
	var out []K
	for k := range c.pending {
		if match(k) {
			out = append(out, k)
			delete(c.pending, k)
		}
	}
	return out
}

func (c *coalescer[K]) len() int { return len(c.pending) }
