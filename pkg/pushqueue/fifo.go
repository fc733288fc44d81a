package pushqueue

// entry is one FIFO position. gen matches the pending entry it was pushed
// for; a removed or re-added connection leaves a stale entry behind, which
// pop skips.
type entry struct {
	conn string
	gen  uint64
}

// fifo is a slice-backed queue of entries that reuses its storage.
type fifo struct {
	items []entry
	head  int
}

func (f *fifo) push(e entry) { f.items = append(f.items, e) }

func (f *fifo) pop() entry {
	e := f.items[f.head]
	f.items[f.head] = entry{}
	f.head++
	switch {
	case f.head == len(f.items):
		f.items, f.head = f.items[:0], 0
	case f.head >= 1024 && 2*f.head >= len(f.items):
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	return e
}

// filter keeps the entries for which keep is true, in order.
func (f *fifo) filter(keep func(entry) bool) {
	out := f.items[:0]
	for _, e := range f.items[f.head:] {
		if keep(e) {
			out = append(out, e)
		}
	}
	clear(f.items[len(out):])
	f.items, f.head = out, 0
}
