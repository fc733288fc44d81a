// Package testutil holds the waiting and metric-reading helpers the tests
// of every pilotwire module share.
package testutil

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Timeout bounds every wait in pilotwire's tests.
const Timeout = 60 * time.Second

// Eventually polls cond every few milliseconds until it holds, and fails
// the test if it does not within Timeout.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", Timeout, what)
		case <-tick.C:
		}
	}
}

// Metric sums the values of every counter, gauge or untyped series named
// name in g (0 when there is none).
func Metric(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return total
}
