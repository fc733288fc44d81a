package ads

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func memoryLimit() int64 { return debug.SetMemoryLimit(-1) }

func noLimit() int64 { return math.MaxInt64 }

func testBootHeap(thp string) *bootHeap {
	h := newBootHeap(true, slog.New(slog.DiscardHandler), nil)
	h.thp = func() string { return thp }
	h.heapFree = func() uint64 { return 0 } // as in a fresh process
	return h
}

// TestBootHeapHoldsTheCollectorAndPutsItBack: while a snapshot is
// replayed the collector is off under a memory limit sized from the
// snapshot; done puts back the process's settings, a lower limit of the
// operator's is kept throughout, and a collector already off is left
// alone.
func TestBootHeapHoldsTheCollectorAndPutsItBack(t *testing.T) {
	origPct, origLimit := gcPercent(), memoryLimit()
	defer func() { debug.SetGCPercent(origPct); debug.SetMemoryLimit(origLimit) }()
	const size = 8 << 20
	for _, tc := range []struct {
		name          string
		pct           int
		limit         func() int64
		enabled       bool
		wantPct       int
		wantOwnLimit  bool // the limit during is bootHeap's
		wantSameLimit bool // the limit during is the process's
	}{
		{name: "held and put back", pct: 100, limit: noLimit, enabled: true, wantPct: -1, wantOwnLimit: true},
		{name: "the operator's lower limit stays", pct: 150, limit: func() int64 { return int64(memoryInUse() + 16<<20) }, enabled: true, wantPct: -1, wantSameLimit: true},
		{name: "a collector off is left alone", pct: -1, limit: noLimit, enabled: true, wantPct: -1, wantSameLimit: true},
		{name: "disabled", pct: 100, limit: noLimit, enabled: false, wantPct: 100, wantSameLimit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(tc.pct)
			limit := tc.limit()
			debug.SetMemoryLimit(limit)
			h := testBootHeap("never")
			h.enabled = tc.enabled
			before := memoryInUse()
			h.prepare(size)
			h.prepare(size) // a second call changes nothing
			if got := gcPercent(); got != tc.wantPct {
				t.Errorf("during: GOGC %d, want %d", got, tc.wantPct)
			}
			during := memoryLimit()
			switch {
			case tc.wantSameLimit && during != limit:
				t.Errorf("during: memory limit %d, want the process's %d", during, limit)
			case tc.wantOwnLimit && (uint64(during) < before+bootHeapLimitPerByte*size || uint64(during) > memoryInUse()+bootHeapLimitPerByte*size+bootHeapLimitSlack):
				t.Errorf("during: memory limit %d, want in use (%d) + %d x %d + %d", during, before, bootHeapLimitPerByte, size, bootHeapLimitSlack)
			}
			h.done()
			h.done()
			if got := gcPercent(); got != tc.pct {
				t.Errorf("after: GOGC %d, want the process's %d", got, tc.pct)
			}
			if got := memoryLimit(); got != limit {
				t.Errorf("after: memory limit %d, want the process's %d", got, limit)
			}
		})
	}
}

func TestParseTHPMode(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never\n": "always",
		"always madvise [never]\n": "never",
		"":                         "",
		"always madvise never":     "",
	} {
		if got := parseTHPMode(in); got != want {
			t.Errorf("parseTHPMode(%q) = %q, want %q", in, got, want)
		}
	}
}
