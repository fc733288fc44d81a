package ads

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

func memoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// testInUse is the memory in use a test's bootHeap sees.
const testInUse = 40 << 20

func testBootHeap(thp string) *bootHeap {
	h := newBootHeap(true, slog.New(slog.DiscardHandler), nil)
	h.thp = func() string { return thp }
	h.heapFree = func() uint64 { return 0 } // as in a fresh process
	h.inUse = func() uint64 { return testInUse }
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
	for _, tc := range []struct {
		name          string
		size          uint64
		pct           int
		limit         int64
		enabled       bool
		wantPct       int
		wantOwnLimit  bool // the limit during is bootHeap's
		wantSameLimit bool // the limit during is the process's
	}{
		{name: "held and put back", size: 8 << 20, pct: 100, limit: math.MaxInt64, enabled: true, wantPct: -1, wantOwnLimit: true},
		// 4 GiB against an own limit of 6 x 1 GiB + 104 MiB.
		{name: "the operator's lower limit stays", size: 1 << 30, pct: 150, limit: 4 << 30, enabled: true, wantPct: -1, wantSameLimit: true},
		{name: "a collector off is left alone", size: 8 << 20, pct: -1, limit: math.MaxInt64, enabled: true, wantPct: -1, wantSameLimit: true},
		{name: "disabled", size: 8 << 20, pct: 100, limit: math.MaxInt64, enabled: false, wantPct: 100, wantSameLimit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(tc.pct)
			limit := tc.limit
			debug.SetMemoryLimit(limit)
			h := testBootHeap("never")
			h.enabled = tc.enabled
			h.snapshot(tc.size)
			h.stream(tc.size, 1, 1, false) // a second call changes nothing
			if got := gcPercent(); got != tc.wantPct {
				t.Errorf("during: GOGC %d, want %d", got, tc.wantPct)
			}
			during := memoryLimit()
			switch {
			case tc.wantSameLimit && during != limit:
				t.Errorf("during: memory limit %d, want the process's %d", during, limit)
			case tc.wantOwnLimit && uint64(during) != testInUse+2*bootHeapPerSnapshotByte*tc.size+bootHeapLimitSlack:
				t.Errorf("during: memory limit %d, want in use (%d) + 2 x %d x %d + %d", during, testInUse, bootHeapPerSnapshotByte, tc.size, bootHeapLimitSlack)
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

// TestBootHeapStreamEstimate: a replay of the stream's last record per
// subject is sized from the share of its bytes those records hold; a
// replay of every record from all of them.
func TestBootHeapStreamEstimate(t *testing.T) {
	origPct, origLimit := gcPercent(), memoryLimit()
	defer func() { debug.SetGCPercent(origPct); debug.SetMemoryLimit(origLimit) }()
	debug.SetMemoryLimit(math.MaxInt64)
	for _, tc := range []struct {
		name                  string
		bytes, msgs, subjects uint64
		all                   bool
		want                  uint64
	}{
		{"last per subject", 8 << 20, 4, 1, false, 2 << 20 * bootHeapPerStreamByte},
		{"every record", 8 << 20, 4, 1, true, 8 << 20 * bootHeapPerStreamByte},
		{"a subject each", 8 << 20, 4, 4, false, 8 << 20 * bootHeapPerStreamByte},
		{"empty", 0, 0, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := testBootHeap("never")
			h.stream(tc.bytes, tc.msgs, tc.subjects, tc.all)
			limit := uint64(memoryLimit())
			h.done()
			if tc.want == 0 {
				if limit != math.MaxInt64 {
					t.Fatalf("memory limit %d for an empty stream, want none", limit)
				}
				return
			}
			if want := testInUse + 2*tc.want + bootHeapLimitSlack; limit != want {
				t.Fatalf("memory limit %d, want %d (an estimate of %d)", limit, want, tc.want)
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
