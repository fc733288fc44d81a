package svc

import (
	"context"
	"time"
)

// Retry calls attempt until it succeeds or ctx ends, waiting between tries
// from first, doubling up to max. failed, if set, hears of each failure and
// the wait before the next try. It returns nil on success, ctx's error
// otherwise.
func Retry(ctx context.Context, first, max time.Duration, attempt func() error, failed func(err error, wait time.Duration)) error {
	wait := first
	for {
		err := attempt()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if failed != nil {
			failed(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, max)
	}
}
