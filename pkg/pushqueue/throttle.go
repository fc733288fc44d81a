package pushqueue

import "runtime"

// DefaultThrottle is Istio's PILOT_PUSH_THROTTLE default:
// min(15 + 5*GOMAXPROCS, 100) connections pushed at once.
func DefaultThrottle() int {
	return min(15+5*runtime.GOMAXPROCS(0), 100)
}
