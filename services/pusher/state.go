package pusher

import (
	"strings"
	"time"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// connState is one connection as the pusher sees it.
type connState struct {
	info   *pb.ConnectionInfo
	synced uint64 // highest of the registry's and the done reports' synced_seq
	// queued is the highest through_seq queued or in flight for it.
	queued uint64
	// retried: re-queued once after a timeout or failure, not again.
	retried bool
}

// inflight is one dispatched order awaiting its PushDone.
type inflight struct {
	conn     string
	frontend string
	req      *request
	deadline time.Time
	retried  bool
}

// parseKey splits a registry key into its kind ("fe" or "conn") and ids.
func parseKey(key string) (kind, frontend, conn string, ok bool) {
	parts := strings.Split(key, ".")
	switch {
	case len(parts) == 2 && parts[0] == "fe":
		fe, err := bus.UnescapeToken(parts[1])
		return "fe", fe, "", err == nil
	case len(parts) == 3 && parts[0] == "conn":
		fe, err1 := bus.UnescapeToken(parts[1])
		c, err2 := bus.UnescapeToken(parts[2])
		return "conn", fe, c, err1 == nil && err2 == nil
	}
	return "", "", "", false
}
