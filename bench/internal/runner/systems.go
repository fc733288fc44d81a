package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/procstat"
)

// Ours is pilotwire, run with `pilotwire up`.
func (p *Procs) Ours() System { return oursSystem{p} }

type oursSystem struct{ p *Procs }

func (oursSystem) Name() string { return "pilotwire" }

func (s oursSystem) Start(ctx context.Context, dir string) (Instance, error) {
	p := s.p
	name := p.next("pilotwire")
	base, err := FreePorts(7)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(p.WorkDir, name+"-data")
	httpBase, natsPort, adsPort := base, base+5, base+6
	level := p.LogLevel
	if level == "" {
		level = "info"
	}
	pr, err := p.start(name, filepath.Join(p.BinDir, "pilotwire"), p.OursEnv, "up",
		"--config-dir", dir, "--data-dir", data, "--bin-dir", p.BinDir,
		"--ads-addr", addr(adsPort), "--http-addr", addr(httpBase), "--nats-addr", addr(natsPort),
		"--log-level", level)
	if err != nil {
		return nil, err
	}
	inst := &oursInstance{pr: pr, ads: addr(adsPort), httpBase: httpBase, metrics: "http://" + addr(httpBase+4) + "/metrics", data: data}
	if err := waitReady(ctx, pr, "http://"+addr(httpBase)+"/readyz", 90*time.Second); err != nil {
		_ = inst.Stop()
		return nil, err
	}
	tree, _ := procstat.Tree(pr.pid())
	for _, pid := range tree {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == "ads" {
			inst.adsPid = pid
		}
	}
	if inst.adsPid == 0 {
		_ = inst.Stop()
		return nil, fmt.Errorf("no ads process under pilotwire up (pids %v)", tree)
	}
	return inst, nil
}

type oursInstance struct {
	pr       *proc
	ads      string
	httpBase int
	metrics  string
	data     string
	adsPid   int
}

// ourStages are the latency histograms of pilotwire's services, by the
// offset of the service's HTTP port from up's.
var ourStages = []struct {
	stage, metric string
	port          int
}{
	{"debounce (first change to PushRequest)", "pilot_debounce_time", 2},
	{"push queue (queued to order sent)", "pilot_proxy_queue_time", 3},
	{"generate and send one response", "pilot_xds_push_time", 4},
	{"change observed to response sent", "pilot_proxy_convergence_time", 4},
}

// Stages reads the sum and count of each stage's histogram.
func (i *oursInstance) Stages(ctx context.Context) map[string][2]float64 {
	out := make(map[string][2]float64)
	for _, s := range ourStages {
		url := "http://" + addr(i.httpBase+s.port) + "/metrics"
		sum, ok1 := metric(ctx, url, s.metric+"_sum")
		n, ok2 := metric(ctx, url, s.metric+"_count")
		if ok1 && ok2 {
			out[s.stage] = [2]float64{sum, n}
		}
	}
	return out
}

func (i *oursInstance) ADSAddr() string { return i.ads }

// CPU sums `pilotwire up` (with its embedded NATS) and its children.
func (i *oursInstance) CPU() (time.Duration, bool) {
	tree, err := procstat.Tree(i.pr.pid())
	if err != nil {
		return 0, false
	}
	return procstat.TreeCPU(tree), true
}

func (i *oursInstance) FrontendRSS() (uint64, bool) {
	v, err := procstat.RSS(i.adsPid)
	return v, err == nil
}

// FrontendLive: the ADS frontend serves pprof on its debug listener, its
// HTTP port + 100 (svc.DefaultDebugAddr, as up starts it).
func (i *oursInstance) FrontendLive(ctx context.Context) (uint64, bool) {
	return liveAfterGC(ctx, "http://"+addr(i.httpBase+4+100)+"/debug/pprof/heap", i.metrics)
}

func (i *oursInstance) Marshals(ctx context.Context) (float64, bool) {
	return metric(ctx, i.metrics, "pilotwire_xds_marshals_total")
}

func (i *oursInstance) MarshalsPerResponse() bool { return false }

func (i *oursInstance) Stop() error {
	err := i.pr.stop(60 * time.Second)
	_ = os.RemoveAll(i.data)
	return err
}

// ---- the baseline ----

// Baseline is the go-control-plane server, run with `pwbench baseline`.
func (p *Procs) Baseline(eds string, debounce time.Duration) System {
	return baselineSystem{p: p, eds: eds, debounce: debounce}
}

// Bare is a bare gRPC ADS server (`pwbench baseline --bare`).
func (p *Procs) Bare() System { return baselineSystem{p: p, bare: true} }

type baselineSystem struct {
	p        *Procs
	eds      string
	debounce time.Duration
	bare     bool
}

func (s baselineSystem) Name() string {
	if s.bare {
		return "bare-grpc"
	}
	return "go-control-plane"
}

func (s baselineSystem) Start(ctx context.Context, dir string) (Instance, error) {
	p := s.p
	name := p.next(map[bool]string{true: "bare", false: "baseline"}[s.bare])
	base, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	args := []string{"baseline", "--config-dir", dir, "--ads-addr", addr(base), "--http-addr", addr(base + 1)}
	if s.bare {
		args = append(args, "--bare")
	} else {
		args = append(args, "--eds-cache", s.eds, "--file-debounce", s.debounce.String())
	}
	if p.ProfileDir != "" {
		args = append(args, "--cpuprofile", filepath.Join(p.ProfileDir, name+".pprof"))
	}
	pr, err := p.start(name, p.Exe, nil, args...)
	if err != nil {
		return nil, err
	}
	inst := &baselineInstance{pr: pr, ads: addr(base), metrics: "http://" + addr(base+1) + "/metrics", bare: s.bare}
	if err := waitReady(ctx, pr, "http://"+addr(base+1)+"/readyz", 60*time.Second); err != nil {
		_ = inst.Stop()
		return nil, err
	}
	return inst, nil
}

type baselineInstance struct {
	pr      *proc
	ads     string
	metrics string
	bare    bool
}

func (i *baselineInstance) ADSAddr() string { return i.ads }

func (i *baselineInstance) CPU() (time.Duration, bool) {
	c, err := procstat.CPU(i.pr.pid())
	return c, err == nil
}

func (i *baselineInstance) FrontendRSS() (uint64, bool) {
	v, err := procstat.RSS(i.pr.pid())
	return v, err == nil
}

func (i *baselineInstance) FrontendLive(ctx context.Context) (uint64, bool) {
	return liveAfterGC(ctx, strings.TrimSuffix(i.metrics, "/metrics")+"/debug/pprof/heap", i.metrics)
}

func (i *baselineInstance) Marshals(ctx context.Context) (float64, bool) {
	if i.bare {
		return 0, false
	}
	return metric(ctx, i.metrics, "pilotwire_xds_marshals_total")
}

func (i *baselineInstance) MarshalsPerResponse() bool { return !i.bare }

func (i *baselineInstance) Stop() error { return i.pr.stop(30 * time.Second) }
