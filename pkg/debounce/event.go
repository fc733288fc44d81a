package debounce

import (
	"cmp"
	"time"
)

// UnknownReason is recorded for an event that names no reason, as Istio
// records model.UnknownTrigger.
const UnknownReason = "unknown"

// ConfigKey names one changed object.
type ConfigKey struct {
	Kind      string
	Namespace string
	Name      string
	// Cluster is the cluster the object came from; empty for config that
	// is not per cluster.
	Cluster string
}

// String renders the key as Kind/Namespace/Name, with @Cluster when set.
func (k ConfigKey) String() string {
	s := k.Kind + "/" + k.Namespace + "/" + k.Name
	if k.Cluster != "" {
		s += "@" + k.Cluster
	}
	return s
}

// Compare orders keys by Kind, Namespace, Name, then Cluster. It is the
// order of Request.ConfigKeys.
func (k ConfigKey) Compare(o ConfigKey) int {
	return cmp.Or(
		cmp.Compare(k.Kind, o.Kind),
		cmp.Compare(k.Namespace, o.Namespace),
		cmp.Compare(k.Name, o.Name),
		cmp.Compare(k.Cluster, o.Cluster),
	)
}

// Event is one change handed to the debouncer.
type Event struct {
	// Seq is the change-stream sequence of the change.
	Seq uint64
	// Full is false for an endpoint-only change, true for anything else.
	Full bool
	// ConfigKeys names the changed objects.
	ConfigKeys []ConfigKey
	// Reason says why a push is needed; empty becomes UnknownReason.
	Reason string
	// Start is when the change was observed upstream. Zero means the time
	// the event was added.
	Start time.Time
}

// Request is a merged push request, ready to publish.
type Request struct {
	// Full is true if any merged event was full.
	Full bool
	// ConfigKeys is the union of the merged events' keys, sorted by
	// ConfigKey.Compare, without duplicates.
	ConfigKeys []ConfigKey
	// Reasons counts the merged events by reason.
	Reasons map[string]int
	// Start is the earliest Start of the merged events.
	Start time.Time
	// FirstSeq and ThroughSeq are the lowest and highest merged sequences.
	FirstSeq, ThroughSeq uint64
	// Merged is the number of merged events.
	Merged int
	// Seqs lists the merged events' sequences in ascending order, one per
	// event (a sequence added twice is listed twice).
	Seqs []uint64
	// FirstAdded is when the first merged event was added: the start of
	// the debounce window (Istio's startDebounce), for the debounce-time
	// metric.
	FirstAdded time.Time
}
