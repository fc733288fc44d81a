package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func bucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	_, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LEASES", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// instance runs one elector and records whether its work is running.
type instance struct {
	active  atomic.Bool
	started atomic.Int32
	cancel  context.CancelFunc
	done    chan error
}

func run(t *testing.T, kv jetstream.KeyValue, holder string) *instance {
	return runElector(t, &Elector{KV: kv, Key: "debouncer", Holder: holder, TTL: 1500 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
}

// runElector runs e with work that records whether it is running.
func runElector(t *testing.T, e *Elector) *instance {
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{cancel: cancel, done: make(chan error, 1)}
	go func() {
		in.done <- e.Run(ctx, func(ctx context.Context) error {
			in.started.Add(1)
			in.active.Store(true)
			<-ctx.Done()
			in.active.Store(false)
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-in.done })
	return in
}

// TestOneActiveAndHandover: exactly one of two is active; when the active
// one stops, the standby takes over.
func TestOneActiveAndHandover(t *testing.T) {
	url := natstest.Start(t)
	a := run(t, bucket(t, url), "a")
	b := run(t, bucket(t, url), "b")
	testutil.Eventually(t, "one active", func() bool { return a.active.Load() || b.active.Load() })
	// Never both, sampled over several renewal periods.
	sample := time.NewTicker(5 * time.Millisecond)
	defer sample.Stop()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-sample.C {
		if a.active.Load() && b.active.Load() {
			t.Fatal("both instances active")
		}
	}
	active, standby := a, b
	if b.active.Load() {
		active, standby = b, a
	}
	active.cancel()
	if err := <-active.done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	active.done <- nil // for the cleanup
	testutil.Eventually(t, "standby active after release", standby.active.Load)
}

// TestTakeoverFromSilentHolder: a holder that stops renewing (its NATS
// connection is gone) is replaced after the TTL, and stops its own work.
func TestTakeoverFromSilentHolder(t *testing.T) {
	url := natstest.Start(t)
	nc, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kvA, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LEASES", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	a := run(t, kvA, "a")
	testutil.Eventually(t, "a active", a.active.Load)
	b := run(t, bucket(t, url), "b")
	nc.Close() // a can no longer renew or release
	testutil.Eventually(t, "a stands by", func() bool { return !a.active.Load() })
	testutil.Eventually(t, "b takes over", b.active.Load)
	if a.started.Load() != 1 {
		t.Errorf("a started work %d times, want 1", a.started.Load())
	}
}

// slowRenewKV answers the first renewal late (the write is made at once,
// the reply arrives replyDelay later) and lets every later renewal hang
// until its context ends: a holder on a degraded link.
type slowRenewKV struct {
	jetstream.KeyValue
	replyDelay time.Duration
	updates    atomic.Int32
}

func (kv *slowRenewKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if kv.updates.Add(1) > 1 {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	rev, err := kv.KeyValue.Update(ctx, key, value, last)
	late := time.NewTimer(kv.replyDelay)
	defer late.Stop()
	<-late.C
	return rev, err
}

// TestHolderStopsBeforeAnyStandbyMayTakeOver: the holder's deadline runs
// from when its last successful renewal was sent, not from when the reply
// came. The test watches the lease key and plays the most eager standby
// there can be: one that sees every write the instant it is made, and so
// may take over TTL after the last write. The holder's work must have
// stopped well before then (its own deadline is 2/3 TTL after it sent the
// renewal; the test allows TTL/6 more for scheduling), however slow its
// replies and however long its renewals hang.
func TestHolderStopsBeforeAnyStandbyMayTakeOver(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	watchKV := bucket(t, url)
	w, err := watchKV.Watch(ctx, "debouncer", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	kv := &slowRenewKV{KeyValue: bucket(t, url), replyDelay: ttl / 3 * 9 / 10}
	stopped := make(chan time.Time, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	e := &Elector{KV: kv, Key: "debouncer", Holder: "a", TTL: ttl, Log: slog.New(slog.DiscardHandler)}
	go func() {
		done <- e.Run(runCtx, func(ctx context.Context) error {
			<-ctx.Done()
			stopped <- time.Now()
			return nil
		})
	}()
	defer func() { stop(); <-done }()

	var lastWrite time.Time
	for {
		select {
		case entry := <-w.Updates():
			if entry != nil && entry.Operation() == jetstream.KeyValuePut {
				lastWrite = time.Now()
			}
			continue
		case at := <-stopped:
			if lastWrite.IsZero() {
				t.Fatal("work stopped before the lease was ever written")
			}
			if kv.updates.Load() < 2 {
				t.Fatalf("work stopped after %d renewals; want the slow one and at least one hung one", kv.updates.Load())
			}
			if after := at.Sub(lastWrite); after >= ttl*5/6 {
				t.Fatalf("work stopped %v after the last write; a standby may take over %v after it, and the holder must stop by %v", after, ttl, ttl*5/6)
			}
			return
		case <-ctx.Done():
			t.Fatal("the holder never stopped while its renewals hung")
		}
	}
}

// TestWaitingNamesTheHolder: a standby hears who holds the lease.
func TestWaitingNamesTheHolder(t *testing.T) {
	kv := bucket(t, natstest.Start(t))
	a := run(t, kv, "a")
	testutil.Eventually(t, "a active", a.active.Load)
	heard := make(chan string, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	e := &Elector{KV: kv, Key: "debouncer", Holder: "b", TTL: 1500 * time.Millisecond, Log: slog.New(slog.DiscardHandler),
		Waiting: func(holder string) {
			select {
			case heard <- holder:
			default:
			}
			cancel()
		}}
	if err := e.Run(ctx, func(context.Context) error { t.Error("b became active"); return nil }); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-heard:
		if h != "a" {
			t.Errorf("Waiting(%q), want a", h)
		}
	default:
		t.Error("Waiting never called")
	}
}

// TestRevisionFencesHolders: the work context carries the revision at
// which its holder acquired the lease, and a later holder's is higher.
func TestRevisionFencesHolders(t *testing.T) {
	url := natstest.Start(t)
	kv := bucket(t, url)
	revs := make(chan uint64, 2)
	runOnce := func(holder string) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		e := &Elector{KV: kv, Key: "pusher-0", Holder: holder, TTL: 600 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}
		if err := e.Run(ctx, func(ctx context.Context) error {
			revs <- Revision(ctx)
			return errors.New("done")
		}); err == nil || err.Error() != "done" {
			t.Errorf("Run() = %v, want the work's error", err)
		}
	}
	runOnce("a")
	runOnce("b")
	first, second := <-revs, <-revs
	if first == 0 || second <= first {
		t.Errorf("revisions %d then %d, want a nonzero one, then a higher one", first, second)
	}
	if got := Revision(context.Background()); got != 0 {
		t.Errorf("Revision outside work = %d, want 0", got)
	}
}

// failingUpdateKV fails every Update while failing is set, as while the
// bucket's stream has no leader.
type failingUpdateKV struct {
	jetstream.KeyValue
	failing *atomic.Bool
}

func (kv failingUpdateKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if kv.failing.Load() {
		return 0, errors.New("nats: no response from stream")
	}
	return kv.KeyValue.Update(ctx, key, value, last)
}

// TestHolderRetakesItsOwnLease: a holder that stood by because its
// renewals failed (the bucket lost its leader) takes its lease back as
// soon as the bucket answers, if nobody wrote it since: the entry is still
// the one it wrote, and it is running no work, so nobody can overlap.
// Before, it waited a whole TTL on its own clock like any standby, which
// the fault matrix paid after every NATS node loss (ingest, debouncer and
// pusher all stood by together). The clock is frozen once it stands by,
// so a wait for the TTL never ends.
func TestHolderRetakesItsOwnLease(t *testing.T) {
	url := natstest.Start(t)
	var failing atomic.Bool
	var frozen atomic.Pointer[time.Time]
	now := func() time.Time {
		if f := frozen.Load(); f != nil {
			return *f
		}
		return time.Now()
	}
	in := runElector(t, &Elector{KV: failingUpdateKV{KeyValue: bucket(t, url), failing: &failing}, Key: "debouncer", Holder: "a",
		TTL: 1500 * time.Millisecond, Log: slog.New(slog.DiscardHandler), Now: now})
	testutil.Eventually(t, "a active", in.active.Load)
	failing.Store(true)
	testutil.Eventually(t, "a stands by", func() bool { return !in.active.Load() })
	f := time.Now()
	frozen.Store(&f)
	failing.Store(false)
	testutil.Eventually(t, "a active again", func() bool { return in.active.Load() && in.started.Load() == 2 })
}

// TestRetakeLosesToATakeOver: a holder that stood by does not take back
// a lease someone else took meanwhile.
func TestRetakeLosesToATakeOver(t *testing.T) {
	url := natstest.Start(t)
	var failing atomic.Bool
	kv := bucket(t, url)
	in := runElector(t, &Elector{KV: failingUpdateKV{KeyValue: kv, failing: &failing}, Key: "debouncer", Holder: "a",
		TTL: 1500 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	testutil.Eventually(t, "a active", in.active.Load)
	failing.Store(true)
	testutil.Eventually(t, "a stands by", func() bool { return !in.active.Load() })
	// b takes the lease over (as after the TTL) while a cannot write.
	entry, err := kv.Get(context.Background(), "debouncer")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(context.Background(), "debouncer", []byte("b"), entry.Revision()); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	// a keeps campaigning and must see b's entry, not take it: b's entry
	// stays, rewritten by nobody, over several campaign rounds.
	sample := time.NewTicker(5 * time.Millisecond)
	defer sample.Stop()
	for end := time.Now().Add(time.Second); time.Now().Before(end); <-sample.C {
		if in.active.Load() {
			t.Fatal("a took back a lease b holds")
		}
	}
	got, err := kv.Get(context.Background(), "debouncer")
	if err != nil || string(got.Value()) != "b" {
		t.Fatalf("lease = %v, %v; want b's", got, err)
	}
}

// TestRestartedHolderTakesItsLeaseAtOnce (fault matrix, "kill -9
// ingest"): a process killed while active and started again under the
// same id (a container restarted in its pod, whose name is the id) found
// its own id on the lease and waited the whole TTL, as a stranger would,
// before it wrote again (4 s of the row's 4.7 s). Like client-go's leader
// election, an instance that finds its own id on the lease at its first
// campaign takes it at once; later rounds, and other ids, wait as before.
func TestRestartedHolderTakesItsLeaseAtOnce(t *testing.T) {
	url := natstest.Start(t)
	kv := bucket(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	// The entry the killed process left behind: no release, no renewal.
	if _, err := kv.Create(ctx, "debouncer", []byte("a")); err != nil {
		t.Fatal(err)
	}
	stranger := runElector(t, &Elector{KV: kv, Key: "debouncer", Holder: "b", TTL: time.Hour, Log: slog.New(slog.DiscardHandler)})
	restarted := runElector(t, &Elector{KV: kv, Key: "debouncer", Holder: "a", TTL: time.Hour, Log: slog.New(slog.DiscardHandler)})
	testutil.Eventually(t, "the restarted holder active", restarted.active.Load)
	if stranger.active.Load() {
		t.Error("an instance of another id took a lease held an hour ago, with a TTL of an hour")
	}
	entry, err := kv.Get(ctx, "debouncer")
	if err != nil {
		t.Fatal(err)
	}
	if entry.Revision() == 1 {
		t.Error("the lease was not written again: an old holder's revision would not be fenced")
	}
}
