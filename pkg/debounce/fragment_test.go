package debounce

import (
	"testing"
	"time"
)

// openRuns counts the runs of seqs (ascending) once joined over the
// sequences emitted so far.
func openRuns(seqs []uint64, emitted map[uint64]int) int {
	n := 0
	for i, s := range seqs {
		if i == 0 {
			n++
			continue
		}
		for g := seqs[i-1] + 1; g < s; g++ {
			if emitted[g] == 0 {
				n++
				break
			}
		}
	}
	return n
}

// TestBypassRangesAreBounded: with EDS debounce off, endpoint events
// interleaved with full events still pending (a burst of Pods and Services
// while one bypass request is in flight) would make the next bypass
// request list every other sequence: one range per event. Past
// DefaultMaxBypassRanges the bypass batch is emitted together with the
// debounced one, so every request's sequences form a bounded number of
// runs and, merged, no pending sequence sits between them.
func TestBypassRangesAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnableEDSDebounce = false
	cfg.DebounceAfter = time.Hour // the debounced batch never becomes due on its own
	cfg.DebounceMax = time.Hour
	d := New(cfg)
	var reqs []*Request
	emit := func(r *Request, ok bool) {
		if ok {
			reqs = append(reqs, r)
		}
	}
	for seq := uint64(1); seq <= 4000; seq++ {
		d.Add(Event{Seq: seq, Full: seq%2 == 1}, epoch)
		emit(d.Tick(epoch))
		if seq%1000 == 0 {
			emit(d.Done(epoch))
		}
	}
	emit(d.Done(epoch))
	emit(d.Done(epoch.Add(2 * time.Hour)))
	emit(d.Done(epoch.Add(2 * time.Hour)))
	seen := map[uint64]int{}
	for i, r := range reqs {
		for _, s := range r.Seqs {
			seen[s]++
		}
		// Runs that no earlier request and no sequence of this one join:
		// the ranges a consumer must keep apart.
		if n := openRuns(r.Seqs, seen); n > DefaultMaxBypassRanges {
			t.Errorf("request %d (full=%v, %d events) has %d runs of sequences apart, want at most %d", i, r.Full, r.Merged, n, DefaultMaxBypassRanges)
		}
	}
	for seq := uint64(1); seq <= 4000; seq++ {
		if seen[seq] != 1 {
			t.Fatalf("sequence %d in %d requests, want 1", seq, seen[seq])
		}
	}
	if d.Pending() != 0 {
		t.Errorf("%d events still pending", d.Pending())
	}
}
