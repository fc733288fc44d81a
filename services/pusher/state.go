package pusher

import (
	"time"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// connState is one connection as the pusher sees it.
type connState struct {
	info *pb.ConnectionInfo
	// what its config reflects: the registry's and the done reports'
	// synced_seq, and the requests scoped out for it
	syncState
	// queued is the highest through_seq queued or in flight for it.
	queued uint64
	// pushID is the order in flight for it (0: none).
	pushID uint64
	// resyncAt: when a catch-up is due if it is still behind then (zero:
	// none scheduled); backoff: the wait before the one after it.
	resyncAt time.Time
	backoff  time.Duration
}

// inflight is one dispatched order awaiting its PushDone.
type inflight struct {
	conn     string
	frontend string
	req      *request
	deadline time.Time
}
