package pusher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var names, _ = bus.NewNames("pw")

var zeroTime time.Time

// fakeFrontend is a real NATS participant standing in for an ADS frontend:
// it registers connections and a heartbeat, records every order it gets, and
// answers with PushDone unless told to stay silent.
type fakeFrontend struct {
	t   testing.TB
	id  string
	nc  *nats.Conn
	kv  jetstream.KeyValue
	sub *nats.Subscription

	mu      sync.Mutex
	fence   pb.OrderFence
	dropped int // batches the fence dropped
	orders  []*pb.PushOrder
	silent  bool
	legacy  bool           // answer one PushDone per order on the reply subject, as frontends before PushDoneBatch
	held    []*pb.PushDone // with hold: completions not yet sent
	hold    bool           // keep completions in held until release
	batches int            // PushDoneBatch messages sent
	want    int            // when len(orders) reaches want, signal reached
	reached chan struct{}
}

// expect arms a signal for when the frontend has received n orders in all.
func (f *fakeFrontend) expect(n int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.want, f.reached = n, make(chan struct{})
	if len(f.orders) >= n {
		close(f.reached)
		f.reached = nil
	}
	return f.reached
}

// onceHeartbeatTimeout is the frontend timeout of tests that are not
// about expiry: a fake frontend writes its heartbeat once, and under the
// race detector on a loaded machine such a test can outlast the default
// 6 s, its frontend then forgotten with its connections.
const onceHeartbeatTimeout = time.Minute

func newFrontend(t testing.TB, url, id string) *fakeFrontend {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	// The pusher creates the bucket at the same time, and the server may
	// leave one of two concurrent creations unanswered (nats.go#949): the
	// bucket is opened as a frontend opens it, in bounded tries.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := svc.NewStreams(svc.Deps{JS: js, Log: testLogger()}).KV(ctx, names.RegistryConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFrontend{t: t, id: id, nc: nc, kv: kv}
	f.sub, err = nc.Subscribe(names.OrdersSubject(id), f.handle)
	if err != nil {
		t.Fatal(err)
	}
	f.heartbeat()
	return f
}

func (f *fakeFrontend) heartbeat() { f.heartbeatCores(0) }

// heartbeatCores writes the frontend's heartbeat saying it has cores.
func (f *fakeFrontend) heartbeatCores(cores int32) {
	b, _ := proto.Marshal(&pb.FrontendInfo{Id: f.id, OrdersSubject: names.OrdersSubject(f.id), Cores: cores})
	if _, err := f.kv.Put(context.Background(), bus.FrontendKey(f.id), b); err != nil {
		f.t.Errorf("heartbeat: %v", err)
	}
}

func (f *fakeFrontend) register(conn string, synced uint64, edsNames ...string) {
	ci := &pb.ConnectionInfo{ConnId: conn, Frontend: f.id, NodeId: "sidecar~1.1.1.1~" + conn + ".ns~ns.svc.cluster.local", SyncedSeq: synced,
		Watches: []*pb.Watch{{TypeUrl: resource.ClusterType, Wildcard: true}, {TypeUrl: resource.EndpointType, Names: edsNames}}}
	b, _ := proto.Marshal(ci)
	if _, err := f.kv.Put(context.Background(), bus.ConnKey(f.id, conn), b); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeFrontend) handle(m *nats.Msg) {
	batch := &pb.PushOrderBatch{}
	if err := proto.Unmarshal(m.Data, batch); err != nil {
		f.t.Errorf("bad batch: %v", err)
		return
	}
	f.mu.Lock()
	if !f.fence.Admit(batch) {
		// The frontend's fencing rule: a batch from an older lease holder
		// of the shard than one already seen is dropped.
		f.dropped++
		f.mu.Unlock()
		return
	}
	f.orders = append(f.orders, batch.GetOrders()...)
	if f.reached != nil && len(f.orders) >= f.want {
		close(f.reached)
		f.reached = nil
	}
	silent, legacy := f.silent, f.legacy || batch.GetDoneBatchSubject() == ""
	var dones []*pb.PushDone
	for _, o := range batch.GetOrders() {
		dones = append(dones, &pb.PushDone{ConnId: o.GetConnId(), PushId: o.GetPushId(), Result: pb.PushDone_SENT, SyncedSeq: o.GetThroughSeq(), Frontend: f.id})
	}
	if f.hold && !silent {
		f.held = append(f.held, dones...)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	if silent {
		return
	}
	if legacy {
		for _, d := range dones {
			b, _ := proto.Marshal(d)
			_ = f.nc.Publish(m.Reply, b)
		}
		return
	}
	f.sendBatch(batch.GetDoneBatchSubject(), dones)
}

// sendBatch sends dones as one PushDoneBatch, as the ADS frontend does.
func (f *fakeFrontend) sendBatch(subject string, dones []*pb.PushDone) {
	b, _ := proto.Marshal(&pb.PushDoneBatch{Dones: dones, Frontend: f.id})
	// As with single dones, a failed publish (the connection closing at
	// the end of a test) is a lost done, which the pusher's timeout covers.
	_ = f.nc.Publish(subject, b)
	f.mu.Lock()
	f.batches++
	f.mu.Unlock()
}

func (f *fakeFrontend) setSilent(s bool) {
	f.mu.Lock()
	f.silent = s
	f.mu.Unlock()
}

// ordersFor returns the through_seq of every order a connection got.
func (f *fakeFrontend) ordersFor(conn string) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint64
	for _, o := range f.orders {
		if o.GetConnId() == conn {
			out = append(out, o.GetThroughSeq())
		}
	}
	return out
}

type harness struct {
	stop func() // stops the pusher and waits for Run to return
	nc   *nats.Conn
	url  string
	js   jetstream.JetStream
	reg  *prometheus.Registry
}

func startPusher(t testing.TB, cfg Config) *harness {
	t.Helper()
	h := runPusher(t, natstest.Start(t), cfg)
	testutil.Eventually(t, "pusher active", func() bool { return h.metric("pilotwire_pusher_leader") == 1 })
	return h
}

// runPusher runs one pusher instance on the NATS server at url.
func runPusher(t testing.TB, url string, cfg Config) *harness {
	t.Helper()
	return runPusherFault(t, url, cfg, "", nil)
}

// runPusherFault runs one pusher instance whose key-value bucket named
// bucket is fault's wrapper of the real one, however the pusher opens it
// (nil fault: the plain JetStream context).
func runPusherFault(t testing.TB, url string, cfg Config, bucket string, fault func(jetstream.KeyValue) jetstream.KeyValue) *harness {
	t.Helper()
	if fault == nil {
		return runPusherHooks(t, url, cfg, nil)
	}
	return runPusherHooks(t, url, cfg, &natstest.Hooks{KeyValue: func(kv jetstream.KeyValue) jetstream.KeyValue {
		if kv.Bucket() != bucket {
			return kv
		}
		return fault(kv)
	}})
}

// runPusherHooks runs one pusher instance whose JetStream context goes
// through hooks (nil: the plain one).
func runPusherHooks(t testing.TB, url string, cfg Config, hooks *natstest.Hooks) *harness {
	t.Helper()
	return runPusherOn(t, url, nil, cfg, hooks)
}

// runPusherOn runs one pusher instance on pnc, the test's own connection
// (nil: the harness's, which the test publishes on too), its JetStream
// context through hooks (nil: the plain one).
func runPusherOn(t testing.TB, url string, pnc *nats.Conn, cfg Config, hooks *natstest.Hooks) *harness {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	h := &harness{url: url, nc: nc, js: js, reg: prometheus.NewRegistry()}
	pjs := js
	if pnc != nil {
		var err error
		if pjs, err = jetstream.New(pnc); err != nil {
			t.Fatal(err)
		}
		nc = pnc
	}
	if hooks != nil {
		pjs = natstest.Wrap(pjs, *hooks)
	}
	cfg.Common = svc.Common{NATSURL: url, Prefix: "pw"}
	if cfg.ID == "" {
		cfg.ID = "p1"
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, svc.Deps{NC: nc, JS: pjs, Log: testLogger(), Reg: h.reg, Health: &svc.Health{}})
	}()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err, ok := testutil.Stopped(t, done, "the pusher's Run"); ok && err != nil {
				t.Errorf("Run() = %v", err)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) metric(name string) float64 { return testutil.Metric(h.reg, name) }

func (h *harness) push(t testing.TB, pr *pb.PushRequest) {
	t.Helper()
	b, _ := proto.Marshal(pr)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := h.js.Publish(ctx, names.PushesSubject(), b); err != nil {
		t.Fatal(err)
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFanOutAndScoping: a full push reaches every connection once; an
// endpoint push reaches only connections watching the changed service.
func TestFanOutAndScoping(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: onceHeartbeatTimeout})
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("c-a", 0, "outbound|80||a.ns.svc.cluster.local")
	fe.register("c-b", 0, "outbound|80||b.ns.svc.cluster.local")
	fe.register("c-none", 0)
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == 3 })

	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 5, Reasons: map[string]int32{"config": 1}})
	for _, c := range []string{"c-a", "c-b", "c-none"} {
		testutil.Eventually(t, c+" pushed", func() bool { return equal(fe.ordersFor(c), []uint64{5}) })
	}

	h.push(t, &pb.PushRequest{ThroughSeq: 8, Reasons: map[string]int32{"endpoint": 1},
		ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a"}}})
	testutil.Eventually(t, "c-a pushed for its endpoints", func() bool { return equal(fe.ordersFor("c-a"), []uint64{5, 8}) })
	testutil.Eventually(t, "others skipped by scope", func() bool { return h.metric("pilotwire_pusher_skipped_total") == 2 })
	// A full push after the skipped one: everyone gets exactly one more.
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 9})
	testutil.Eventually(t, "c-b pushed", func() bool { return equal(fe.ordersFor("c-b"), []uint64{5, 9}) })
	testutil.Eventually(t, "c-none pushed", func() bool { return equal(fe.ordersFor("c-none"), []uint64{5, 9}) })
	testutil.Eventually(t, "c-a pushed", func() bool { return equal(fe.ordersFor("c-a"), []uint64{5, 8, 9}) })
}

// TestMergeWhileInFlight: requests arriving while a connection's push is in
// flight merge into one follow-up push.
func TestMergeWhileInFlight(t *testing.T) {
	h := startPusher(t, Config{PushTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	fe.setSilent(true)
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Eventually(t, "first order", func() bool { return len(fe.ordersFor("c")) == 1 })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "both requests consumed", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == 3 })
	if got := fe.ordersFor("c"); !equal(got, []uint64{1}) {
		t.Fatalf("orders while in flight = %v, want only [1]", got)
	}
	// Complete the first push: the merged follow-up is dispatched once.
	fe.setSilent(false)
	b, _ := proto.Marshal(&pb.PushDone{ConnId: "c", PushId: 1, Result: pb.PushDone_SENT, SyncedSeq: 1})
	if err := fe.nc.Publish(names.DoneSubject("p1"), b); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "merged follow-up", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 3}) })
}

// TestLevelTriggeredCatchUp: a connection that registers behind the latest
// PushRequest is pushed without any new request.
func TestLevelTriggeredCatchUp(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: onceHeartbeatTimeout})
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 7})
	testutil.Eventually(t, "request consumed", func() bool { return h.metric("pilotwire_pusher_latest_through_seq") == 7 })
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("behind", 3)
	fe.register("current", 7)
	testutil.Eventually(t, "behind caught up", func() bool { return equal(fe.ordersFor("behind"), []uint64{7}) })
	if got := fe.ordersFor("current"); len(got) != 0 {
		t.Errorf("up-to-date connection got orders %v", got)
	}
}

// TestLateEntryWithNewWatchesCatchesUp: a connection subscribes to a new
// service's endpoints and is answered at seq 11, but its registry entry
// saying so arrives only after the endpoint-only push for seq 12 was scoped
// against the old entry (and skipped). The late entry, whose watches
// changed, takes its own synced_seq and the connection is caught up
// (issue 11 #2).
func TestLateEntryWithNewWatchesCatchesUp(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: onceHeartbeatTimeout})
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 10})
	testutil.Eventually(t, "request consumed", func() bool { return h.metric("pilotwire_pusher_latest_through_seq") == 10 })
	fe := newFrontend(t, h.url, "fe-1")
	fe.register("c", 10, "outbound|80||a.ns.svc.cluster.local")
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })

	h.push(t, &pb.PushRequest{ThroughSeq: 12, Reasons: map[string]int32{"endpoint": 1},
		ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "ns", Name: "x"}}})
	testutil.Eventually(t, "skipped by scope", func() bool { return h.metric("pilotwire_pusher_skipped_total") == 1 })
	if got := fe.ordersFor("c"); len(got) != 0 {
		t.Fatalf("orders before the late entry = %v, want none", got)
	}
	fe.register("c", 11, "outbound|80||a.ns.svc.cluster.local", "outbound|80||x.ns.svc.cluster.local")
	testutil.Eventually(t, "caught up to 12", func() bool { return equal(fe.ordersFor("c"), []uint64{12}) })
}

// TestDoneTimeoutRequeues: a frontend that never reports done gets the
// order again after a backoff, and the timeouts are counted.
func TestDoneTimeoutRequeues(t *testing.T) {
	h := startPusher(t, Config{PushTimeout: 200 * time.Millisecond, FrontendTimeout: time.Minute})
	fe := newFrontend(t, h.url, "fe-1")
	fe.setSilent(true)
	fe.register("c", 0)
	testutil.Eventually(t, "connection known", func() bool { return h.metric("pilotwire_pusher_connections") == 1 })
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 4})
	testutil.Eventually(t, "two timeouts", func() bool { return h.metric("pilotwire_pusher_done_timeouts_total") == 2 })
	if got := fe.ordersFor("c"); !equal(got, []uint64{4, 4}) {
		t.Fatalf("orders = %v, want the original and one retry (the next waits 2s)", got)
	}
}

// TestDeadFrontendForgotten: when a frontend's heartbeat stops, its
// connections are forgotten and their registry entries removed.
func TestDeadFrontendForgotten(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: 500 * time.Millisecond})
	fe := newFrontend(t, h.url, "fe-dead")
	fe.register("c1", 0)
	fe.register("c2", 0)
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == 2 })
	testutil.Eventually(t, "connections forgotten", func() bool { return h.metric("pilotwire_pusher_connections") == 0 })
	testutil.Eventually(t, "registry cleaned", func() bool {
		_, err := fe.kv.Get(context.Background(), bus.ConnKey("fe-dead", "c1"))
		return err != nil
	})
	h.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "request consumed", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == 1 })
	if got := fe.ordersFor("c1"); len(got) != 0 {
		t.Errorf("forgotten connection got orders %v", got)
	}
}

// BenchmarkFanOut measures one full PushRequest reaching 1,000 connections
// (orders dispatched and dones received), with and without batching.
func BenchmarkFanOut(b *testing.B) {
	for _, bc := range []struct{ batch, throttle int }{{1, 25}, {256, 25}, {1, 1000}, {256, 1000}} {
		b.Run(fmt.Sprintf("batch=%d/throttle=%d", bc.batch, bc.throttle), func(b *testing.B) {
			h := startPusher(b, Config{MaxBatch: bc.batch, Throttle: bc.throttle})
			fe := newFrontend(b, h.url, "fe-1")
			const conns = 1000
			for i := range conns {
				fe.register(fmt.Sprintf("c%d", i), 0)
			}
			testutil.Eventually(b, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == conns })
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				reached := fe.expect((i + 1) * conns)
				h.push(b, &pb.PushRequest{Full: true, ThroughSeq: uint64(i + 1)})
				testutil.Receive(b, reached, "every connection ordered")
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*conns), "µs/conn")
		})
	}
}

// TestStandbyTakesOver: of two pushers one is active; when its connection
// dies the standby takes over and pushes every connection that is behind.
func TestStandbyTakesOver(t *testing.T) {
	url := natstest.Start(t)
	a := runPusher(t, url, Config{ID: "pa", LeaseTTL: 600 * time.Millisecond})
	testutil.Eventually(t, "a active", func() bool { return a.metric("pilotwire_pusher_leader") == 1 })
	b := runPusher(t, url, Config{ID: "pb", LeaseTTL: 600 * time.Millisecond})
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "a knows the connection", func() bool { return a.metric("pilotwire_pusher_connections") == 1 })
	a.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "pushed by a", func() bool { return equal(fe.ordersFor("c"), []uint64{3}) })
	if b.metric("pilotwire_pusher_leader") != 0 {
		t.Fatal("standby active while the active pusher lives")
	}

	a.nc.Close() // a dies
	testutil.Eventually(t, "b active", func() bool { return b.metric("pilotwire_pusher_leader") == 1 })
	// The frontend keeps its heartbeat; b pushes the next request.
	fe.heartbeat()
	b.push(t, &pb.PushRequest{Full: true, ThroughSeq: 5})
	// b first catches up what the registry says c is behind on (the fake
	// frontend never reports a synced sequence there), then pushes 5.
	testutil.Eventually(t, "pushed by b", func() bool { o := fe.ordersFor("c"); return len(o) > 1 && o[len(o)-1] == 5 })
}

// testLogger discards logs unless PILOTWIRE_TEST_LOGS is set.
func testLogger() *slog.Logger {
	if os.Getenv("PILOTWIRE_TEST_LOGS") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// TestLatestGaugeAfterTakeOver: a pusher taking over reads the newest
// PushRequest and its gauge says so at once, not only after the next
// request (tests wait on it; so do operators).
func TestLatestGaugeAfterTakeOver(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, names.PushesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	b, _ := proto.Marshal(&pb.PushRequest{Full: true, ThroughSeq: 42})
	if _, err := js.Publish(ctx, names.PushesSubject(), b); err != nil {
		t.Fatal(err)
	}
	h := runPusher(t, url, Config{})
	testutil.Eventually(t, "latest gauge at the newest request", func() bool { return h.metric("pilotwire_pusher_latest_through_seq") == 42 })
}
