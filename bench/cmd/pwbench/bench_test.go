package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/bench/internal/baseline"
	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/runner"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
	"github.com/pilotwire/pilotwire/services/ingest"
)

// The benchmark harness's smoke tests: a tiny benchmark end to end, with
// the control planes in this process (the same services the e2e tests
// run) and the real harness around them; then the same through the
// binaries, built for the test.

// inProcOurs is pilotwire: the four services in this process, talking
// through an embedded JetStream (pipelinetest).
type inProcOurs struct{ t *testing.T }

func (inProcOurs) Name() string { return "pilotwire" }

func (s inProcOurs) Start(_ context.Context, dir string) (runner.Instance, error) {
	p := pipelinetest.Start(s.t, dir) // stopped when the test ends
	return &inProcInstance{addr: p.ADSAddr, reg: p.Registry("fe-0")}, nil
}

// inProcBaseline is the go-control-plane baseline in this process.
type inProcBaseline struct {
	t    *testing.T
	bare bool
}

func (s inProcBaseline) Name() string {
	if s.bare {
		return "bare-grpc"
	}
	return "go-control-plane"
}

func (s inProcBaseline) Start(ctx context.Context, dir string) (runner.Instance, error) {
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- baseline.Run(ctx, baseline.Config{
			Dir: dir, ADSAddr: "127.0.0.1:0", Debounce: 20 * time.Millisecond, Bare: s.bare, Registry: reg,
			Log:      slog.New(slog.NewTextHandler(pipelinetest.TestWriter{T: s.t}, nil)).With("component", "baseline"),
			OnListen: func(a string) { addr <- a },
		})
	}()
	select {
	case a := <-addr:
		return &inProcInstance{addr: a, reg: reg, perResponse: !s.bare, stop: func() error { cancel(); return <-done }}, nil
	case err := <-done:
		cancel()
		return nil, err
	}
}

type inProcInstance struct {
	addr        string
	reg         *prometheus.Registry
	perResponse bool
	stop        func() error
}

func (i *inProcInstance) ADSAddr() string             { return i.addr }
func (i *inProcInstance) CPU() (time.Duration, bool)  { return 0, false } // not separable in-process
func (i *inProcInstance) FrontendRSS() (uint64, bool) { return 0, false }

// FrontendLive: the frontend shares the test's process, so there is no
// outside view of its memory.
func (i *inProcInstance) FrontendLive(context.Context) (uint64, bool) { return 0, false }
func (i *inProcInstance) MarshalsPerResponse() bool                   { return i.perResponse }
func (i *inProcInstance) Marshals(context.Context) (float64, bool) {
	if i.reg == nil {
		return 0, false
	}
	return testutil.Metric(i.reg, "pilotwire_xds_marshals_total"), true
}
func (i *inProcInstance) Stop() error {
	if i.stop == nil {
		return nil
	}
	return i.stop()
}

// inProcLab measures ingest and replay with the services in this process.
type inProcLab struct {
	t   *testing.T
	url string
	js  jetstream.JetStream
}

func (l *inProcLab) Ingest(ctx context.Context, prefix string, src runner.IngestSource) (runner.IngestRun, error) {
	_, js := natstest.Connect(l.t, l.url)
	health := &svc.Health{}
	start := time.Now()
	ready, err := runUntilReady(ctx, health, func(ctx context.Context) error {
		return ingest.Run(ctx, ingest.Config{Common: svc.Common{NATSURL: l.url, Prefix: prefix}, ConfigDir: src.Dir, Kubeconfig: src.Kubeconfig, ClusterID: "Kubernetes"},
			svc.Deps{JS: js, Log: slog.New(slog.DiscardHandler), Reg: prometheus.NewRegistry(), Health: health})
	})
	if err != nil {
		return runner.IngestRun{}, err
	}
	names, _ := bus.NewNames(prefix)
	s, err := l.js.Stream(ctx, names.ChangesStream())
	if err != nil {
		return runner.IngestRun{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return runner.IngestRun{}, err
	}
	return runner.IngestRun{Ready: ready.Sub(start), Records: int(info.State.Msgs), First: info.State.FirstTime, Last: info.State.LastTime}, nil
}

func (l *inProcLab) Replay(ctx context.Context, prefix string) (time.Duration, error) {
	nc, js := natstest.Connect(l.t, l.url)
	d := svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler), Reg: prometheus.NewRegistry(), Health: &svc.Health{}}
	start := time.Now()
	ready, err := runUntilReady(ctx, d.Health, func(ctx context.Context) error {
		return ads.Run(ctx, ads.Config{Common: svc.Common{NATSURL: l.url, Prefix: prefix}, ADSAddr: "127.0.0.1:0", FrontendID: "replay-" + prefix,
			MaxConnectionAge: time.Hour, HeartbeatInterval: time.Second}, d)
	})
	return ready.Sub(start), err
}

func (l *inProcLab) Snapshot(ctx context.Context, prefix string) error {
	return runner.WriteSnapshot(ctx, l.js, prefix)
}

func (l *inProcLab) Close() error { return nil }

// runUntilReady runs a service until its health is ready, then stops it,
// and returns when it became ready.
func runUntilReady(ctx context.Context, h *svc.Health, run func(context.Context) error) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	done := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); done <- run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(testutil.DefaultTimeout)
	defer deadline.Stop()
	for !h.Ready() {
		select {
		case err := <-done:
			return time.Time{}, fmt.Errorf("service stopped before ready: %v", err)
		case <-deadline.C:
			return time.Time{}, errors.New("service not ready in time")
		case <-tick.C:
		}
	}
	return time.Now(), nil
}

func tinyConfig(t *testing.T) runner.Config {
	return runner.Config{
		Proxies:          []int{10},
		Meshes:           []mesh.Spec{{Services: 5, Endpoints: 2, Seed: 1}},
		Rounds:           1,
		RestartEndpoints: 4,
		RestartSteps:     2,
		RestartDuration:  200 * time.Millisecond,
		StepTimeout:      30 * time.Second,
		Quiet:            100 * time.Millisecond,
		RecordsMesh:      mesh.Spec{Services: 20, Endpoints: 2, Seed: 1},
		RecordsRepeat:    1,
		WorkDir:          t.TempDir(),
		DebounceAfter:    20 * time.Millisecond,
		Progress:         pipelinetest.TestWriter{T: t},
	}
}

// checkReport checks what every tiny benchmark must produce: every step of
// both systems converged, proxies agreed, and the outputs render.
func checkReport(t *testing.T, rep *runner.Report, systems []string) {
	t.Helper()
	if len(rep.Configs) != 1 {
		t.Fatalf("%d configurations, want 1", len(rep.Configs))
	}
	c := rep.Configs[0]
	for _, sys := range systems {
		n := 0
		for _, r := range c.Rounds {
			if r.System != sys {
				continue
			}
			n++
			if r.Err != "" || !r.FinalOK {
				t.Errorf("%s round %d: error %q, final ok %v", sys, r.Round, r.Err, r.FinalOK)
			}
			var names []string
			for _, s := range r.Steps {
				names = append(names, s.Name)
				if s.Converged != s.Proxies || s.Conv.N != s.Proxies {
					t.Errorf("%s %s: %d of %d proxies converged", sys, s.Name, s.Converged, s.Proxies)
				}
				if s.Conv.P99 < 0 || s.Conv.Max < s.Conv.P50 {
					t.Errorf("%s %s: convergence %+v", sys, s.Name, s.Conv)
				}
			}
			if want := "initial endpoint service restart reconnect"; strings.Join(names, " ") != want {
				t.Errorf("%s steps %v, want %s", sys, names, want)
			}
			if ep := r.Step(runner.StepEndpoint); ep != nil && (ep.ChangedResources == 0 || ep.BytesPerProxy == 0) {
				t.Errorf("%s endpoint change: %d changed resources, %.0f bytes per proxy", sys, ep.ChangedResources, ep.BytesPerProxy)
			}
		}
		if n != 1 {
			t.Errorf("%d rounds of %s, want 1", n, sys)
		}
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "### 10 proxies, mesh 5x2") || !strings.Contains(md.String(), "One endpoint changed, p99") {
		t.Errorf("markdown lacks the table:\n%s", md.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not parse: %v", err)
	}
	png := filepath.Join(t.TempDir(), "cdf.png")
	if err := rep.WritePNG(png, &rep.Configs[0]); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() < 1000 {
		t.Errorf("chart: %v, %v", fi, err)
	}
}

// TestBenchSmoke runs a tiny benchmark (10 proxies, mesh 5x2, one round)
// against both control planes in this process.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	cfg := tinyConfig(t)
	cfg.Systems = []runner.System{inProcOurs{t}, inProcBaseline{t: t}}
	cfg.Bare = inProcBaseline{t: t, bare: true}
	cfg.Fleets = runner.LocalFleets{}
	cfg.Records = &inProcLab{t: t, url: url, js: js}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.DefaultTimeout)
	defer cancel()
	rep, err := runner.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep, []string{"pilotwire", "go-control-plane"})
	if rep.Configs[0].Bare == nil || rep.Configs[0].Bare.Err != "" {
		t.Errorf("bare server: %+v", rep.Configs[0].Bare)
	}
	if r := rep.Records; r == nil || r.Err != "" || r.Records != 40 || r.Replay.N != 1 || r.ReplaySnapshot.N != 1 {
		t.Errorf("records: %+v, want 40 records ingested and replayed", r)
	}
}

// TestBenchBinaries runs `pwbench run` itself on a tiny benchmark,
// with binaries built for the test: the processes, ports, /proc readings
// and outputs of the real command.
func TestBenchBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	bin := t.TempDir()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct{ name, pkg string }{
		{"ingest", "./services/ingest/cmd/ingest"}, {"debouncer", "./services/debouncer/cmd/debouncer"},
		{"pusher", "./services/pusher/cmd/pusher"}, {"ads", "./services/ads/cmd/ads"}, {"pilotwire", "./cmd/pilotwire"},
		{"pwbench", "./bench/cmd/pwbench"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b.name), b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.name, err, out)
		}
	}
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.DefaultTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pwbench"), "run",
		"--proxies", "10", "--mesh", "5x2", "--rounds", "1", "--warmup", "0",
		"--restart-endpoints", "4", "--restart-steps", "2", "--restart-duration", "200ms",
		"--quiet", "100ms", "--step-timeout", "30s", "--baseline-debounce", "20ms",
		"--ours-env", "PILOT_DEBOUNCE_AFTER=20ms", "--ours-env", "PILOTWIRE_FILE_DEBOUNCE=20ms",
		"--records-mesh", "20x2", "--records-repeat", "1", "--kube-services", "20",
		"--work-dir", work, "--json", filepath.Join(work, "out.json"), "--png", filepath.Join(work, "out.png"))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = pipelinetest.TestWriter{T: t}
	if err := cmd.Run(); err != nil {
		logs, _ := filepath.Glob(filepath.Join(work, "logs", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("--- %s\n%s", l, tail(b, 3000))
		}
		t.Fatalf("pwbench run: %v\n%s", err, stdout.String())
	}
	b, err := os.ReadFile(filepath.Join(work, "out.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep runner.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("decode the JSON report: %v", err)
	}
	checkReport(t, &rep, []string{"pilotwire", "go-control-plane"})
	// Measured through /proc: CPU and memory of real processes.
	for _, r := range rep.Configs[0].Rounds {
		if r.RSSIdle == 0 || r.RSSSynced == 0 {
			t.Errorf("%s: resident memory not measured: %+v", r.System, r)
		}
	}
	if r := rep.Records; r == nil || r.Records != 40 || r.ReplaySnapshot.N != 1 {
		t.Errorf("records: %+v, want 40, replayed from a snapshot once", r)
	}
	// Ingest from a real kube-apiserver's informers: the runner checked the
	// stream held one record per listed object.
	if r := rep.Records; r != nil {
		if k := r.Kube; k == nil || k.Err != "" || k.Objects < 40 || k.EndToEnd.N != 1 {
			t.Errorf("ingest from a Kubernetes informer: %+v, want the 20 Services and their EndpointSlices ingested once", k)
		}
	}
	if !strings.Contains(stdout.String(), "| Ingest from a Kubernetes informer, end to end") {
		t.Errorf("no informer ingest row on stdout:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "| One endpoint changed, p99 |") {
		t.Errorf("no table on stdout:\n%s", stdout.String())
	}
	if _, err := os.Stat(filepath.Join(work, "out.png")); err != nil {
		t.Error(err)
	}

	// pwbench replay: the same build twice, as a before and an after.
	rwork := t.TempDir()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "pwbench"), "replay", "--bin-dirs", bin+","+bin,
		"--runs", "1", "--mesh", "20x2", "--work-dir", rwork).CombinedOutput()
	if err != nil {
		t.Fatalf("pwbench replay: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "40 records ingested") {
		t.Errorf("pwbench replay did not ingest the 40 records:\n%s", out)
	}
	for _, kind := range []string{"stream", "snapshot"} {
		if n := strings.Count(string(out), "| "+kind+" | "+bin+" |"); n != 2 {
			t.Errorf("pwbench replay: %d summary rows of %s starts, want 2:\n%s", n, kind, out)
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var _ io.Writer = pipelinetest.TestWriter{}
