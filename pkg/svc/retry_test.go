package svc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// retryEnv is what one Retry call told its log and counter.
type retryEnv struct {
	logs     bytes.Buffer
	failures prometheus.Counter
}

func newRetryEnv() *retryEnv {
	return &retryEnv{failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "test_failures_total", Help: "test"})}
}

func (e *retryEnv) options(first, max time.Duration) svc.RetryOptions {
	return svc.RetryOptions{
		First: first, Max: max,
		Log:      slog.New(slog.NewTextHandler(&e.logs, nil)),
		Msg:      "thing failed, retrying",
		Attrs:    []any{"key", "k1"},
		Failures: e.failures,
	}
}

func (e *retryEnv) logLines() []string {
	return strings.Split(strings.TrimSpace(e.logs.String()), "\n")
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestRetryBacksOffAndReportsEachFailure(t *testing.T) {
	tests := []struct {
		name       string
		first, max time.Duration
		fails      int
		want       []time.Duration
	}{
		{name: "first try succeeds", first: time.Millisecond, max: 4 * time.Millisecond},
		{name: "doubling up to max", first: time.Millisecond, max: 4 * time.Millisecond, fails: 5,
			want: []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}},
		{name: "fixed wait", first: 2 * time.Millisecond, max: 2 * time.Millisecond, fails: 3,
			want: []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond}},
		{name: "max below first", first: 2 * time.Millisecond, max: time.Millisecond, fails: 2,
			want: []time.Duration{2 * time.Millisecond, 2 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newRetryEnv()
			o := e.options(tc.first, tc.max)
			var waits []time.Duration
			var errs []error
			o.OnFailure = func(err error, wait time.Duration) {
				errs = append(errs, err)
				waits = append(waits, wait)
			}
			tries := 0
			err := svc.Retry(testCtx(t), o, func() error {
				tries++
				if tries <= tc.fails {
					return fmt.Errorf("try %d", tries)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Retry = %v, want nil", err)
			}
			if tries != tc.fails+1 {
				t.Errorf("tries = %d, want %d", tries, tc.fails+1)
			}
			if diff := cmp.Diff(tc.want, waits); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			for i, err := range errs {
				if want := fmt.Sprintf("try %d", i+1); err.Error() != want {
					t.Errorf("failure %d = %v, want %s", i, err, want)
				}
			}
			if got := promtest.ToFloat64(e.failures); got != float64(tc.fails) {
				t.Errorf("failures counted = %v, want %d", got, tc.fails)
			}
			if tc.fails == 0 {
				if e.logs.Len() != 0 {
					t.Errorf("logged without a failure: %s", e.logs.String())
				}
				return
			}
			lines := e.logLines()
			if len(lines) != tc.fails {
				t.Fatalf("logged %d lines, want %d:\n%s", len(lines), tc.fails, e.logs.String())
			}
			for i, l := range lines {
				for _, want := range []string{"level=WARN", `msg="thing failed, retrying"`, fmt.Sprintf(`err="try %d"`, i+1), "backoff=" + tc.want[i].String(), "key=k1"} {
					if !strings.Contains(l, want) {
						t.Errorf("log line %d %q lacks %s", i, l, want)
					}
				}
			}
		})
	}
}

func TestRetryStopsWhenContextEnds(t *testing.T) {
	t.Run("during the wait", func(t *testing.T) {
		e := newRetryEnv()
		o := e.options(time.Hour, time.Hour)
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		o.OnFailure = func(error, time.Duration) { cancel() } // the wait is an hour: only ctx ends it
		tries := 0
		err := svc.Retry(ctx, o, func() error { tries++; return errors.New("down") })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Retry = %v, want context.Canceled", err)
		}
		if tries != 1 || promtest.ToFloat64(e.failures) != 1 {
			t.Errorf("tries = %d, failures = %v; want 1 and 1", tries, promtest.ToFloat64(e.failures))
		}
	})
	t.Run("during a try", func(t *testing.T) {
		e := newRetryEnv()
		o := e.options(time.Millisecond, time.Millisecond)
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		tries := 0
		err := svc.Retry(ctx, o, func() error {
			tries++
			if tries == 2 {
				cancel() // the try fails because ctx ended: not a failure to report
			}
			return errors.New("down")
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Retry = %v, want context.Canceled", err)
		}
		if tries != 2 || promtest.ToFloat64(e.failures) != 1 || len(e.logLines()) != 1 {
			t.Errorf("tries = %d, failures = %v, log lines = %d; want 2, 1, 1", tries, promtest.ToFloat64(e.failures), len(e.logLines()))
		}
	})
	t.Run("before the first try", func(t *testing.T) {
		e := newRetryEnv()
		ctx, cancel := context.WithCancel(testCtx(t))
		cancel()
		// The first try still runs: a success is a success.
		if err := svc.Retry(ctx, e.options(time.Millisecond, time.Millisecond), func() error { return nil }); err != nil {
			t.Errorf("Retry of a succeeding try = %v, want nil", err)
		}
		err := svc.Retry(ctx, e.options(time.Millisecond, time.Millisecond), func() error { return errors.New("down") })
		if !errors.Is(err, context.Canceled) || promtest.ToFloat64(e.failures) != 0 {
			t.Errorf("Retry of a failing try = %v, failures %v; want context.Canceled, 0", err, promtest.ToFloat64(e.failures))
		}
	})
}

func TestRetryRequiresLogAndCounter(t *testing.T) {
	full := newRetryEnv().options(time.Millisecond, time.Millisecond)
	tests := []struct {
		name string
		edit func(*svc.RetryOptions)
	}{
		{name: "no log", edit: func(o *svc.RetryOptions) { o.Log = nil }},
		{name: "no message", edit: func(o *svc.RetryOptions) { o.Msg = "" }},
		{name: "no counter", edit: func(o *svc.RetryOptions) { o.Failures = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := full
			tc.edit(&o)
			defer func() {
				if recover() == nil {
					t.Error("Retry did not panic")
				}
			}()
			_ = svc.Retry(testCtx(t), o, func() error { return nil })
		})
	}
}

func TestRetryGivesUpAfterAttempts(t *testing.T) {
	e := newRetryEnv()
	o := e.options(time.Millisecond, time.Millisecond)
	o.Attempts = 3
	tries := 0
	err := svc.Retry(testCtx(t), o, func() error { tries++; return fmt.Errorf("down %d", tries) })
	if err == nil || err.Error() != "down 3" {
		t.Errorf("Retry = %v, want the last try's error, down 3", err)
	}
	// The two retried failures are reported; the last is the caller's.
	if tries != 3 || promtest.ToFloat64(e.failures) != 2 || len(e.logLines()) != 2 {
		t.Errorf("tries = %d, failures = %v, log lines = %d; want 3, 2, 2", tries, promtest.ToFloat64(e.failures), len(e.logLines()))
	}
	e = newRetryEnv()
	o = e.options(time.Millisecond, time.Millisecond)
	o.Attempts = 3
	tries = 0
	if err := svc.Retry(testCtx(t), o, func() error {
		if tries++; tries < 3 {
			return errors.New("down")
		}
		return nil
	}); err != nil {
		t.Errorf("Retry succeeding on the last try = %v, want nil", err)
	}
}

func TestRetryTimedBoundsEachTry(t *testing.T) {
	e := newRetryEnv()
	o := e.options(time.Millisecond, time.Millisecond)
	o.Attempts = 3
	tries := 0
	err := svc.RetryTimed(testCtx(t), o, 20*time.Millisecond, func(ctx context.Context) error {
		tries++
		if tries == 1 {
			<-ctx.Done() // a request that is never answered
			return ctx.Err()
		}
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("the try has no deadline")
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Errorf("RetryTimed = %v after %d tries, want nil after 2 (the first ended by its own timeout)", err, tries)
	}
	if promtest.ToFloat64(e.failures) != 1 {
		t.Errorf("failures = %v, want 1", promtest.ToFloat64(e.failures))
	}
}
