package svc_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// syncBuffer is a log sink the connect goroutine writes while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestConnectRedactsURL: a password in the NATS URL appears neither in the
// retry log lines nor in the error.
func TestConnectRedactsURL(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens: every try fails
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "f", Help: "f"})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, _, err := svc.Connect(ctx, "nats://alice:s3cr3t@"+addr, "test", svc.NATSAuth{}, log, failures)
		errc <- err
	}()
	testutil.Eventually(t, "a failed try", func() bool { return promtest.ToFloat64(failures) > 0 })
	cancel()
	err = <-errc
	if err == nil {
		t.Fatal("connect to nothing succeeded")
	}
	for what, s := range map[string]string{"log": logs.String(), "error": err.Error()} {
		if strings.Contains(s, "s3cr3t") {
			t.Errorf("the password is in the %s: %s", what, s)
		}
		if !strings.Contains(s, "alice") {
			t.Errorf("the %s does not name the user: %s", what, s)
		}
	}
}

// TestOnReconnectKeepsTheLogLine: a handler added with OnReconnect runs
// when the connection is re-established, after Connect's own (its log
// line is still written); a handler removed before does not.
func TestOnReconnectKeepsTheLogLine(t *testing.T) {
	c := natstest.StartCluster(t, natstest.ClusterOptions{})
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "f", Help: "f"})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	nc, _, err := svc.Connect(ctx, c.URL(0), "test", svc.NATSAuth{}, log, failures)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var calls atomic.Int32
	svc.OnReconnect(nc, func() { calls.Add(1) })
	remove := svc.OnReconnect(nc, func() { calls.Add(100) })
	svc.OnReconnect(nc, func() { calls.Add(10) })
	remove()
	c.Stop(0) // nc reconnects to another node it learnt of
	testutil.Eventually(t, "both handlers ran", func() bool { return calls.Load()%100 == 11 })
	if calls.Load() != 11 {
		t.Errorf("handler calls add up to %d, want 11: the removed handler ran", calls.Load())
	}
	if !strings.Contains(logs.String(), "nats reconnected") {
		t.Errorf("Connect's reconnect log line is gone; logs:\n%s", logs.String())
	}
}
