package pusher

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// fullOrders returns the through_seq of every full order a connection got.
func (f *fakeFrontend) fullOrders(conn string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint64
	for _, o := range f.orders {
		if o.GetConnId() == conn && o.GetFull() {
			out = append(out, o.GetThroughSeq())
		}
	}
	return out
}

// TestOvertakenFullPushReachesEveryone (issue 12 row 1): with EDS debounce
// off, an endpoint-only request through 101 is emitted before the full
// request through 100. Scoping the first must not mark connections synced
// past 100, or the full request is skipped for everyone.
func TestOvertakenFullPushReachesEveryone(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: onceHeartbeatTimeout})
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("c-b", 0, "outbound|80||b.ns.svc.cluster.local")
	fe.register("c-none", 0)
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == 2 })

	// Endpoints of a service neither connection watches, through 101...
	h.push(t, &pb.PushRequest{ThroughSeq: 101, FirstSeq: 101, Covered: []*pb.SeqRange{{First: 101, Last: 101}},
		Reasons: map[string]int32{"endpoint": 1}, ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a"}}})
	// ...then the full request it overtook, through 100.
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 100, FirstSeq: 1, Covered: []*pb.SeqRange{{First: 1, Last: 100}},
		Reasons: map[string]int32{"config": 1}})
	testutil.Eventually(t, "both requests consumed", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == 2 })
	for _, c := range []string{"c-b", "c-none"} {
		testutil.Eventually(t, c+" got the full push", func() bool {
			for _, s := range fe.fullOrders(c) {
				if s >= 100 {
					return true
				}
			}
			return false
		})
	}
}

func TestSyncState(t *testing.T) {
	tests := []struct {
		name    string
		start   uint64
		skip    [][]seqRange // applied in order
		advance uint64       // applied after the skips
		want    syncState
	}{
		{name: "in order joins at once", start: 5, skip: [][]seqRange{{{6, 8}}}, want: syncState{synced: 8}},
		{name: "overtaking request waits for the gap", start: 89, skip: [][]seqRange{{{101, 101}}}, want: syncState{synced: 89, skipped: []seqRange{{101, 101}}}},
		{name: "gap filled by a later skip", start: 89, skip: [][]seqRange{{{101, 101}}, {{90, 100}}}, want: syncState{synced: 101}},
		{name: "gap filled by a done", start: 89, skip: [][]seqRange{{{101, 101}}}, advance: 100, want: syncState{synced: 101}},
		{name: "done past skipped ranges drops them", start: 1, skip: [][]seqRange{{{5, 6}, {9, 9}}}, advance: 20, want: syncState{synced: 20}},
		{name: "interleaved ranges merge", start: 1, skip: [][]seqRange{{{4, 4}, {8, 8}}, {{6, 6}}, {{5, 5}, {7, 7}}}, want: syncState{synced: 1, skipped: []seqRange{{4, 8}}}},
		{name: "ranges below synced ignored", start: 10, skip: [][]seqRange{{{3, 7}}}, want: syncState{synced: 10}},
		{name: "range straddling synced", start: 10, skip: [][]seqRange{{{3, 12}}}, want: syncState{synced: 12}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := syncState{synced: tc.start}
			for _, rs := range tc.skip {
				s.skip(rs)
			}
			s.advance(tc.advance)
			if diff := cmp.Diff(tc.want, s, cmp.AllowUnexported(syncState{}, seqRange{})); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSyncStateBounded(t *testing.T) {
	var s syncState
	for i := range uint64(4 * maxSkipped) {
		s.skip([]seqRange{{10 + 2*i, 10 + 2*i}})
	}
	if len(s.skipped) != maxSkipped {
		t.Fatalf("skipped ranges = %d, want %d", len(s.skipped), maxSkipped)
	}
}
