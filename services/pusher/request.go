package pusher

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// request is what is queued for one connection: the merge of every
// PushRequest (or catch-up) that reached it since its last dispatch.
type request struct {
	full     bool
	through  uint64
	keys     map[keyID]*pb.ConfigKey
	reasons  map[string]int32
	enqueued time.Time
	start    time.Time // earliest change observed; zero if unknown
	// covered: the sequences of the PushRequest it was made from (nil once
	// merged or for a catch-up); scoping marks them skipped.
	covered []seqRange

	sortOnce sync.Once
	sorted   []*pb.ConfigKey // keys in order, set by sortedKeys
}

type keyID struct{ kind, ns, name, cluster string }

func newRequest(pr *pb.PushRequest, now time.Time) *request {
	r := &request{
		full:     pr.GetFull(),
		through:  pr.GetThroughSeq(),
		keys:     make(map[keyID]*pb.ConfigKey, len(pr.GetConfigKeys())),
		reasons:  maps.Clone(pr.GetReasons()),
		enqueued: now,
		covered:  coveredRanges(pr),
	}
	if pr.GetStart() != nil {
		r.start = pr.GetStart().AsTime()
	}
	for _, k := range pr.GetConfigKeys() {
		r.keys[keyID{k.GetKind(), k.GetNamespace(), k.GetName(), k.GetCluster()}] = k
	}
	return r
}

// catchUp is the request for a connection found behind the latest sequence:
// a full push, since what it missed is unknown.
func catchUp(through uint64, now time.Time) *request {
	return &request{full: true, through: through, reasons: map[string]int32{"catchup": 1}, enqueued: now}
}

// Merge folds o into r (Istio's PushRequest.Merge): full OR-ed, keys and
// reasons unioned, the highest sequence and the earliest enqueue time kept.
func (r *request) Merge(o *request) *request {
	if r == nil {
		return o
	}
	if o == nil {
		return r
	}
	out := &request{
		full:     r.full || o.full,
		through:  max(r.through, o.through),
		keys:     make(map[keyID]*pb.ConfigKey, len(r.keys)+len(o.keys)),
		reasons:  make(map[string]int32, len(r.reasons)+len(o.reasons)),
		enqueued: r.enqueued,
	}
	if o.enqueued.Before(out.enqueued) {
		out.enqueued = o.enqueued
	}
	out.start = r.start
	if out.start.IsZero() || (!o.start.IsZero() && o.start.Before(out.start)) {
		out.start = o.start
	}
	maps.Copy(out.keys, r.keys)
	maps.Copy(out.keys, o.keys)
	for k, v := range r.reasons {
		out.reasons[k] += v
	}
	for k, v := range o.reasons {
		out.reasons[k] += v
	}
	return out
}

func (r *request) order(connID string, pushID uint64) *pb.PushOrder {
	o := &pb.PushOrder{
		ConnId:     connID,
		PushId:     pushID,
		Full:       r.full,
		Reasons:    r.reasons,
		ThroughSeq: r.through,
		EnqueuedAt: timestamppb.New(r.enqueued),
		ConfigKeys: r.sortedKeys(),
	}
	if !r.start.IsZero() {
		o.Start = timestamppb.New(r.start)
	}
	return o
}

// sortedKeys is the request's config keys in a stable order, computed once:
// one request is queued for every connection it reaches, and dispatchers of
// several frontends share it. Orders share the slice and must not change it.
func (r *request) sortedKeys() []*pb.ConfigKey {
	r.sortOnce.Do(func() {
		if len(r.keys) == 0 {
			return
		}
		r.sorted = slices.SortedFunc(maps.Values(r.keys), func(a, b *pb.ConfigKey) int {
			return cmp.Or(
				strings.Compare(a.GetKind(), b.GetKind()),
				strings.Compare(a.GetNamespace(), b.GetNamespace()),
				strings.Compare(a.GetName(), b.GetName()),
				strings.Compare(a.GetCluster(), b.GetCluster()),
			)
		})
	})
	return r.sorted
}

// pushTypeOf labels an order in metrics.
func pushTypeOf(o *pb.PushOrder) string {
	if o.GetFull() {
		return "full"
	}
	return "eds"
}
