package ads

import (
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"unsafe"
)

// bootHeap readies the process's heap for a start from a snapshot of known
// size, and puts the collector's settings back once the model is built.
//
// Beyond decoding, two costs dominate a fresh frontend's start from a
// snapshot (docs/benchmarks.md, "Issue 17: the bootstrap heap"):
//   - the collector marks the half-built model at least once while nothing
//     is served yet;
//   - every page the heap grows into is a page fault, 4 KiB at a time
//     where the kernel gives transparent huge pages only on request (THP
//     "madvise", the default of Debian and Ubuntu), and a fault on a page
//     first read costs a TLB shootdown on every core.
//
// So while a snapshot is replayed the collector waits, bounded by a memory
// limit sized from the snapshot (a collection starts at that limit, so a
// wrong estimate costs time, not memory). In THP madvise mode the heap the
// replay will fill is also mapped up front in huge pages: a ballast of that
// size is allocated, advised MADV_HUGEPAGE and freed, and the replay's
// objects reuse its pages. Once the model is built the range is advised
// MADV_NOHUGEPAGE, which in madvise mode is what the kernel does anyway,
// so no fault while serving waits on huge-page compaction.
//
// Collector settings are the process's. Of frontends bootstrapping at once
// in one process (tests), the first prepares and the others find the
// collector off and leave it; a collector the operator switched off
// (GOGC=off) is left alone too.
type bootHeap struct {
	enabled    bool
	minBallast uint64        // a smaller estimate allocates no ballast
	thp        func() string // the kernel's THP mode: always, madvise, never or "" (none)
	heapFree   func() uint64 // free heap still mapped in
	log        *slog.Logger
	ballastSet func(float64) // reports the ballast's size

	mu          sync.Mutex
	prepared    bool
	restores    []func()
	ballastAddr uintptr // the ballast's range, for the tests
	ballastLen  uintptr
}

const (
	// bootHeapPerByte is about what a replay allocates per byte of the
	// snapshot, the mesh's build included: 2.5 on the benchmark's
	// 10000x10 and 1000x100 meshes, 3.2 on 3000x3.
	bootHeapPerByte = 3
	// bootHeapLimitPerByte and bootHeapLimitSlack bound the heap while the
	// collector waits: twice the estimate, plus what was in use.
	bootHeapLimitPerByte = 2 * bootHeapPerByte
	bootHeapLimitSlack   = 64 << 20
	// defaultMinBallast: below this, faults cost too little to be worth a
	// forced collection.
	defaultMinBallast = 16 << 20
)

func newBootHeap(enabled bool, log *slog.Logger, ballastSet func(float64)) *bootHeap {
	return &bootHeap{enabled: enabled, minBallast: defaultMinBallast, thp: thpMode, heapFree: heapFree, log: log, ballastSet: ballastSet}
}

// prepare readies the heap for replaying a snapshot of size bytes. Only the
// first call does anything.
func (h *bootHeap) prepare(size uint64) {
	if h == nil || !h.enabled || size == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prepared {
		return
	}
	h.prepared = true
	pct := debug.SetGCPercent(-1)
	if pct < 0 {
		debug.SetGCPercent(pct)
		return
	}
	h.restores = append(h.restores, func() { debug.SetGCPercent(pct) })

	inUse := memoryInUse()
	estimate := satMul(size, bootHeapPerByte)
	limit := satAdd(satAdd(inUse, satMul(size, bootHeapLimitPerByte)), bootHeapLimitSlack)
	prevLimit := debug.SetMemoryLimit(-1)
	if limit < uint64(prevLimit) {
		debug.SetMemoryLimit(int64(limit))
		h.restores = append(h.restores, func() { debug.SetMemoryLimit(prevLimit) })
	} else {
		limit = uint64(prevLimit) // the operator's is lower: it stays
	}
	mode := h.thp()
	var ballast uint64
	// A ballast only where the replay would fault in new memory: not in a
	// process whose heap already holds that much free (tests, benchmarks).
	if mode == "madvise" && estimate >= h.minBallast && h.heapFree() < estimate && satAdd(inUse, estimate) < limit {
		if h.mapHuge(estimate) {
			ballast = estimate
		}
	}
	h.log.Info("bootstrap heap", "snapshot_bytes", size, "ballast_bytes", ballast, "memory_limit", limit, "thp", mode)
	if h.ballastSet != nil {
		h.ballastSet(float64(ballast))
	}
}

// mapHuge allocates a ballast of n bytes, advises its pages MADV_HUGEPAGE
// and frees it: its pages are the heap's to reuse, mapped in huge pages as
// they are first touched. It reports whether the advice was taken.
func (h *bootHeap) mapHuge(n uint64) bool {
	if n > math.MaxInt {
		return false
	}
	b := make([]byte, n)
	addr, length := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))
	err := madviseRange(addr, length, true)
	runtime.KeepAlive(b)
	runtime.GC() // b is dead: this frees it, untouched
	if err != nil {
		h.log.Warn("bootstrap heap: huge pages not advised", "err", err)
		return false
	}
	h.ballastAddr, h.ballastLen = addr, length
	h.restores = append(h.restores, func() {
		if err := madviseRange(addr, length, false); err != nil {
			h.log.Warn("bootstrap heap: huge page advice not taken back", "err", err)
		}
	})
	return true
}

// done puts back what prepare changed, newest first. It may be called more
// than once, and without prepare.
func (h *bootHeap) done() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.restores) - 1; i >= 0; i-- {
		h.restores[i]()
	}
	h.restores = nil
}

// heapFree is the heap's free memory that is still mapped in (not
// returned to the kernel).
func heapFree() uint64 {
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// memoryInUse is the memory the runtime counts against a memory limit.
func memoryInUse() uint64 {
	s := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 || s[1].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// parseTHPMode reads the bracketed word of the kernel's
// transparent_hugepage/enabled, or "" without one.
func parseTHPMode(s string) string {
	for _, w := range strings.Fields(s) {
		if len(w) > 2 && w[0] == '[' && w[len(w)-1] == ']' {
			return w[1 : len(w)-1]
		}
	}
	return ""
}
