package pusher

import (
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func seedPushRequests() [][]byte {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	svc := &pb.ConfigKey{Kind: "Service", Namespace: "a", Name: "x"}
	vs := &pb.ConfigKey{Kind: "VirtualService", Namespace: "a", Name: "x", Cluster: "c1"}
	var out [][]byte
	for _, pr := range []*pb.PushRequest{
		{ThroughSeq: 3, FirstSeq: 1, ConfigKeys: []*pb.ConfigKey{svc}, Reasons: map[string]int32{"endpoint": 3}, Start: timestamppb.New(t0)},
		{Full: true, ThroughSeq: 7, ConfigKeys: []*pb.ConfigKey{vs}, Reasons: map[string]int32{"config": 1}},
		{Full: true, ThroughSeq: 2, Reasons: map[string]int32{"catchup": 1}, Start: timestamppb.New(t0.Add(-time.Second))},
		{ThroughSeq: 9, FirstSeq: 4, Covered: []*pb.SeqRange{{First: 4, Last: 5}, {First: 9, Last: 9}}, ConfigKeys: []*pb.ConfigKey{svc, vs}},
	} {
		b, _ := proto.Marshal(pr)
		out = append(out, b)
	}
	return out
}

// mergeView is what a merged request means to the dispatch: compared as a
// value.
type mergeView struct {
	full     bool
	through  uint64
	keys     map[keyID]bool
	reasons  map[string]int32
	enqueued time.Time
	start    time.Time
}

func viewOf(r *request) mergeView {
	v := mergeView{full: r.full, through: r.through, keys: map[keyID]bool{}, reasons: maps.Clone(r.reasons), enqueued: r.enqueued, start: r.start}
	for k := range r.keys {
		v.keys[k] = true
	}
	if len(v.reasons) == 0 {
		v.reasons = nil
	}
	return v
}

func (v mergeView) equal(o mergeView) bool {
	return v.full == o.full && v.through == o.through && maps.Equal(v.keys, o.keys) && maps.Equal(v.reasons, o.reasons) &&
		v.enqueued.Equal(o.enqueued) && v.start.Equal(o.start)
}

// FuzzRequestMerge checks the pusher's merge of queued PushRequests (Istio's
// PushRequest.Merge) on what the dispatch uses: it is associative and
// commutative, loses no config key, is full when any part is, keeps the
// highest sequence and the earliest enqueue and change times, and nil is
// its identity.
func FuzzRequestMerge(f *testing.F) {
	seeds := seedPushRequests()
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)], seeds[(i+2)%len(seeds)], uint16(i), uint16(3*i))
	}
	f.Fuzz(func(t *testing.T, da, db, dc []byte, ea, eb uint16) {
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var prs [3]*pb.PushRequest
		for i, d := range [][]byte{da, db, dc} {
			prs[i] = &pb.PushRequest{}
			if proto.Unmarshal(d, prs[i]) != nil {
				return
			}
		}
		mk := func() (a, b, c *request) {
			return newRequest(prs[0], base.Add(time.Duration(ea)*time.Millisecond)),
				newRequest(prs[1], base.Add(time.Duration(eb)*time.Millisecond)),
				newRequest(prs[2], base)
		}
		a, b, c := mk()
		left := viewOf(a.Merge(b).Merge(c))
		a, b, c = mk()
		right := viewOf(a.Merge(b.Merge(c)))
		a, b, c = mk()
		swapped := viewOf(c.Merge(a).Merge(b))
		if !left.equal(right) || !left.equal(swapped) {
			t.Fatalf("merge not associative and commutative:\n(a+b)+c %+v\na+(b+c) %+v\n(c+a)+b %+v", left, right, swapped)
		}
		a, _, _ = mk()
		if !viewOf(a.Merge(nil)).equal(viewOf(a)) || !viewOf((*request)(nil).Merge(a)).equal(viewOf(a)) {
			t.Fatal("nil is not the identity of Merge")
		}
		a, b, c = mk()
		full, through := false, uint64(0)
		for _, r := range []*request{a, b, c} {
			for k := range r.keys {
				if !left.keys[k] {
					t.Fatalf("merge lost config key %+v", k)
				}
			}
			full = full || r.full
			through = max(through, r.through)
			if r.enqueued.Before(left.enqueued) {
				t.Fatalf("merge enqueued at %v, after a part's %v", left.enqueued, r.enqueued)
			}
			if !r.start.IsZero() && (left.start.IsZero() || r.start.Before(left.start)) {
				t.Fatalf("merge start %v, after a part's %v", left.start, r.start)
			}
		}
		if left.full != full || left.through != through {
			t.Fatalf("merge full=%v through=%d, want full=%v through=%d", left.full, left.through, full, through)
		}
		for k := range left.keys {
			if a.keys[k] == nil && b.keys[k] == nil && c.keys[k] == nil {
				t.Fatalf("merge invented config key %+v", k)
			}
		}
	})
}

// FuzzSyncedRanges checks what the pusher knows a connection reflects,
// against a plain set of sequences: after any advances and skipped
// (scoped-out) ranges, synced never passes a sequence that was neither
// reflected nor skipped, the skipped ranges stay ascending and disjoint
// above synced, and no skipped sequence is lost (while under maxSkipped).
func FuzzSyncedRanges(f *testing.F) {
	f.Add([]byte{0, 3, 1, 5, 6, 1, 8, 9, 0, 4, 1, 7, 7})
	f.Add([]byte{1, 10, 20, 1, 2, 9, 0, 1, 1, 21, 30, 0, 30})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var s syncState
		in := map[uint64]bool{} // sequences reflected or skipped
		forgot := false
		for i := 0; i+3 <= len(ops); i += 3 {
			switch ops[i] % 2 {
			case 0: // a PushDone or registry report: synced up to n
				n := uint64(ops[i+1])
				for k := uint64(1); k <= n; k++ {
					in[k] = true
				}
				s.advance(n)
			case 1: // a scoped-out request covering [first, last]
				r := seqRange{uint64(ops[i+1]), uint64(ops[i+2])}
				if r.first > r.last || r.first == 0 {
					continue
				}
				for k := r.first; k <= r.last; k++ {
					in[k] = true
				}
				forgot = forgot || len(s.skipped) >= maxSkipped
				s.skip([]seqRange{r})
			}
			for k := uint64(1); k <= s.synced; k++ {
				if !in[k] {
					t.Fatalf("synced %d passes sequence %d, never reflected nor skipped", s.synced, k)
				}
			}
			prev := s.synced
			for _, r := range s.skipped {
				if r.first > r.last || r.first <= prev+1 {
					t.Fatalf("skipped %v not ascending, disjoint and above synced %d+1", s.skipped, s.synced)
				}
				for k := r.first; k <= r.last; k++ {
					if !in[k] {
						t.Fatalf("skipped range %v holds %d, never skipped", r, k)
					}
				}
				prev = r.last
			}
			if forgot {
				continue
			}
			for k := range in {
				if k > s.synced && !covers(s.skipped, k) {
					t.Fatalf("sequence %d lost: synced %d, skipped %v", k, s.synced, s.skipped)
				}
			}
		}
	})
}

func covers(rs []seqRange, k uint64) bool {
	for _, r := range rs {
		if r.first <= k && k <= r.last {
			return true
		}
	}
	return false
}
