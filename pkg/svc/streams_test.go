package svc_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// tryBound is the longest a service may wait on one unanswered try to
// open or create a stream at start: well below nats.go's own 5 s default,
// which the try took before.
const tryBound = 3 * time.Second

// lostFirst is the hook (natstest.Hooks.Unanswered) that leaves the first
// creating call of a JetStream context over a real server unanswered, as
// a creation racing another service's can be (nats.go#949). It records
// the deadline that call had.
type lostFirst struct {
	mu       sync.Mutex
	lost     bool
	method   string
	began    time.Time
	deadline time.Time // zero: the call had none
}

func (l *lostFirst) unanswered(ctx context.Context, method, _ string) bool {
	switch method {
	case "CreateStream", "CreateKeyValue", "CreateObjectStore":
	default:
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return false
	}
	l.lost, l.method, l.began = true, method, time.Now()
	l.deadline, _ = ctx.Deadline()
	return true
}

func (l *lostFirst) check(t *testing.T, want string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost || l.method != want {
		t.Fatalf("the lost call was %q (lost %v), want %s", l.method, l.lost, want)
	}
	if l.deadline.IsZero() {
		t.Fatalf("%s was tried with no deadline of its own", want)
	}
	if d := l.deadline.Sub(l.began); d > tryBound {
		t.Errorf("%s was tried with %v to its deadline, want at most %v: an unanswered try holds the start that long", want, d.Round(time.Millisecond), tryBound)
	}
}

// TestStreamsRetryAnUnansweredCreation: a service's creation of a missing
// stream, bucket or object store that the server never answers is one
// bounded try, logged and counted, and the next try opens what the server
// has. Before, the try ran on the service's own context: bounded only by
// nats.go's 5 s default at start (here by the test's 30 s), a start held
// that long.
func TestStreamsRetryAnUnansweredCreation(t *testing.T) {
	url := natstest.Start(t)
	for _, tc := range []struct {
		kind, method string
		open         func(ctx context.Context, s *svc.Streams, js jetstream.JetStream) error
	}{
		{"stream", "CreateStream", func(ctx context.Context, s *svc.Streams, js jetstream.JetStream) error {
			if _, err := s.Stream(ctx, jetstream.StreamConfig{Name: "LOST_STREAM", Subjects: []string{"lost.>"}}); err != nil {
				return err
			}
			_, err := js.Stream(ctx, "LOST_STREAM")
			return err
		}},
		{"bucket", "CreateKeyValue", func(ctx context.Context, s *svc.Streams, js jetstream.JetStream) error {
			if _, err := s.KV(ctx, jetstream.KeyValueConfig{Bucket: "LOST_KV"}); err != nil {
				return err
			}
			_, err := js.KeyValue(ctx, "LOST_KV")
			return err
		}},
		{"object store", "CreateObjectStore", func(ctx context.Context, s *svc.Streams, js jetstream.JetStream) error {
			if _, err := s.ObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "LOST_OBJ"}); err != nil {
				return err
			}
			_, err := js.ObjectStore(ctx, "LOST_OBJ")
			return err
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			_, js := natstest.Connect(t, url)
			var l lostFirst
			reg := prometheus.NewRegistry()
			var logs syncBuffer
			s := svc.NewStreams(svc.Deps{
				JS:  natstest.Wrap(js, natstest.Hooks{Unanswered: l.unanswered}),
				Log: slog.New(slog.NewTextHandler(&logs, nil)), Reg: reg,
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tc.open(ctx, s, js); err != nil {
				t.Fatalf("open %s after its creation went unanswered: %v", tc.kind, err)
			}
			l.check(t, tc.method)
			if n := testutil.Metric(reg, "pilotwire_stream_ensure_retries_total"); n != 1 {
				t.Errorf("pilotwire_stream_ensure_retries_total = %v, want 1: the lost try, counted", n)
			}
			if got := logs.String(); !strings.Contains(got, "retrying") || !strings.Contains(got, "deadline exceeded") {
				t.Errorf("the lost try was not logged with its error:\n%s", got)
			}
		})
	}
}
