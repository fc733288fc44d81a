package pushqueue

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	// defaultTestTimeout bounds every wait that must succeed.
	defaultTestTimeout = 10 * time.Second
	// shortTimeout bounds "must not happen" checks.
	shortTimeout = 50 * time.Millisecond
)

// reqs is the request type of the tests: the ids of the enqueued requests,
// in the order they were merged.
type reqs []int

func mergeReqs(into, from reqs) reqs {
	return append(slices.Clip(into), from...)
}

func newTestQueue(maxInFlight int) *Queue[reqs] {
	return New(Config{MaxInFlight: maxInFlight}, mergeReqs)
}
