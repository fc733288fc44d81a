package lease

import (
	"context"
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
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{cancel: cancel, done: make(chan error, 1)}
	e := &Elector{KV: kv, Key: "debouncer", Holder: holder, TTL: 1500 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}
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
