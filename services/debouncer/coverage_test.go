package debouncer

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestBypassRequestSaysWhatItOvertook (issue 12 row 1): with EDS debounce
// off, an endpoint-only change goes out before a pending config change
// with a lower sequence. The request says so: its complete_through_seq
// stays below the pending sequence, and covered lists exactly its own.
func TestBypassRequestSaysWhatItOvertook(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	dcfg := debounce.DefaultConfig()
	dcfg.DebounceAfter = 300 * time.Millisecond
	dcfg.EnableEDSDebounce = false
	startDebouncer(t, url, "a", dcfg)
	publishChange(ctx, t, js, 0, true) // seq 1: svc-0's first slice, a full push
	waitPublished(ctx, t, js)
	waitCovered(t, js, 1)
	publishChange(ctx, t, js, 1, false) // seq 2: a config change, debounced
	publishChange(ctx, t, js, 20, true) // seq 3: svc-0's endpoints change, bypass
	waitPublished(ctx, t, js)
	prs := waitCovered(t, js, 3)
	type view struct {
		Covered                  []*pb.SeqRange
		Through, CompleteThrough uint64
	}
	var got []view
	for _, pr := range prs {
		got = append(got, view{pr.GetCovered(), pr.GetThroughSeq(), pr.GetCompleteThroughSeq()})
	}
	want := []view{
		{[]*pb.SeqRange{{First: 1, Last: 1}}, 1, 1},
		{[]*pb.SeqRange{{First: 3, Last: 3}}, 3, 1}, // overtook seq 2
		{[]*pb.SeqRange{{First: 2, Last: 2}}, 2, 3},
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("push requests (-want +got):\n%s", diff)
	}
}
