package svc

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RetryOptions say how Retry waits between tries and whom it tells of each
// failure. Log, Msg and Failures are required: no retry loop fails silently.
type RetryOptions struct {
	// First is the wait after the first failure; it doubles after each
	// further failure, up to Max (Max below First means First every time).
	First, Max time.Duration
	// Log hears of each failure at Warn level, as Msg with the error
	// ("err"), the wait before the next try ("backoff") and Attrs.
	Log   *slog.Logger
	Msg   string
	Attrs []any
	// Failures counts each failed try that is retried.
	Failures prometheus.Counter
	// Attempts, if above zero, bounds the tries: the error of the last is
	// returned, neither counted nor logged here (the caller reports it, as
	// the end of a term, say). Zero: until a try succeeds or ctx ends.
	Attempts int
	// OnFailure, if set, also hears of each failure and the wait before the
	// next try (to report a readiness reason, say).
	OnFailure func(err error, wait time.Duration)
}

// Retry calls attempt until it succeeds, ctx ends, or Attempts tries
// failed. Each failure to be retried is counted, logged and passed to
// OnFailure, then Retry waits (cancellably) before the next try. A failure
// after ctx ended is neither counted nor logged: it is the cancellation.
// Retry returns nil on success, ctx's error when ctx ended, and the last
// try's error when Attempts ran out.
func Retry(ctx context.Context, o RetryOptions, attempt func() error) error {
	if o.Log == nil || o.Failures == nil || o.Msg == "" {
		panic("svc.Retry: Log, Msg and Failures are required")
	}
	wait := o.First
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for tries := 1; ; tries++ {
		err := attempt()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if o.Attempts > 0 && tries >= o.Attempts {
			return err
		}
		o.Failures.Inc()
		o.Log.Warn(o.Msg, append([]any{"err", err, "backoff", wait}, o.Attrs...)...)
		if o.OnFailure != nil {
			o.OnFailure(err, wait)
		}
		if t == nil {
			t = time.NewTimer(wait)
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		wait = max(o.First, min(2*wait, o.Max))
	}
}

// RetryTimed is Retry with every try bounded: attempt gets a context that
// ends timeout after the try starts (or with ctx), so a request lost on
// its way (a stream electing its leader) costs one try, not the caller's
// whole deadline.
func RetryTimed(ctx context.Context, o RetryOptions, timeout time.Duration, attempt func(context.Context) error) error {
	return Retry(ctx, o, func() error {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return attempt(tctx)
	})
}
