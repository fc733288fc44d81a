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

// bootHeap readies the process's heap for the model's first build, from a
// snapshot or the change stream, and puts the collector's settings back
// once the frontend is ready.
//
// Beyond decoding, two costs dominate a fresh frontend's start
// (docs/benchmarks.md, "Issue 17, 2026-12-03 08:00–09:20 UTC: the bootstrap heap"):
//   - the collector marks the half-built model at least once while nothing
//     is served yet;
//   - every page the heap grows into is a page fault, 4 KiB at a time
//     where the kernel gives transparent huge pages only on request (THP
//     "madvise", the default of Debian and Ubuntu), and a fault on a page
//     first read costs a TLB shootdown on every core.
//
// So while the model is built the collector waits, bounded by a memory
// limit sized from what is replayed (a collection starts at that limit, so
// a wrong estimate costs time, not memory). In THP madvise mode the heap the
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
	minBallast uint64 // a smaller estimate allocates no ballast
	// Heap a replay allocates per byte it reads; see newBootHeap.
	perSnapshotByte, perStreamByte uint64
	thp                            func() string // the kernel's THP mode: always, madvise, never or "" (none)
	heapFree                       func() uint64 // free heap still mapped in
	inUse                          func() uint64 // memory counted against a memory limit
	log                            *slog.Logger
	ballastSet                     func(float64) // reports the ballast's size

	mu          sync.Mutex
	prepared    bool
	restores    []func()
	ballastAddr uintptr // the ballast's range, for the tests
	ballastLen  uintptr
}

const (
	// bootHeapPerSnapshotByte and bootHeapPerStreamByte are about what a
	// replay allocates, the mesh's build included, per byte of a
	// snapshot (2.5 on the benchmark's 10000x10 and 1000x100 meshes, 3.2
	// on 3000x3) and per byte of the change records it reads (3.7–3.9,
	// 4.5).
	bootHeapPerSnapshotByte = 3
	bootHeapPerStreamByte   = 4
	// The heap is bounded while the collector waits: twice the estimate,
	// plus what was in use, plus bootHeapLimitSlack.
	bootHeapLimitSlack = 64 << 20
	// defaultMinBallast: below this, faults cost too little to be worth a
	// forced collection.
	defaultMinBallast = 16 << 20
)

func newBootHeap(enabled bool, log *slog.Logger, ballastSet func(float64)) *bootHeap {
	return &bootHeap{
		enabled: enabled, minBallast: defaultMinBallast,
		perSnapshotByte: bootHeapPerSnapshotByte, perStreamByte: bootHeapPerStreamByte,
		thp: thpMode, heapFree: heapFree, inUse: memoryInUse, log: log, ballastSet: ballastSet,
	}
}

// snapshot readies the heap for replaying a snapshot of size bytes.
func (h *bootHeap) snapshot(size uint64) {
	if h != nil {
		h.prepare("snapshot", size, satMul(size, h.perSnapshotByte))
	}
}

// stream readies the heap for replaying the change records of a stream
// holding bytes in msgs records on subjects subjects: the last record of
// each subject unless all.
func (h *bootHeap) stream(bytes, msgs, subjects uint64, all bool) {
	if h == nil || msgs == 0 {
		return
	}
	if !all && subjects < msgs {
		bytes = uint64(float64(bytes) * float64(subjects) / float64(msgs))
	}
	h.prepare("stream", bytes, satMul(bytes, h.perStreamByte))
}

// prepare readies the heap for a replay of size bytes from source that
// allocates about estimate bytes. Until done, only the first call does
// anything.
func (h *bootHeap) prepare(source string, size, estimate uint64) {
	if !h.enabled || estimate == 0 {
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

	inUse := h.inUse()
	limit := satAdd(satAdd(inUse, satMul(estimate, 2)), bootHeapLimitSlack)
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
	h.log.Info("bootstrap heap", "source", source, "bytes", size, "estimate", estimate, "ballast_bytes", ballast, "memory_limit", limit, "thp", mode)
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

// done puts back what prepare changed, newest first, and lets a later
// prepare (a start that gave up its snapshot for the stream) run again. It
// may be called more than once, and without prepare.
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
	h.prepared = false
}

// heapFree is the heap's free memory that is still mapped in (not
// returned to the kernel).
func heapFree() uint64 { return runtimeBytes("/memory/classes/heap/free:bytes")[0] }

// memoryInUse is the memory the runtime counts against a memory limit.
func memoryInUse() uint64 {
	v := runtimeBytes("/memory/classes/total:bytes", "/memory/classes/heap/released:bytes")
	return v[0] - min(v[1], v[0])
}

// runtimeBytes reads the runtime's byte metrics named (0 for one this
// runtime does not have).
func runtimeBytes(names ...string) []uint64 {
	s := make([]rtmetrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	rtmetrics.Read(s)
	out := make([]uint64, len(s))
	for i := range s {
		if s[i].Value.Kind() == rtmetrics.KindUint64 {
			out[i] = s[i].Value.Uint64()
		}
	}
	return out
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
