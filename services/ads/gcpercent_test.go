package ads

import (
	"runtime/debug"
	"testing"
)

// gcPercent reads the collector's target (there is no getter).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestRaiseGCPercent(t *testing.T) {
	orig := gcPercent()
	defer debug.SetGCPercent(orig)
	for _, tc := range []struct {
		name           string
		process, raise int
		during         int
	}{
		{"raised and restored", 100, 400, 400},
		{"never lowered", 800, 400, 800},
		{"off stays off", -1, 400, -1},
		{"zero leaves it alone", 100, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(tc.process)
			restore := raiseGCPercent(tc.raise)
			if got := gcPercent(); got != tc.during {
				t.Errorf("during: GOGC %d, want %d", got, tc.during)
			}
			restore()
			if got := gcPercent(); got != tc.process {
				t.Errorf("after: GOGC %d, want the process's %d", got, tc.process)
			}
		})
	}
}
