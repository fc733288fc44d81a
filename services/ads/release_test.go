package ads

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

// TestRunReleasesItsModel: once Run returns, nothing it made keeps its
// model alive through the NATS connection it was given, so a process
// that runs frontends one after another on one connection (the replay
// benchmarks, tests) holds one model, not all of them.
func TestRunReleasesItsModel(t *testing.T) {
	url := natstest.Start(t)
	nc, js := natstest.Connect(t, url)
	released := make(chan struct{})
	ready := make(chan struct{})
	cfg := Config{
		Common:     svc.Common{NATSURL: url, Prefix: "pw"},
		ADSAddr:    "127.0.0.1:0",
		FrontendID: "fe-1",
		OnListen:   func(string) { close(ready) },
		onStore: func(s *model.Store) {
			runtime.AddCleanup(s, func(ch chan struct{}) { close(ch) }, released)
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, cfg, svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler), Reg: prometheus.NewRegistry(), Health: &svc.Health{}})
	}()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("Run: %v", err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	testutil.Eventually(t, "the model released after Run returned", func() bool {
		runtime.GC()
		select {
		case <-released:
			return true
		default:
			return false
		}
	})
}
