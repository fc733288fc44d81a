package ads

import (
	"bufio"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// TestBootHeapAdvisesHugePages: in THP madvise mode the ballast's range is
// advised MADV_HUGEPAGE while the model is built and MADV_NOHUGEPAGE
// after, as the kernel's own mappings show; in the other modes, and below
// the minimum, there is no ballast.
func TestBootHeapAdvisesHugePages(t *testing.T) {
	origPct, origLimit := gcPercent(), memoryLimit()
	defer func() { debug.SetGCPercent(origPct); debug.SetMemoryLimit(origLimit) }()
	for _, mode := range []string{"always", "never", ""} {
		h := testBootHeap(mode)
		h.minBallast = 0
		h.snapshot(4 << 20)
		if h.ballastLen != 0 {
			t.Errorf("THP %q: a ballast of %d bytes, want none", mode, h.ballastLen)
		}
		h.done()
	}
	h := testBootHeap("madvise")
	h.snapshot(1 << 20) // an estimate of 3 MiB, below the default minimum
	if h.ballastLen != 0 {
		t.Errorf("a ballast of %d bytes for a 1 MiB snapshot, want none below %d", h.ballastLen, defaultMinBallast)
	}
	h.done()

	var got float64
	h = newBootHeap(true, slog.New(slog.DiscardHandler), func(v float64) { got = v })
	h.thp = func() string { return "madvise" }
	h.heapFree = func() uint64 { return 0 }
	h.inUse = func() uint64 { return testInUse }
	h.minBallast = 0
	const size = 4 << 20
	h.snapshot(size)
	if h.ballastLen != bootHeapPerSnapshotByte*size || got != float64(h.ballastLen) {
		t.Fatalf("ballast of %d bytes (reported %v), want %d", h.ballastLen, got, bootHeapPerSnapshotByte*size)
	}
	if flags := vmFlags(t, h.ballastAddr); !flags["hg"] {
		t.Errorf("ballast mapping flags %v during the bootstrap, want hg (MADV_HUGEPAGE)", flags)
	}
	h.done()
	if flags := vmFlags(t, h.ballastAddr); !flags["nh"] || flags["hg"] {
		t.Errorf("ballast mapping flags %v after the bootstrap, want nh (MADV_NOHUGEPAGE) and no hg", flags)
	}
}

// vmFlags reads the VmFlags of the mapping holding addr from
// /proc/self/smaps.
func vmFlags(t *testing.T, addr uintptr) map[string]bool {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := mappingRange(line); ok {
			in = lo <= uint64(addr) && uint64(addr) < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			flags := map[string]bool{}
			for _, fl := range strings.Fields(strings.TrimPrefix(line, "VmFlags:")) {
				flags[fl] = true
			}
			return flags
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

// mappingRange parses a smaps header line: "lo-hi perms ...".
func mappingRange(line string) (lo, hi uint64, ok bool) {
	first, _, found := strings.Cut(line, " ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(first, "-")
	if !found {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(a, 16, 64)
	hi, err2 := strconv.ParseUint(b, 16, 64)
	return lo, hi, err1 == nil && err2 == nil
}
