package bus_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// TestReplayPullSize: a replay pull takes as many records as fit in
// ReplayPullBytes at the stream's average size, between nats.go's 500 and
// ReplayPullMessages.
func TestReplayPullSize(t *testing.T) {
	for _, tc := range []struct {
		name        string
		msgs, bytes uint64
		want        int
	}{
		{"empty stream", 0, 0, bus.ReplayPullMessages},
		{"1 KiB records", 20000, 20000 << 10, bus.ReplayPullMessages},
		{"8 KiB records", 1000, 1000 << 13, 2048},
		{"16 KiB records", 1000, 1000 << 14, 1024},
		{"100 KiB records: no fewer than nats.go's default", 1000, 1000 * 100 << 10, 500},
		{"1 MiB records", 100, 100 << 20, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bus.ReplayPullSize(jetstream.StreamState{Msgs: tc.msgs, Bytes: tc.bytes}); got != tc.want {
				t.Errorf("ReplayPullSize(%d records, %d bytes) = %d, want %d", tc.msgs, tc.bytes, got, tc.want)
			}
		})
	}
}
