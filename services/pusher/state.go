package pusher

import (
	"time"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// connState is one connection as the pusher sees it.
type connState struct {
	info *pb.ConnectionInfo
	// rev is the registry revision of the entry info came from.
	rev uint64
	// what its config reflects: the registry's and the done reports'
	// synced_seq, and the requests scoped out for it
	syncState
	// queued is the highest through_seq queued or in flight for it.
	queued uint64
	// scopeChange: the highest through_seq of a request queued for it
	// that may change its scope (a Sidecar change, a full push without
	// keys), or, when this pusher learnt of it, the latest sequence then;
	// its entry's scope is trusted only when computed at or above it.
	scopeChange uint64
	// eds indexes the load assignments info watches (nil: not built
	// since info changed; see watchedEDS).
	eds *edsWatches
	// edsList is the shared list of the connection's only load assignment
	// watch: its index is built once for every connection holding it.
	edsList *nameList
	// pushID is the order in flight for it (0: none).
	pushID uint64
	// ordered is the highest through_seq this pusher has ordered for it;
	// reorder: that order may not have taken effect (lost, or the watches
	// changed since), so one at the same sequence may be sent again.
	ordered uint64
	reorder bool
	// resyncAt: when a catch-up is due if it is still behind then (zero:
	// none scheduled); backoff: the wait before the one after it.
	resyncAt time.Time
	backoff  time.Duration
}

// setInfo records the connection's registry entry, with the shared list
// of its only load assignment watch (nil: none, or more than one).
func (c *connState) setInfo(info *pb.ConnectionInfo, eds *nameList) {
	c.info, c.eds, c.edsList = info, nil, eds
}

// inflight is one dispatched order awaiting its PushDone.
type inflight struct {
	conn     string
	frontend string
	req      *request
	deadline time.Time
}

// hasOrdered reports whether an order through seq would add nothing to
// what the connection has already been ordered (in flight or done): a
// frontend pushes from its whole model, which has applied at least the
// earlier order's sequence. Ordering it would be an order older than, or
// repeating, one the connection already got (a request redelivered after
// a take-over's catch-up, say). If the earlier order is lost, the resync
// that follows is at the latest sequence, so nothing it covered is lost.
func (c *connState) hasOrdered(seq uint64) bool {
	return seq < c.ordered || (seq == c.ordered && !c.reorder)
}

// setOrdered records an order through seq sent to the connection.
func (c *connState) setOrdered(seq uint64) {
	c.ordered, c.reorder = max(c.ordered, seq), false
}
