package debouncer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// nats.go's own leak on an object store Put (natstest.UpstreamLeaks) is
// ignored; every other goroutine is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...) }

var names, _ = bus.NewNames("pw")

type instance struct {
	nc     *nats.Conn
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	stop   func() error // ends the instance and returns Run's error; idempotent
}

// activeDebouncer starts a NATS server with the streams and one debouncer,
// "a", debouncing after the given quiet time, and waits until it is
// active. It returns the server's URL, a JetStream context, the debounce
// config (for more instances) and the instance.
func activeDebouncer(t *testing.T, after time.Duration) (string, jetstream.JetStream, debounce.Config, *instance) {
	t.Helper()
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	dcfg := debounce.DefaultConfig()
	dcfg.DebounceAfter = after
	a := startDebouncer(t, url, "a", dcfg)
	testutil.Eventually(t, "a active", a.leader)
	return url, js, dcfg, a
}

// startDebouncer runs one debouncer instance with its own connection.
func startDebouncer(t *testing.T, url, id string, dcfg debounce.Config) *instance {
	t.Helper()
	return startWith(t, url, id, func(c *Config) { c.Debounce = dcfg })
}

// startWith runs one debouncer instance with its own connection, its
// config adjusted by mod.
func startWith(t *testing.T, url, id string, mod func(*Config)) *instance {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	return startOn(t, nc, js, url, id, mod)
}

// startOn runs one debouncer instance on a connection the test opened.
func startOn(t *testing.T, nc *nats.Conn, js jetstream.JetStream, url, id string, mod func(*Config)) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{nc: nc, reg: prometheus.NewRegistry(), cancel: cancel, done: make(chan error, 1)}
	cfg := Config{
		Common:   svc.Common{NATSURL: url, Prefix: "pw"},
		Debounce: debounce.DefaultConfig(),
		ID:       id,
		LeaseTTL: 600 * time.Millisecond,
	}
	mod(&cfg)
	go func() {
		in.done <- Run(ctx, cfg, svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler).With("id", id), Reg: in.reg, Health: &svc.Health{}})
	}()
	in.stop = sync.OnceValue(func() error {
		cancel()
		err, _ := testutil.Stopped(t, in.done, "debouncer "+id+"'s Run")
		return err
	})
	t.Cleanup(func() {
		if err := in.stop(); err != nil {
			t.Errorf("debouncer %s: %v", id, err)
		}
	})
	return in
}

func (in *instance) leader() bool {
	mfs, _ := in.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "pilotwire_debouncer_leader" {
			return mf.GetMetric()[0].GetGauge().GetValue() == 1
		}
	}
	return false
}

func setupStreams(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	for _, c := range []jetstream.StreamConfig{names.ChangesConfig(bus.StreamOptions{}), names.PushesConfig(bus.StreamOptions{})} {
		if _, err := bus.EnsureStream(ctx, js, c); err != nil {
			t.Fatal(err)
		}
	}
}

// publishChange writes one change record; endpoint ones are EndpointSlices.
func publishChange(ctx context.Context, t *testing.T, js jetstream.JetStream, i int, endpoint bool) {
	t.Helper()
	ref := &pb.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: fmt.Sprintf("cm-%d", i%50)}
	obj := map[string]any{"metadata": map[string]any{"name": ref.Name, "namespace": "ns"}}
	if endpoint {
		ref = &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: fmt.Sprintf("svc-%d-x", i%20)}
		obj = map[string]any{"metadata": map[string]any{"name": ref.Name, "namespace": "ns", "labels": map[string]any{"kubernetes.io/service-name": fmt.Sprintf("svc-%d", i%20)}}}
	}
	b, _ := json.Marshal(obj)
	data, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: pb.Op_OP_UPDATE, Object: b, ResourceVersion: fmt.Sprint(i)})
	natstest.PublishAsync(t, js, names.ChangeSubject("c1", ref), data)
}

// pushRequests reads every PushRequest in the stream.
func pushRequests(t *testing.T, js jetstream.JetStream) []*pb.PushRequest {
	t.Helper()
	var out []*pb.PushRequest
	for _, m := range natstest.ReadStream(t, js, names.PushesStream()) {
		pr := &pb.PushRequest{}
		if err := proto.Unmarshal(m.Data, pr); err != nil {
			t.Fatal(err)
		}
		out = append(out, pr)
	}
	return out
}

// coverage counts how many requests cover each sequence.
func coverage(prs []*pb.PushRequest) map[uint64]int {
	c := map[uint64]int{}
	for _, pr := range prs {
		for _, r := range pr.GetCovered() {
			for s := r.GetFirst(); s <= r.GetLast(); s++ {
				c[s]++
			}
		}
	}
	return c
}

func waitCovered(t *testing.T, js jetstream.JetStream, n int) []*pb.PushRequest {
	t.Helper()
	deadline := time.Now().Add(testutil.DefaultTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		prs := pushRequests(t, js)
		if len(coverage(prs)) >= n {
			return prs
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d changes covered by %d push requests", len(coverage(prs)), n, len(prs))
		}
		<-tick.C
	}
}

func checkExactlyOnce(t *testing.T, prs []*pb.PushRequest, n int) {
	t.Helper()
	cov := coverage(prs)
	for s := uint64(1); s <= uint64(n); s++ {
		if cov[s] != 1 {
			t.Errorf("change seq %d is in %d push requests, want exactly 1", s, cov[s])
		}
	}
	if len(cov) != n {
		t.Errorf("push requests cover %d sequences, want %d", len(cov), n)
	}
	merged := 0
	for _, pr := range prs {
		merged += int(pr.GetMergedEvents())
	}
	if merged != n {
		t.Errorf("merged events sum to %d, want %d", merged, n)
	}
}

// TestBurstBecomesAFewPushes: 1,000 change records over about 2 s (bursts
// 50 ms apart, inside the 100 ms quiet window) become a handful of
// PushRequests covering every record exactly once.
func TestBurstBecomesAFewPushes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	startDebouncer(t, url, "a", debounce.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const n = 1000
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		publishChange(ctx, t, js, i, i%3 == 0)
		if i%25 == 24 {
			<-tick.C // pacing the producer, not waiting for state
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishes not acknowledged")
	}
	prs := waitCovered(t, js, n)
	checkExactlyOnce(t, prs, n)
	if len(prs) > 10 {
		t.Errorf("%d push requests for one 2 s burst, want a handful (<= 10)", len(prs))
	}
	last := prs[len(prs)-1]
	if !last.GetFull() || last.GetReasons()["endpoint"] == 0 || last.GetReasons()["config"] == 0 {
		t.Errorf("merged request: full=%v reasons=%v, want full with endpoint and config reasons", last.GetFull(), last.GetReasons())
	}
	t.Logf("%d records -> %d push requests", n, len(prs))
}

// TestStandbyTakesOverMidBurst kills the active debouncer's connection in
// the middle of a burst: the standby takes over and every change ends up in
// exactly one PushRequest.
func TestStandbyTakesOverMidBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	setupStreams(t, js)
	dcfg := debounce.DefaultConfig()
	dcfg.DebounceAfter = 30 * time.Millisecond
	a := startDebouncer(t, url, "a", dcfg)
	testutil.Eventually(t, "a active", a.leader)
	b := startDebouncer(t, url, "b", dcfg)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const n = 1000
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		publishChange(ctx, t, js, i, i%2 == 0)
		if i%50 == 49 {
			<-tick.C // pacing: quiet windows close now and then
		}
		if i == n/2 {
			a.nc.Close() // a dies: it can neither ack nor renew its lease
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishes not acknowledged")
	}
	testutil.Eventually(t, "b active", b.leader)
	prs := waitCovered(t, js, n)
	checkExactlyOnce(t, prs, n)
}

func waitPublished(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishes not acknowledged")
	}
}

// waitStored fails the test unless the change stream holds n records
// (an async publish whose ack timed out may not have been stored).
func waitStored(ctx context.Context, t *testing.T, js jetstream.JetStream, n uint64) {
	t.Helper()
	s, err := js.Stream(ctx, names.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("change stream holds %d records, want %d", info.State.Msgs, n)
	}
}
