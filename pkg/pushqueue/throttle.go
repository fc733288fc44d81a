package pushqueue

import "runtime"

// DefaultThrottle is Istio's PILOT_PUSH_THROTTLE default for this process:
// min(15 + 5*GOMAXPROCS, 100) connections pushed at once.
func DefaultThrottle() int {
	return ThrottleFor(runtime.GOMAXPROCS(0))
}

// ThrottleFor is Istio's default throttle for a process with cores cores.
func ThrottleFor(cores int) int {
	return min(15+5*max(cores, 1), 100)
}
