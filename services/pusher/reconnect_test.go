package pusher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// heartbeatReconnects writes the frontend's heartbeat saying its NATS
// connection was re-established n times.
func (f *fakeFrontend) heartbeatReconnects(n uint64) {
	b, _ := proto.Marshal(&pb.FrontendInfo{Id: f.id, OrdersSubject: names.OrdersSubject(f.id), NatsReconnects: n})
	if _, err := f.kv.Put(context.Background(), bus.FrontendKey(f.id), b); err != nil {
		f.t.Errorf("heartbeat: %v", err)
	}
}

// TestOrdersLostWhileAFrontendWasAwayAreResent (CI fault matrix: a NATS
// node loss once took 28 s): an order published while a frontend's NATS
// connection was down reaches nobody, and its done never comes. When the
// frontend's heartbeat says it reconnected, the pusher resyncs what it had
// in flight to it at once. Before, the connection waited out the push
// timeout (here ten minutes, so the test timed out).
func TestOrdersLostWhileAFrontendWasAwayAreResent(t *testing.T) {
	url := natstest.Start(t)
	p := runPusher(t, url, Config{ID: "pa", PushTimeout: 10 * time.Minute, FrontendTimeout: time.Minute, ResyncInterval: 10 * time.Millisecond})
	testutil.Eventually(t, "active", func() bool { return p.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "the connection known", func() bool { return p.metric("pilotwire_pusher_connections") == 1 })
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Eventually(t, "first push", func() bool { return equal(fe.ordersFor("c"), []uint64{1}) })

	// The frontend's connection drops: its subscription is gone, so the
	// next order reaches nobody.
	if err := fe.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := fe.nc.Flush(); err != nil { // the server has processed it
		t.Fatal(err)
	}
	// A spy on another connection sees when the order has gone by.
	spyNC, _ := natstest.Connect(t, url)
	var mu sync.Mutex
	spied := 0
	spy, err := spyNC.Subscribe(names.OrdersSubject(fe.id), func(*nats.Msg) { mu.Lock(); spied++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	if err := spyNC.Flush(); err != nil {
		t.Fatal(err)
	}
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "the second order gone by", func() bool { mu.Lock(); defer mu.Unlock(); return spied == 1 })
	if err := spy.Unsubscribe(); err != nil {
		t.Fatal(err)
	}

	// Back: subscribed again, and its heartbeat counts the reconnect.
	if fe.sub, err = fe.nc.Subscribe(names.OrdersSubject(fe.id), fe.handle); err != nil {
		t.Fatal(err)
	}
	fe.heartbeatReconnects(1)
	testutil.Eventually(t, "the lost order resent", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 2}) })
	if got := testutil.Metric(p.reg, `pilotwire_pusher_lost_pushes_total{reason="frontend_reconnected"}`); got != 1 {
		t.Errorf(`lost pushes {reason="frontend_reconnected"} = %v, want 1`, got)
	}
}

// TestOrdersInFlightWhenThePusherReconnectsAreResent: when the pusher's own
// NATS connection is re-established, an order it published just before
// may have died with the old connection, and a done sent meanwhile reached
// nobody. It resyncs everything in flight at once rather than waiting out
// the push timeout.
func TestOrdersInFlightWhenThePusherReconnectsAreResent(t *testing.T) {
	url := natstest.Start(t)
	p := runPusher(t, url, Config{ID: "pa", PushTimeout: 10 * time.Minute, FrontendTimeout: time.Minute, ResyncInterval: 10 * time.Millisecond})
	testutil.Eventually(t, "active", func() bool { return p.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "the connection known", func() bool { return p.metric("pilotwire_pusher_connections") == 1 })
	fe.setSilent(true) // its done is lost
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Eventually(t, "the order delivered, its done lost", func() bool { return equal(fe.ordersFor("c"), []uint64{1}) })
	fe.setSilent(false)
	if err := p.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the order resent", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 1}) })
	if got := testutil.Metric(p.reg, `pilotwire_pusher_lost_pushes_total{reason="pusher_reconnected"}`); got != 1 {
		t.Errorf(`lost pushes {reason="pusher_reconnected"} = %v, want 1`, got)
	}
	testutil.Eventually(t, "nothing in flight", func() bool { return p.metric("pilotwire_pusher_in_flight") == 0 })
}

// TestLateSweepDoesNotCountThePause (docs/reliability.md, SIGSTOP of the
// active pusher): a pusher stopped for longer than --frontend-timeout
// used to declare every frontend dead in its first sweep after SIGCONT,
// before it read the heartbeats queued meanwhile. A sweep that runs late
// no longer counts the lateness against frontends' heartbeats (nor push
// deadlines); a frontend silent for a timeout of the pusher's running
// time is still forgotten. Here the pusher's clock jumps 20 s between two
// sweeps, as after a 20 s stop; before the fix the frontend was forgotten.
func TestLateSweepDoesNotCountThePause(t *testing.T) {
	var offset atomic.Int64
	p, waitSweeps := pausedPusher(t, &offset, nil)
	waitSweeps(1)
	offset.Store(int64(20 * time.Second)) // the pusher was stopped 20 s
	waitSweeps(2)
	if got := p.metric("pilotwire_pusher_frontends"); got != 1 {
		t.Fatalf("frontends = %v after a late sweep, want the frontend kept", got)
	}
	if got := p.metric("pilotwire_pusher_late_sweeps_total"); got != 1 {
		t.Errorf("late sweeps = %v, want 1", got)
	}
	// Silent for the timeout of running time after that: forgotten.
	offset.Add(int64(7 * time.Second))
	waitSweeps(1)
	// That sweep was 7 s late too, and not counted; the next ones are.
	testutil.Eventually(t, "the silent frontend forgotten", func() bool { return p.metric("pilotwire_pusher_frontends") == 0 })
}

// TestAllFrontendsSilentIsTheRegistry (fault matrix, NATS node loss): when
// PW_REGISTRY loses its leader no heartbeat reaches the registry, and the
// pusher declared every frontend dead at once, forgot every connection and
// had to read them all back when the bucket returned (10 s to converge
// instead of 3). Every frontend silent at the same time is the registry,
// not the frontends: expiry waits until one is heard from, and only the
// ones still silent then are forgotten. Before the fix both frontends
// here were forgotten.
func TestAllFrontendsSilentIsTheRegistry(t *testing.T) {
	p, a, _, sweeps := frontendPair(t, time.Second)
	// Neither heartbeats again: past the timeout, several sweeps later,
	// both are still known.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		testutil.Receive(t, sweeps, "a sweep")
	}
	testutil.Receive(t, sweeps, "a sweep")
	if got := p.metric("pilotwire_pusher_connections"); got != 2 {
		t.Fatalf("connections = %v with every frontend silent at once, want both kept", got)
	}
	if got := p.metric("pilotwire_pusher_frontend_expiry_suspended"); got != 1 {
		t.Errorf("expiry suspended = %v, want 1", got)
	}
	// One is heard from, and goes on heartbeating: the other is dead.
	heartbeatUntilOneLeft(t, p, a)
	if got := p.metric("pilotwire_pusher_frontend_expiry_suspended"); got != 0 {
		t.Errorf("expiry suspended = %v once a frontend was heard from, want 0", got)
	}
}

// TestFrontendsSilentOutOfPhaseIsTheRegistry (fault matrix, NATS node
// loss, found by a kept run): the frontends' heartbeats stop reaching the
// registry at once, but their last ones were out of phase, so one
// frontend passed the timeout a sweep before the other. The pusher forgot
// the first and its connections (not every frontend was past the timeout
// yet), and read them back only 10 s later, when the registry returned:
// those proxies got no pushes meanwhile. Every frontend having missed a
// heartbeat (quiet for half the timeout) when one passes the timeout is
// the registry too. Here fe-a's last heartbeat is a sweep before fe-b's;
// before the fix fe-a was forgotten at the first sweep past its timeout.
func TestFrontendsSilentOutOfPhaseIsTheRegistry(t *testing.T) {
	p, a, b, sweeps := frontendPair(t, 2500*time.Millisecond)
	// Last heartbeats one sweep apart (sweeps are 1 s apart), then silence.
	testutil.Receive(t, sweeps, "a sweep")
	a.heartbeat()
	testutil.Receive(t, sweeps, "a sweep")
	b.heartbeat()
	// Three sweeps after fe-a's heartbeat it is past the timeout (about
	// 3 s > 2.5 s) and fe-b is not (about 2 s), but both have missed a
	// heartbeat (quiet for more than half the timeout).
	for range 2 {
		testutil.Receive(t, sweeps, "a sweep")
	}
	if got := p.metric("pilotwire_pusher_connections"); got != 2 {
		t.Fatalf("connections = %v with both frontends silent out of phase, want both kept", got)
	}
	if got := p.metric("pilotwire_pusher_frontend_expiry_suspended"); got != 1 {
		t.Errorf("expiry suspended = %v, want 1", got)
	}
	// fe-b heartbeats on: fe-a, still silent, is dead.
	heartbeatUntilOneLeft(t, p, b)
}

// frontendPair runs a pusher with the frontend timeout given and two
// frontends, fe-a and fe-b, with one connection each, known to it; sweeps
// gets a value after each sweep.
func frontendPair(t *testing.T, timeout time.Duration) (p *harness, a, b *fakeFrontend, sweeps <-chan struct{}) {
	t.Helper()
	url := natstest.Start(t)
	swept := make(chan struct{}, 1)
	p = runPusher(t, url, Config{ID: "pa", PushTimeout: time.Minute, FrontendTimeout: timeout, afterSweep: func() {
		select {
		case swept <- struct{}{}:
		default:
		}
	}})
	testutil.Eventually(t, "active", func() bool { return p.metric("pilotwire_pusher_leader") == 1 })
	a, b = newFrontend(t, url, "fe-a"), newFrontend(t, url, "fe-b")
	a.register("ca", 0)
	b.register("cb", 0)
	testutil.Eventually(t, "both connections known", func() bool { return p.metric("pilotwire_pusher_connections") == 2 })
	return p, a, b, swept
}

// heartbeatUntilOneLeft heartbeats f as a live frontend does until the
// pusher knows one connection only: the other frontend's, still silent,
// is dead after all. (A single heartbeat is not enough on a starved
// machine: a sweep more than the timeout after it finds both silent
// again, rightly.)
func heartbeatUntilOneLeft(t *testing.T, p *harness, f *fakeFrontend) {
	t.Helper()
	var last time.Time
	testutil.Eventually(t, "the silent frontend forgotten", func() bool {
		if time.Since(last) > 200*time.Millisecond {
			f.heartbeat()
			last = time.Now()
		}
		return p.metric("pilotwire_pusher_connections") == 1
	})
}

// TestPauseInsideASweepDoesNotCountThePause: a SIGSTOP that lands inside
// a sweep, after its check for lateness, must not count against the
// frontends either. The sweep read the clock again for its expiry, so the
// whole pause counted: the frontend was forgotten. Every step of a sweep
// now judges by the one time the sweep read, and the next sweep finds
// itself late and discounts the pause.
func TestPauseInsideASweepDoesNotCountThePause(t *testing.T) {
	var offset atomic.Int64
	var pause atomic.Bool
	p, waitSweeps := pausedPusher(t, &offset, func() {
		if pause.CompareAndSwap(true, false) {
			offset.Add(int64(20 * time.Second)) // stopped here for 20 s
		}
	})
	waitSweeps(1)
	pause.Store(true)
	waitSweeps(3)
	if pause.Load() {
		t.Fatal("no sweep paused")
	}
	if got := p.metric("pilotwire_pusher_frontends"); got != 1 {
		t.Fatalf("frontends = %v after a pause inside a sweep, want the frontend kept", got)
	}
	if got := p.metric("pilotwire_pusher_late_sweeps_total"); got != 1 {
		t.Errorf("late sweeps = %v, want 1: the sweep after the pause", got)
	}
}

// pausedPusher runs a pusher (6 s frontend timeout) whose clock is
// offset ahead of time.Now, with afterLateCheck as its hook, and one
// frontend fe-1 with a connection it knows. It returns the pusher and a
// wait for sweeps (sweepWaiter).
func pausedPusher(t *testing.T, offset *atomic.Int64, afterLateCheck func()) (*harness, func(n int)) {
	t.Helper()
	url := natstest.Start(t)
	sweeps := make(chan struct{}, 64)
	p := runPusher(t, url, Config{
		ID: "pa", PushTimeout: time.Minute, FrontendTimeout: 6 * time.Second,
		now:            func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
		afterLateCheck: afterLateCheck,
		afterSweep: func() {
			select {
			case sweeps <- struct{}{}:
			default: // the test is not waiting
			}
		},
	})
	testutil.Eventually(t, "active", func() bool { return p.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.register("c", 0)
	testutil.Eventually(t, "the frontend known", func() bool { return p.metric("pilotwire_pusher_frontends") == 1 })
	return p, sweepWaiter(t, sweeps)
}

// sweepWaiter returns a wait for n sweeps that end after each call to it
// (sweeps reported before the call are drained first); sweeps is fed by
// the pusher's afterSweep.
func sweepWaiter(t *testing.T, sweeps chan struct{}) func(n int) {
	return func(n int) {
		t.Helper()
		for range len(sweeps) {
			testutil.Receive(t, sweeps, "a sweep")
		}
		timeout := time.NewTimer(testutil.DefaultTimeout)
		defer timeout.Stop()
		for range n {
			select {
			case <-sweeps:
			case <-timeout.C:
				t.Fatal("no sweep")
			}
		}
	}
}

// TestForgottenFrontendsOrdersEndWithIt (fault matrix, a frontend cut
// from NATS: its 50 orders in flight outlived it): forgetting a frontend
// dropped its connections and its queue but left its orders in flight.
// Connection ids survive the frontend being forgotten and heard from
// again, so a late done for an order of before (through 1) ended the
// processing of the catch-up ordered since (through 2), and the next
// request (3) was ordered while the catch-up was still in flight: two
// orders in flight to one connection. A forgotten frontend's orders, and
// a forgotten connection's, now end with it.
func TestForgottenFrontendsOrdersEndWithIt(t *testing.T) {
	url := natstest.Start(t)
	p := runPusher(t, url, Config{ID: "p1", PushTimeout: 10 * time.Minute, FrontendTimeout: time.Second, ResyncInterval: 10 * time.Millisecond})
	testutil.Eventually(t, "active", func() bool { return p.metric("pilotwire_pusher_leader") == 1 })
	fe := newFrontend(t, url, "fe-1")
	fe.mu.Lock()
	fe.hold = true // completions wait for the test
	fe.mu.Unlock()
	fe.register("c", 0)
	testutil.Eventually(t, "the connection known", func() bool { return p.metric("pilotwire_pusher_connections") == 1 })
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 1})
	testutil.Eventually(t, "the first order", func() bool { return equal(fe.ordersFor("c"), []uint64{1}) })
	takeHeld := func() []*pb.PushDone {
		fe.mu.Lock()
		defer fe.mu.Unlock()
		held := fe.held
		fe.held = nil
		return held
	}
	stale := takeHeld()

	// No heartbeat for the timeout: forgotten, with its connection.
	testutil.Eventually(t, "the silent frontend forgotten", func() bool { return p.metric("pilotwire_pusher_frontends") == 0 })
	// The pusher removes the forgotten frontend's entries; a live frontend
	// notices and writes them again.
	testutil.Eventually(t, "the forgotten connection's entry removed", func() bool {
		_, err := fe.kv.Get(context.Background(), bus.ConnKey(fe.id, "c"))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	// A request while it is forgotten orders nothing; heard from again, it
	// writes its connection again and the pusher orders the catch-up,
	// whose done the frontend holds.
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 2})
	testutil.Eventually(t, "the request handled", func() bool { return p.metric("pilotwire_pusher_push_requests_total") == 2 })
	fe.heartbeat()
	fe.register("c", 0)
	// From now on it heartbeats well within the timeout.
	alive := time.NewTicker(100 * time.Millisecond)
	stopAlive := make(chan struct{})
	aliveDone := make(chan struct{})
	go func() {
		defer close(aliveDone)
		for {
			select {
			case <-stopAlive:
				return
			case <-alive.C:
				fe.heartbeat()
			}
		}
	}()
	defer func() { alive.Stop(); close(stopAlive); <-aliveDone }()
	testutil.Eventually(t, "the catch-up order", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 2}) })

	// The done of the order from before the frontend was forgotten comes
	// late, then a new request.
	dones := func() float64 { return p.metric(`pilotwire_pusher_done_total{result="SENT"}`) }
	before := dones()
	fe.sendBatch(doneBatchSubject(names, "p1"), stale)
	testutil.Eventually(t, "the late done handled", func() bool { return dones() > before })
	p.push(t, &pb.PushRequest{Full: true, ThroughSeq: 3})
	testutil.Eventually(t, "the next request queued", func() bool { return p.metric("pilotwire_pusher_push_requests_total") == 3 })
	// Nothing may be ordered now: the catch-up is in flight. (An order
	// comes within milliseconds of its request; absence has no event to
	// wait for.)
	short := time.NewTimer(testutil.ShortTimeout)
	defer short.Stop()
	<-short.C
	if got := fe.ordersFor("c"); len(got) > 2 {
		t.Fatalf("orders for c = %v: ordered %d while the catch-up was still in flight", got, got[2])
	}
	// The catch-up's done frees the connection for the request.
	fe.sendBatch(doneBatchSubject(names, "p1"), takeHeld())
	testutil.Eventually(t, "the request ordered after the catch-up's done", func() bool { return equal(fe.ordersFor("c"), []uint64{1, 2, 3}) })
}
