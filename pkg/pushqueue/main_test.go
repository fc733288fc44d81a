package pushqueue

import (
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reqs is the request type of the tests: the ids of the enqueued requests,
// in the order they were merged.
type reqs []int

func mergeReqs(into, from reqs) reqs {
	return append(slices.Clip(into), from...)
}

func newTestQueue(maxInFlight int) *Queue[reqs] {
	return New(Config{MaxInFlight: maxInFlight}, mergeReqs)
}
