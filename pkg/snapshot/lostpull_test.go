package snapshot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestCatchUpAfterALostPull: a pull request the server never gets leaves
// the snapshotter's catch-up consumer waiting until it misses two idle
// heartbeats. With nats.go's defaults (30 s pulls, 15 s heartbeats) that
// outlasts the 5 s a catch-up waits for progress, so the cycle ended with
// nothing read and wrote no snapshot (a snapshot one Interval late, every
// time a pull is lost). The test loses the first pull for real: the
// server refuses the snapshotter's pull requests until one is refused,
// then takes them again. The Step must still read the whole stream.
func TestCatchUpAfterALostPull(t *testing.T) {
	srv := natstest.StartPullRefuser(t)
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	names := bus.Names{Prefix: "pw"}
	_, admin := srv.Admin(t)
	stream, err := bus.EnsureStream(ctx, admin, names.ChangesConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, js: admin, names: names, stream: stream, now: time.Now()}
	var last uint64
	for i := range 20 {
		last = f.put(fmt.Sprintf("svc-%d", i), pb.Op_OP_ADD, `{"kind":"Service"}`)
	}

	_, js := srv.Service(t)
	reg := prometheus.NewRegistry()
	s := New(Options{JS: js, Names: names, Retention: time.Hour, Now: func() time.Time { return f.now }, Registerer: reg})
	t.Cleanup(s.Close)
	// The bucket and the stream are opened before any pull is refused.
	if err := s.start(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Refuse(t, true)
	type result struct {
		in  Info
		err error
	}
	done := make(chan result, 1)
	go func() {
		in, err := s.Step(ctx)
		done <- result{in, err}
	}()
	testutil.Eventually(t, "a pull request of the catch-up refused", func() bool { return srv.Refused() > 0 })
	srv.Refuse(t, false)

	r := testutil.Receive(t, done, "the Step's result")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.in.Seq != last || r.in.Objects != 20 {
		t.Fatalf("Step after a lost pull = snapshot at seq %d with %d objects, want seq %d with 20", r.in.Seq, r.in.Objects, last)
	}
	if n := testutil.Metric(reg, `pilotwire_snapshot_errors_total{op="consumer"}`); n < 1 {
		t.Errorf("consumer errors counted: %v, want at least the missed heartbeats", n)
	}
}
