package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// TestRetentionOptions: the retention a service is configured with reaches
// the streams, and the defaults are what the docs say: no hard limit on
// CHANGES (compaction bounds it), 24 h and 1 GiB on DELIVERIES.
func TestRetentionOptions(t *testing.T) {
	n := bus.Names{Prefix: "pw"}

	tests := []struct {
		name            string
		opts            bus.StreamOptions
		changesAge      time.Duration
		changesBytes    int64
		deliveriesAge   time.Duration
		deliveriesBytes int64
	}{
		{name: "defaults", changesBytes: -1, deliveriesAge: 24 * time.Hour, deliveriesBytes: bus.DefaultDeliveriesMaxBytes},
		{
			name:       "configured",
			opts:       bus.StreamOptions{ChangesMaxAge: 720 * time.Hour, ChangesMaxBytes: 8 << 30, DeliveriesMaxAge: time.Hour, DeliveriesMaxBytes: 64 << 20},
			changesAge: 720 * time.Hour, changesBytes: 8 << 30, deliveriesAge: time.Hour, deliveriesBytes: 64 << 20,
		},
		{name: "deliveries unbounded in bytes", opts: bus.StreamOptions{DeliveriesMaxBytes: -1}, changesBytes: -1, deliveriesAge: 24 * time.Hour, deliveriesBytes: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A server of its own per case: deleting a stream and creating
			// it again at once races nats-server's file store, which renames
			// the deleted stream's directory and removes it in the
			// background; a second delete before that removal ends fails
			// and leaves the directory behind (CI saw "error creating store
			// for stream").
			ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
			defer cancel()
			_, js := natstest.Connect(t, natstest.Start(t))
			changes, err := bus.EnsureStream(ctx, js, n.ChangesConfig(tt.opts))
			if err != nil {
				t.Fatal(err)
			}
			deliveries, err := bus.EnsureStream(ctx, js, n.DeliveriesConfig(tt.opts))
			if err != nil {
				t.Fatal(err)
			}
			c, d := changes.CachedInfo().Config, deliveries.CachedInfo().Config
			if c.MaxAge != tt.changesAge || c.MaxBytes != tt.changesBytes {
				t.Errorf("CHANGES max age %v, bytes %d; want %v, %d", c.MaxAge, c.MaxBytes, tt.changesAge, tt.changesBytes)
			}
			if d.MaxAge != tt.deliveriesAge || d.MaxBytes != tt.deliveriesBytes {
				t.Errorf("DELIVERIES max age %v, bytes %d; want %v, %d", d.MaxAge, d.MaxBytes, tt.deliveriesAge, tt.deliveriesBytes)
			}
		})
	}
}
