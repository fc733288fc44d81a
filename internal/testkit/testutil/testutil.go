// Package testutil holds the waiting and metric-reading helpers the tests
// of every pilotwire module share.
package testutil

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The two timeouts of pilotwire's tests, declared once.
const (
	// DefaultTimeout bounds every wait for something that should happen,
	// and every test's context: generous, so a loaded CI machine is slow,
	// not red.
	DefaultTimeout = 60 * time.Second
	// ShortTimeout is how long a test watches for something that must not
	// happen (an extra response, a push to a connection out of scope).
	ShortTimeout = 300 * time.Millisecond
)

// Eventually polls cond every few milliseconds until it holds, and fails
// the test if it does not within DefaultTimeout.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, DefaultTimeout, what, cond)
}

// EventuallyWithin is Eventually with its own bound, for a test whose
// point is that cond holds sooner than something else would make it
// (a redelivery after an ack wait, say).
func EventuallyWithin(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		case <-tick.C:
		}
	}
}

// Receive waits for a value on ch and returns it, and fails the test if
// none comes within DefaultTimeout: a wait that would otherwise block
// until the package's timeout, with nothing said of which test hung.
func Receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	v, ok := within(ch, DefaultTimeout)
	if !ok {
		t.Fatalf("timed out after %s waiting for %s", DefaultTimeout, what)
	}
	return v
}

// within receives from ch, giving up after d (ok false).
func within[T any](ch <-chan T, d time.Duration) (v T, ok bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	select {
	case v = <-ch:
		return v, true
	case <-deadline.C:
		return v, false
	}
}

// Stopped waits for done to close or deliver (a service's Run returning
// after its context ended). If it does not within DefaultTimeout, the test
// fails with every goroutine's stack in its log, so a shutdown that hangs
// names itself instead of running into the package's timeout.
func Stopped[T any](t testing.TB, done <-chan T, what string) (v T, ok bool) {
	t.Helper()
	if v, ok = within(done, DefaultTimeout); ok {
		return v, true
	}
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Errorf("%s did not return within %s after it was told to stop; goroutines:\n%s", what, DefaultTimeout, buf)
	return v, false
}

// Metric sums the values of every counter, gauge or untyped series named
// name in g (0 when there is none). name may end in a selector,
// `name{label="value",...}`: then only the series carrying every one of
// those labels count.
func Metric(g prometheus.Gatherer, name string) float64 {
	want := map[string]string{}
	if i := strings.IndexByte(name, '{'); i >= 0 && strings.HasSuffix(name, "}") {
		for _, kv := range strings.Split(name[i+1:len(name)-1], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				panic("testutil.Metric: bad selector " + name)
			}
			want[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		}
		name = name[:i]
	}
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
			if !hasLabels(m.GetLabel(), want) {
				continue
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return total
}

func hasLabels(have []*dto.LabelPair, want map[string]string) bool {
	n := 0
	for _, l := range have {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
