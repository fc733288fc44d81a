package intern

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// same reports whether a and b share their bytes.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestTableKeepsOneCopy: equal strings, from bytes or strings, come back
// as the table's one copy; a string over the length bound is returned
// as it is and not kept.
func TestTableKeepsOneCopy(t *testing.T) {
	var tab Table
	first := tab.String(strings.Clone("outbound|80||a.default.svc.cluster.local"))
	if got := tab.String(strings.Clone(first)); !same(got, first) || got != first {
		t.Error("an equal string did not come back as the kept copy")
	}
	got, ok := tab.Bytes([]byte(first))
	if !ok || !same(got, first) {
		t.Errorf("bytes equal to a kept string = %q, %v; want the kept copy", got, ok)
	}
	long := strings.Repeat("n", DefaultMaxLen+1)
	if got := tab.String(long); got != long || tab.Len() != 1 {
		t.Errorf("a string over the bound: got %d bytes back, table holds %d strings; want it unchanged and not kept", len(got), tab.Len())
	}
}

// TestTableStartsOverWhenFull: the table never holds more than its
// bound, and bytes that are not UTF-8 are refused and not kept.
func TestTableStartsOverWhenFull(t *testing.T) {
	tab := Table{MaxStrings: 100}
	for i := range 250 {
		if _, ok := tab.Bytes(fmt.Appendf(nil, "n%d", i)); !ok {
			t.Fatalf("string %d refused", i)
		}
		if n := tab.Len(); n > 100 || n == 0 {
			t.Fatalf("table holds %d strings, want 1 to 100", n)
		}
	}
	before := tab.Len()
	if _, ok := tab.Bytes([]byte{'a', 0xff}); ok {
		t.Error("bytes that are not UTF-8 were taken")
	}
	if tab.Len() != before {
		t.Error("bytes that are not UTF-8 were kept")
	}
}
