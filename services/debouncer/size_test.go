package debouncer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// testMaxRequestBytes is the default bound on a PushRequest's size.
const testMaxRequestBytes = 512 << 10

// publishPod writes one Pod change record with a long name.
func publishPod(t *testing.T, js jetstream.JetStream, i int) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", strings.Repeat("p", 200), i)
	ref := &pb.ObjectRef{Version: "v1", Kind: "Pod", Namespace: "ns", Name: name}
	obj, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name, "namespace": "ns"}})
	data, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: pb.Op_OP_UPDATE, Object: obj, ResourceVersion: fmt.Sprint(i)})
	natstest.PublishAsync(t, js, names.ChangeSubject("c1", ref), data)
}

// TestOversizedRequestBecomesFull (issue 12 row 2): 8,000 Pods in one
// burst (a first start on a big stream) would make a 1.8 MB PushRequest.
// Past the size bound the request drops its keys and becomes full, so
// every request is small and nothing is retried.
func TestOversizedRequestBecomesFull(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const n = 8000
	for i := range n {
		publishPod(t, js, i)
		if i%500 == 499 {
			waitPublished(ctx, t, js) // a bounded number in flight
		}
	}
	waitPublished(ctx, t, js)
	waitStored(ctx, t, js, n)
	a := startDebouncer(t, url, "a", debounce.DefaultConfig())
	prs := waitCovered(t, js, n)
	checkExactlyOnce(t, prs, n)
	oversized := 0
	for _, pr := range prs {
		if size := proto.Size(pr); size > testMaxRequestBytes {
			t.Errorf("push request through %d is %d bytes, want at most %d", pr.GetThroughSeq(), size, testMaxRequestBytes)
		}
		if pr.GetFull() && len(pr.GetConfigKeys()) == 0 {
			oversized++
		}
	}
	if oversized == 0 {
		t.Errorf("no request became a full push without keys; requests: %d", len(prs))
	}
	if got := testutil.Metric(a.reg, "pilotwire_debounce_publish_errors_total"); got != 0 {
		t.Errorf("%v publish errors, want 0", got)
	}
	if got := testutil.Metric(a.reg, "pilotwire_debounce_oversized_requests_total"); got == 0 {
		t.Errorf("pilotwire_debounce_oversized_requests_total = 0, want the oversized request counted")
	}
}

func TestRequestBound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		configured int
		maxPayload int64
		streamMax  int32
		want       int
	}{
		{name: "configured under both", configured: 512 << 10, maxPayload: 8 << 20, streamMax: -1, want: 512 << 10},
		{name: "half the server's max payload", configured: 512 << 10, maxPayload: 512 << 10, streamMax: -1, want: 256 << 10},
		{name: "half the stream's max message", configured: 512 << 10, maxPayload: 8 << 20, streamMax: 100 << 10, want: 50 << 10},
		{name: "nothing known", configured: 100 << 10, want: 100 << 10},
		{name: "never below the minimum", configured: 1000, maxPayload: 8 << 20, want: minRequestBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := requestBound(tc.configured, tc.maxPayload, tc.streamMax); got != tc.want {
				t.Errorf("requestBound = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestFitJoinsCoveredOverCarriedGaps: a full request whose covered ranges
// alone are too long joins them over sequences earlier requests carried,
// and never over one still pending (that would publish it twice).
func TestFitJoinsCoveredOverCarriedGaps(t *testing.T) {
	many := func() *pb.PushRequest {
		pr := &pb.PushRequest{FirstSeq: 1, ThroughSeq: 2001}
		for s := uint64(1); s <= 2001; s += 2 {
			pr.Covered = append(pr.Covered, &pb.SeqRange{First: s, Last: s})
		}
		return pr
	}
	for _, tc := range []struct {
		name    string
		carried func(uint64) bool
		how     string
		want    []*pb.SeqRange
	}{
		{name: "gaps carried earlier", carried: func(uint64) bool { return true }, how: fitJoined,
			want: []*pb.SeqRange{{First: 1, Last: 2001}}},
		{name: "one gap pending", carried: func(s uint64) bool { return s != 1000 }, how: fitJoined,
			want: []*pb.SeqRange{{First: 1, Last: 999}, {First: 1001, Last: 2001}}},
		// Joining over pending sequences would list them here and again in
		// the request that carries them: published twice. The ranges stay.
		{name: "every gap pending", carried: func(uint64) bool { return false }, how: "over",
			want: many().GetCovered()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := many()
			if how := fit(pr, 1000, tc.carried); how != tc.how {
				t.Errorf("fit = %q, want %q", how, tc.how)
			}
			if diff := cmp.Diff(tc.want, pr.GetCovered(), protocmp.Transform()); diff != "" {
				t.Errorf("covered (-want +got):\n%s", diff)
			}
			if !pr.GetFull() || len(pr.GetConfigKeys()) != 0 {
				t.Errorf("full=%v keys=%d, want a full push without keys", pr.GetFull(), len(pr.GetConfigKeys()))
			}
		})
	}
}
