package pushqueue

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFIFOStorage checks the FIFO's order across storage reuse: emptying
// it, moving live entries down when the head is far in, and filtering.
func TestFIFOStorage(t *testing.T) {
	var f fifo
	var want []entry
	next := uint64(0)
	push := func(n int) {
		for range n {
			next++
			e := entry{conn: fmt.Sprint(next), gen: next}
			f.push(e)
			want = append(want, e)
		}
	}
	pop := func(n int) {
		t.Helper()
		for range n {
			if got := f.pop(); got != want[0] {
				t.Fatalf("pop() = %v, want %v", got, want[0])
			}
			want = want[1:]
		}
	}
	check := func(step string) {
		t.Helper()
		if diff := cmp.Diff(want, f.items[f.head:], cmp.AllowUnexported(entry{})); diff != "" {
			t.Fatalf("%s: entries mismatch (-want +got):\n%s", step, diff)
		}
	}

	push(10)
	pop(10)
	if f.head != 0 || len(f.items) != 0 {
		t.Fatalf("empty FIFO not reset: head %d, len %d", f.head, len(f.items))
	}
	push(3000)
	pop(1600) // the head passes half way: live entries move down
	if f.head >= 1600 {
		t.Fatalf("head %d: entries not moved down", f.head)
	}
	check("after moving down")
	push(100)
	pop(50)
	check("after more pushes")
	f.filter(func(e entry) bool { return e.gen%2 == 0 })
	var even []entry
	for _, e := range want {
		if e.gen%2 == 0 {
			even = append(even, e)
		}
	}
	want = even
	check("after filter")
	pop(len(want))
	check("drained")
}
