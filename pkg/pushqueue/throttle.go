package pushqueue

import (
	"math"
	"runtime"
	"time"
)

// DefaultThrottle is Istio's PILOT_PUSH_THROTTLE default for this process:
// min(15 + 5*GOMAXPROCS, 100) connections pushed at once.
func DefaultThrottle() int {
	return ThrottleFor(runtime.GOMAXPROCS(0))
}

// ThrottleFor is Istio's default throttle for a process with cores cores.
func ThrottleFor(cores int) int {
	return min(15+5*max(cores, 1), 100)
}

// MaxAdaptiveThrottle caps ThrottleForRate.
const MaxAdaptiveThrottle = 10000

// ThrottleForRate sizes the throttle of a process that has cores cores and
// was measured completing rate pushes per second of work: enough in flight
// for window of its work (Little's law: what keeps it busy across the round
// trips of orders and completions without queueing much more than window),
// never less than Istio's default for its cores, at most
// MaxAdaptiveThrottle. A rate of 0 (not measured yet) gives Istio's
// default.
func ThrottleForRate(cores int, rate float64, window time.Duration) int {
	n := ThrottleFor(cores)
	if rate <= 0 || window <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return n
	}
	w := rate * window.Seconds()
	if w >= MaxAdaptiveThrottle {
		return MaxAdaptiveThrottle
	}
	return max(n, int(math.Ceil(w)))
}
