package ads

import "runtime/debug"

// raiseGCPercent sets the collector's target to pct for a while and
// returns what restores the target it found. It never lowers the target
// and leaves a collector switched off (GOGC=off) alone; pct <= 0 does
// nothing. The target is the process's: of frontends bootstrapping at
// once in one process (tests), the first raises it and the others find
// it raised and leave it, so the target the process had is restored.
func raiseGCPercent(pct int) (restore func()) {
	if pct <= 0 {
		return func() {}
	}
	prev := debug.SetGCPercent(pct)
	if prev < 0 || prev >= pct {
		debug.SetGCPercent(prev)
		return func() {}
	}
	return func() { debug.SetGCPercent(prev) }
}
