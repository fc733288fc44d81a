package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
)

// versions is each rendered type's version and its resources' versions.
func versions(r *rendering) map[string]string {
	out := make(map[string]string)
	for _, t := range r.Types {
		out[t.Type] = t.Version
		for _, x := range t.Resources {
			out[t.Type+" "+x.Name] = x.Version
		}
	}
	return out
}

// lastSeq is the change stream's last sequence.
func lastSeq(ctx context.Context, t *testing.T, s *session) uint64 {
	t.Helper()
	st, err := s.js.Stream(ctx, s.names.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestRenderFromSnapshot: once the history is compacted, render starts
// from the snapshot and gives the same versions as before compaction, and
// a point older than the retention window and than the oldest snapshot is
// refused with a clear error.
func TestRenderFromSnapshot(t *testing.T) {
	_, dir, _, s := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	pf := proxyFlags{Proxy: adstest.WebNode}
	res, err := pf.resolve()
	if err != nil {
		t.Fatal(err)
	}
	old := lastSeq(ctx, t, s)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", adstest.EchoSlice("echo-1", []string{"10.244.0.11", "10.244.0.12", "10.244.0.13"}))
	testutil.Eventually(t, "the endpoint change on the stream", func() bool { return lastSeq(ctx, t, s) > old })
	now := lastSeq(ctx, t, s)
	before, err := renderAt(ctx, s, res, point{Seq: now}, nil)
	if err != nil {
		t.Fatal(err)
	}

	clock := time.Now()
	snap := snapshot.New(snapshot.Options{JS: s.js, Names: s.names, Retention: time.Hour, Now: func() time.Time { return clock }})
	defer snap.Close()
	if _, err := snap.Step(ctx); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Hour)
	in, err := snap.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Seq != now {
		t.Fatalf("snapshot at %d, want %d", in.Seq, now)
	}

	for _, at := range []point{{Seq: now}, {}} {
		after, err := renderAt(ctx, s, res, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(versions(before), versions(after)); diff != "" {
			t.Errorf("render --at %s after compaction (-before +after):\n%s", at, diff)
		}
	}
	rep, err := replayModel(ctx, s, point{}, nil)
	if err != nil || rep.Snapshot != now {
		t.Errorf("replay started from snapshot %v (%v), want %d", rep.Snapshot, err, now)
	}

	_, err = renderAt(ctx, s, res, point{Seq: old}, nil)
	if err == nil || !strings.Contains(err.Error(), "older than the history keeps") {
		t.Errorf("render --at %d (before the horizon) = %v, want an error saying it is older than the history keeps", old, err)
	}
}
