// Package pipelinetest runs the four services in-process against one
// embedded JetStream server, for the end-to-end tests and the benchmark
// harness's smoke test.
package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
	"github.com/pilotwire/pilotwire/services/debouncer"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/pusher"
)

// pipeline is the four services running in-process against one embedded
// JetStream server, each with its own NATS connection, logger and metrics
// registry, talking only through NATS as the binaries do.
type Pipeline struct {
	ADSAddr  string   // the first frontend's
	ADSAddrs []string // every frontend's, in order
	URL      string   // the NATS server's
	regs     map[string]*prometheus.Registry
	crash    []func() // crash[i] kills frontend i without a goodbye
	errs     chan error
}

// Options tune Start.
type Options struct {
	Frontends       int                  // ADS frontends (default 1), named fe-0, fe-1, ...
	FrontendTimeout time.Duration        // pusher's; default 6 s
	Ingest          func(*ingest.Config) // adjusts ingest's config (e.g. adds Kubernetes clusters)
	// Debounce adjusts the debouncer's windows (quiet window 20 ms by
	// default here), e.g. EnableEDSDebounce off.
	Debounce func(*debounce.Config)
	// ADS adjusts every frontend's config (e.g. TLS, --kubeconfig).
	ADS func(*ads.Config)
	// Logs, when set, also receives every service's log lines.
	Logs io.Writer
}

// Start runs ingest (watching dir), debouncer, pusher and the ads
// frontends until the test ends, and waits until all are ready.
func Start(t *testing.T, dir string, opts ...Options) *Pipeline {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Frontends = max(o.Frontends, 1)
	url := natstest.Start(t)
	common := svc.Common{NATSURL: url, Prefix: "pw"}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var errs chan error
	p := &Pipeline{regs: make(map[string]*prometheus.Registry), URL: url}
	var healths []*svc.Health
	var logTo io.Writer = TestWriter{t}
	if o.Logs != nil {
		logTo = io.MultiWriter(logTo, o.Logs)
	}
	start := func(name string, run func(context.Context, svc.Deps) error) *nats.Conn {
		nc, js := natstest.Connect(t, url)
		d := svc.Deps{
			NC:     nc,
			JS:     js,
			Log:    slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", name),
			Reg:    prometheus.NewRegistry(),
			Health: &svc.Health{},
		}
		p.regs[name] = d.Reg
		healths = append(healths, d.Health)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, d); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
		return nc
	}
	errs = make(chan error, 3+o.Frontends)
	start("ingest", func(ctx context.Context, d svc.Deps) error {
		cfg := ingest.Config{Common: common, ConfigDir: dir, ClusterID: "Kubernetes", FileDebounce: 20 * time.Millisecond}
		if o.Ingest != nil {
			o.Ingest(&cfg)
		}
		return ingest.Run(ctx, cfg, d)
	})
	start("debouncer", func(ctx context.Context, d svc.Deps) error {
		cfg := debounce.DefaultConfig()
		cfg.DebounceAfter = 20 * time.Millisecond
		if o.Debounce != nil {
			o.Debounce(&cfg)
		}
		return debouncer.Run(ctx, debouncer.Config{Common: common, Debounce: cfg}, d)
	})
	start("pusher", func(ctx context.Context, d svc.Deps) error {
		return pusher.Run(ctx, pusher.Config{Common: common, FrontendTimeout: o.FrontendTimeout}, d)
	})
	for i := range o.Frontends {
		name := fmt.Sprintf("fe-%d", i)
		addr := make(chan string, 1)
		fctx, fcancel := context.WithCancel(ctx)
		nc := start(name, func(_ context.Context, d svc.Deps) error {
			cfg := ads.Config{
				Common:            common,
				ADSAddr:           "127.0.0.1:0",
				FrontendID:        name,
				MaxConnectionAge:  time.Hour,
				HeartbeatInterval: 200 * time.Millisecond,
				RecordDeliveries:  true,
				OnListen:          func(a string) { addr <- a },
			}
			if o.ADS != nil {
				o.ADS(&cfg)
			}
			return ads.Run(fctx, cfg, d)
		})
		p.ADSAddrs = append(p.ADSAddrs, <-addr)
		// A crash: the NATS connection drops first (no deregistration, no
		// more heartbeats), then the gRPC streams end.
		p.crash = append(p.crash, func() { nc.Close(); fcancel() })
	}
	p.ADSAddr = p.ADSAddrs[0]
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("service failed: %v", err)
			}
		}
	})
	p.errs = errs
	p.WaitFor(t, "every service ready", func() bool {
		for _, h := range healths {
			if !h.Ready() {
				return false
			}
		}
		return true
	})
	// Ingest is ready once it has published its initial scan, but a
	// frontend may have read the stream's end just before: wait until
	// every frontend's model holds the scan, so a test's first responses
	// are the directory's and no push of it comes in between.
	_, js := natstest.Connect(t, url)
	sctx, scancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer scancel()
	names, err := bus.NewNames(common.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(sctx, names.ChangesStream())
	if err != nil {
		t.Fatalf("changes stream: %v", err)
	}
	info, err := st.Info(sctx)
	if err != nil {
		t.Fatalf("changes stream info: %v", err)
	}
	for i := range o.Frontends {
		name := fmt.Sprintf("fe-%d", i)
		p.WaitFor(t, name+"'s model at the initial scan", func() bool {
			return p.Metric(t, name, "pilotwire_ads_applied_seq") >= float64(info.State.LastSeq)
		})
	}
	return p
}

// Metric sums a counter or gauge of one service's registry.
func (p *Pipeline) Metric(t *testing.T, service, name string) float64 {
	t.Helper()
	return testutil.Metric(p.regs[service], name)
}

// Crash kills frontend i without a goodbye: its NATS connection drops
// first (no deregistration, no more heartbeats), then its gRPC streams end.
func (p *Pipeline) Crash(i int) { p.crash[i]() }

// WaitFor polls cond until it holds, failing the test at the deadline or
// when a service fails.
func (p *Pipeline) WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testutil.DefaultTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case err := <-p.errs:
			t.Fatalf("waiting for %s: %v", what, err)
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// WriteFile writes a manifest atomically (temp file + rename), as editors do.
func WriteFile(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// TestWriter sends log lines to t.Log while the test runs.
type TestWriter struct{ T testing.TB }

func (w TestWriter) Write(p []byte) (int, error) {
	w.T.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// Registry is one service's metrics registry ("ingest", "debouncer",
// "pusher", "fe-0", ...).
func (p *Pipeline) Registry(service string) *prometheus.Registry { return p.regs[service] }
