package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/loadgen"
	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/stats"
	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/kubemesh"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// runner runs one benchmark.
type runner struct {
	cfg      Config
	log      *slog.Logger
	progress io.Writer
	targetID int64
	refIndex int
}

// Run runs the benchmark: every configuration, then the records lab.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if len(cfg.Systems) == 0 || cfg.Fleets == nil || len(cfg.Proxies) == 0 || len(cfg.Meshes) == 0 {
		return nil, errors.New("bench: systems, a load generator, proxy counts and meshes are required")
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 60 * time.Second
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 500 * time.Millisecond
	}
	if cfg.QuietMax <= 0 {
		cfg.QuietMax = 10 * time.Second
	}
	if cfg.IdleCPU <= 0 {
		cfg.IdleCPU = 0.05
	}
	if cfg.IdleWindow <= 0 {
		cfg.IdleWindow = time.Second
	}
	if cfg.IdleMax <= 0 {
		cfg.IdleMax = 20 * time.Second
	}
	if cfg.RestartSteps <= 0 {
		cfg.RestartSteps = 1
	}
	if cfg.RecordsRepeat <= 0 {
		cfg.RecordsRepeat = 1
	}
	if cfg.WorkDir == "" {
		return nil, errors.New("bench: a work directory is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	r := &runner{cfg: cfg, log: cfg.Log, progress: cfg.Progress}
	rep := &Report{Started: time.Now(), Host: hostInfo()}
	for _, s := range cfg.Systems {
		rep.Settings.Systems = append(rep.Settings.Systems, s.Name())
	}
	rep.Settings.Rounds, rep.Settings.Warmup, rep.Settings.Delta = cfg.Rounds, cfg.Warmup, cfg.Delta
	rep.Settings.ReconnectFresh = cfg.ReconnectFresh
	rep.Settings.Seed = cfg.Meshes[0].Seed
	rep.Settings.RestartEndpoints, rep.Settings.RestartSteps = cfg.RestartEndpoints, cfg.RestartSteps
	rep.Settings.RestartDuration = cfg.RestartDuration.String()
	rep.Settings.DebounceAfter = cfg.DebounceAfter.String()
	rep.Settings.FileDebounce = cfg.FileDebounce.String()
	for _, spec := range cfg.Meshes {
		for _, n := range cfg.Proxies {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			rep.Configs = append(rep.Configs, r.runConfig(ctx, spec, n))
		}
	}
	if cfg.Records != nil && ctx.Err() == nil {
		rep.Records = r.records(ctx)
	}
	rep.Duration = time.Since(rep.Started).Seconds()
	return rep, ctx.Err()
}

func (r *runner) printf(format string, args ...any) {
	fmt.Fprintf(r.progress, format+"\n", args...)
}

// runConfig runs every round of one configuration, alternating systems.
func (r *runner) runConfig(ctx context.Context, spec mesh.Spec, n int) ConfigResult {
	res := ConfigResult{Proxies: n, Mesh: spec.String()}
	if r.cfg.Bare != nil {
		res.Bare = r.bare(ctx, spec, n)
	}
	total := r.cfg.Warmup + r.cfg.Rounds
	for i := range total {
		for _, sys := range r.cfg.Systems {
			if ctx.Err() != nil {
				return res
			}
			res.Rounds = append(res.Rounds, r.round(ctx, sys, spec, n, i, i < r.cfg.Warmup))
		}
	}
	return res
}

func (r *runner) round(ctx context.Context, sys System, spec mesh.Spec, n, idx int, warmup bool) RoundResult {
	start := time.Now()
	rr := RoundResult{System: sys.Name(), Round: idx, Warmup: warmup, Proxies: n, Mesh: spec.String()}
	label := fmt.Sprintf("[%s n=%d mesh=%s round %d%s]", sys.Name(), n, spec, idx, map[bool]string{true: " warm-up"}[warmup])
	if err := r.trace(ctx, sys, spec, n, idx, &rr, label); err != nil {
		rr.Err = err.Error()
		r.printf("%s FAILED: %v", label, err)
	}
	rr.Duration = time.Since(start).Seconds()
	return rr
}

// shadow is a copy of the mesh directory where each change is written
// first, so that the expected configuration is known before the change
// reaches the server.
type shadow struct {
	dir   string
	files *yamldir.Dir
	store *model.Store
}

func newShadow(dir string, m *mesh.Mesh) (*shadow, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := m.WriteAll(dir); err != nil {
		return nil, err
	}
	s := &shadow{dir: dir, files: yamldir.New(dir, "Kubernetes"), store: model.NewStore()}
	recs, errs := s.files.Scan()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if _, err := yamldir.Apply(s.store, recs); err != nil {
		return nil, err
	}
	return s, nil
}

// write applies services to the shadow and returns the expected config.
func (s *shadow) write(services ...*mesh.Service) (*xdsstate.Config, error) {
	var names []string
	for _, svc := range services {
		if _, err := mesh.WriteFile(s.dir, mesh.FileName(svc), mesh.Render(svc)); err != nil {
			return nil, err
		}
		names = append(names, mesh.FileName(svc))
	}
	recs, errs := s.files.Reload(names)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if bad, err := yamldir.Apply(s.store, recs); err != nil || bad > 0 {
		return nil, fmt.Errorf("model rejected %d objects: %v", bad, err)
	}
	return s.expected()
}

func (s *shadow) expected() (*xdsstate.Config, error) {
	return xdsstate.Expected(s.store.Snapshot(), xdsgen.Envoy)
}

// env is what the steps of one round share.
type env struct {
	inst  Instance
	fleet Fleet
	n     int
	label string
	// idle is the control plane's CPU, in cores, with the fleet in sync
	// and nothing changing (0 until measured after the initial sync): a
	// step's tail ends once the control plane is back within IdleCPU of
	// it.
	idle float64
}

// trace runs the trace of one round.
func (r *runner) trace(ctx context.Context, sys System, spec mesh.Spec, n, idx int, rr *RoundResult, label string) (err error) {
	base := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("%s-n%d-%s-%d", sys.Name(), n, spec, idx))
	dir := filepath.Join(base, "mesh")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(base)
	m, err := mesh.New(spec)
	if err != nil {
		return err
	}
	if err := m.WriteAll(dir); err != nil {
		return err
	}
	sh, err := newShadow(filepath.Join(base, "shadow"), m)
	if err != nil {
		return err
	}
	cur, err := sh.expected()
	if err != nil {
		return err
	}

	inst, err := sys.Start(ctx, dir)
	if err != nil {
		return fmt.Errorf("start %s: %w", sys.Name(), err)
	}
	defer func() {
		if stopErr := inst.Stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stop %s: %w", sys.Name(), stopErr)
		}
	}()
	marshals0, _ := inst.Marshals(ctx)
	if err := r.reference(ctx, inst.ADSAddr(), cur.State()); err != nil {
		return fmt.Errorf("before the fleet: %w", err)
	}
	rr.RSSIdle, _ = inst.FrontendRSS()
	rr.LiveIdle, _ = inst.FrontendLive(ctx)

	fleet, err := r.cfg.Fleets.NewFleet(ctx, loadgen.Options{Addr: inst.ADSAddr(), Proxies: n, Delta: r.cfg.Delta, DecodeAll: r.cfg.DecodeAll, Log: r.log})
	if err != nil {
		return err
	}
	defer fleet.Close()
	e := &env{inst: inst, fleet: fleet, n: n, label: label}

	// 0: every proxy connects at once and syncs.
	empty := &xdsstate.Config{}
	st, err := r.step(ctx, e, StepInitial, empty, cur, false, &marshals0, func() (int64, error) {
		at := time.Now().UnixNano()
		return at, fleet.Start(ctx)
	})
	rr.Steps = append(rr.Steps, st)
	if err != nil {
		return err
	}
	rr.RSSSynced, _ = inst.FrontendRSS()
	if rr.RSSSynced > rr.RSSIdle {
		rr.RSSPerStream = float64(rr.RSSSynced-rr.RSSIdle) / float64(n)
	}
	if live, ok := inst.FrontendLive(ctx); ok && rr.LiveIdle > 0 && live > rr.LiveIdle {
		rr.LiveSynced = live
		rr.LivePerStream = float64(live-rr.LiveIdle) / float64(n)
	}
	// What the control plane burns with the fleet in sync and nothing
	// changing (heartbeats, leases, keepalives): the later steps' tails
	// end once it is back there, not at an absolute rate its background
	// may exceed on a slow machine, which would count up to IdleMax of
	// background in each step.
	if rate, ok := idleRate(ctx, inst, idleSample); ok {
		e.idle, rr.IdleCores = rate, rate
		// The initial sync's tail ran before the background was known.
		if st := &rr.Steps[len(rr.Steps)-1]; recountTail(st, r.cfg.IdleCPU+rate, r.cfg.IdleWindow) {
			r.printf("%s %-9s background %.3f cores: its tail recounted to %s, cpu %s", label, st.Name, rate, fmtSec(st.Tail), fmtSec(st.CPU))
		}
	}

	// 1: one endpoint changes.
	svc := m.ChangeEndpoint()
	next, err := sh.write(svc)
	if err != nil {
		return err
	}
	st, err = r.step(ctx, e, StepEndpoint, cur, next, false, nil, func() (int64, error) {
		at, err := mesh.Write(dir, svc)
		return at.UnixNano(), err
	})
	rr.Steps = append(rr.Steps, st)
	if err != nil {
		return err
	}
	cur = next

	// 2: one service is added.
	svc = m.AddService()
	if next, err = sh.write(svc); err != nil {
		return err
	}
	st, err = r.step(ctx, e, StepService, cur, next, false, nil, func() (int64, error) {
		at, err := mesh.Write(dir, svc)
		return at.UnixNano(), err
	})
	rr.Steps = append(rr.Steps, st)
	if err != nil {
		return err
	}
	cur = next

	// 3: a rolling restart: endpoints replaced in steps over a period.
	if r.cfg.RestartEndpoints > 0 {
		plan := m.RestartPlan(r.cfg.RestartEndpoints, r.cfg.RestartSteps)
		batches := make([][]*mesh.Service, len(plan))
		contents := make([]map[string][]byte, len(plan))
		for i, refs := range plan {
			batches[i] = m.Restart(refs)
			contents[i] = make(map[string][]byte)
			for _, s := range batches[i] {
				contents[i][mesh.FileName(s)] = mesh.Render(s)
			}
			if next, err = sh.write(batches[i]...); err != nil {
				return err
			}
		}
		interval := time.Duration(0)
		if len(plan) > 1 {
			interval = r.cfg.RestartDuration / time.Duration(len(plan)-1)
		}
		var first int64
		st, err = r.step(ctx, e, StepRestart, cur, next, false, nil, func() (int64, error) {
			start := time.Now()
			var last time.Time
			for i := range contents {
				if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-ctx.Done():
						t.Stop()
						return 0, ctx.Err()
					case <-t.C:
					}
				}
				for name, b := range contents[i] {
					at, err := mesh.WriteFile(dir, name, b)
					if err != nil {
						return 0, err
					}
					last = at
					if first == 0 {
						first = at.UnixNano()
					}
				}
			}
			return last.UnixNano(), nil
		})
		if st.Conv.N > 0 && first > 0 {
			st.FromFirstWrite = st.injectAt - float64(first)/1e9 + st.Conv.Max
		}
		rr.Steps = append(rr.Steps, st)
		if err != nil {
			return err
		}
		cur = next
	}

	// 4: every proxy reconnects at once.
	st, err = r.step(ctx, e, StepReconnect, cur, cur, true, nil, func() (int64, error) {
		return fleet.Reconnect(ctx, r.cfg.ReconnectFresh)
	})
	rr.Steps = append(rr.Steps, st)
	if err != nil {
		return err
	}

	// The end: proxies agree with each other, with the expected config,
	// and with a fresh proxy.
	fin, err := fleet.Final(ctx)
	if err != nil {
		return err
	}
	rr.FinalStates = len(fin.States)
	rr.FinalOK = len(fin.States) == 1 && fin.States[cur.State()] == n
	if err := r.reference(ctx, inst.ADSAddr(), cur.State()); err != nil {
		rr.FinalOK = false
		return fmt.Errorf("after the trace: %w", err)
	}
	rr.RSSEnd, _ = inst.FrontendRSS()
	if !rr.FinalOK {
		return fmt.Errorf("proxies ended in %d distinct configurations, %d of %d at the expected one", len(fin.States), fin.States[cur.State()], n)
	}
	return nil
}

// step runs one step: set the target (after inject for fresh targets),
// inject, wait for every proxy, wait for quiet, and measure.
func (r *runner) step(ctx context.Context, e *env, name string, prev, next *xdsstate.Config, fresh bool, marshalBase *float64,
	inject func() (int64, error)) (StepResult, error) {
	st := StepResult{Name: name, Proxies: e.n}
	start := time.Now()
	r.targetID++
	target := loadgen.Target{ID: r.targetID, State: next.State()}
	if !fresh {
		if err := e.fleet.SetTarget(ctx, target); err != nil {
			return st, err
		}
	}
	cpu0, cpuOK := e.inst.CPU()
	cpuFrom := time.Now()
	lg0, lgOK := r.cfg.Fleets.CPU(e.fleet)
	stats0, err := e.fleet.Stats(ctx)
	if err != nil {
		return st, err
	}
	m0, mOK := e.inst.Marshals(ctx)
	if marshalBase != nil {
		m0 = *marshalBase
	}

	var stages0 map[string][2]float64
	staged, _ := e.inst.(Staged)
	if staged != nil {
		stages0 = staged.Stages(ctx)
	}
	at, err := inject()
	if err != nil {
		return st, fmt.Errorf("%s: inject: %w", name, err)
	}
	st.injectAt = float64(at) / 1e9
	if fresh {
		target.Fresh, target.Since = true, at
		if err := e.fleet.SetTarget(ctx, target); err != nil {
			return st, err
		}
	}
	res, err := e.fleet.Wait(ctx, r.cfg.StepTimeout)
	if err != nil {
		return st, err
	}
	if err := e.fleet.Quiet(ctx, r.cfg.Quiet, r.cfg.QuietMax); err != nil {
		return st, err
	}
	if fresh && res.Matched == res.Total {
		// Responses that came after a resumed proxy matched count too.
		if res, err = e.fleet.Wait(ctx, time.Millisecond); err != nil {
			return st, err
		}
	}
	if cpuOK {
		quietEnd := time.Now()
		tail, idle, samples := waitIdle(ctx, e.inst, r.cfg.IdleCPU+e.idle, r.cfg.IdleWindow, r.cfg.IdleMax)
		st.Tail = tail.Seconds()
		st.tail = &tailSamples{samples: samples, cpu0: cpu0, from: cpuFrom, quietEnd: quietEnd}
		if !idle {
			r.printf("%s %-9s the control plane was still busy %s after the fleet went quiet", e.label, name, fmtSec(st.Tail))
		}
	}
	cpu1, _ := e.inst.CPU()
	st.Window = time.Since(cpuFrom).Seconds()
	lg1, _ := r.cfg.Fleets.CPU(e.fleet)
	stats1, err := e.fleet.Stats(ctx)
	if err != nil {
		return st, err
	}
	m1, _ := e.inst.Marshals(ctx)
	if staged != nil {
		st.Stages = make(map[string]float64)
		for k, v := range staged.Stages(ctx) {
			if n := v[1] - stages0[k][1]; n > 0 {
				st.Stages[k] = (v[0] - stages0[k][0]) / n
			}
		}
	}

	st.Converged = res.Matched
	conv := make([]float64, 0, len(res.Times))
	arr := make([]float64, 0, len(res.Times))
	for _, t := range res.Times {
		conv = append(conv, float64(t.Ack-at)/1e9)
		arr = append(arr, float64(t.Arrival-at)/1e9)
	}
	st.Conv, st.Arrival, st.Times = stats.Describe(conv), stats.Describe(arr), conv
	st.CPU, st.LoadgenCPU = math.NaN(), math.NaN()
	if cpuOK {
		st.CPU = (cpu1 - cpu0).Seconds()
	}
	if lgOK {
		st.LoadgenCPU = (lg1 - lg0).Seconds()
	}
	n := float64(e.n)
	st.BytesPerProxy = float64(stats1.MessageBytes-stats0.MessageBytes) / n
	var resBytes, resources int64
	for t := range xdsstate.NumTypes {
		resBytes += stats1.ByType[t].Bytes - stats0.ByType[t].Bytes
		resources += stats1.ByType[t].Resources - stats0.ByType[t].Resources
	}
	st.ResourceBytesPerProxy = float64(resBytes) / n
	st.ResponsesPerProxy = float64(stats1.Responses-stats0.Responses) / n
	st.ChangedResources, st.ChangedBytes = xdsstate.Changed(prev, next)
	st.NewVersions = stats1.Versions - stats0.Versions
	st.StreamFailures = stats1.StreamFailures - stats0.StreamFailures
	st.Marshals, st.MarshalsPerVersion = math.NaN(), math.NaN()
	if mOK {
		st.Marshals = m1 - m0
		if e.inst.MarshalsPerResponse() {
			st.Marshals += float64(resources)
		}
		if st.NewVersions > 0 {
			st.MarshalsPerVersion = st.Marshals / float64(st.NewVersions)
		}
	}
	st.Duration = time.Since(start).Seconds()
	r.printf("%s %-9s %d/%d converged  p50 %s  p99 %s  max %s  cpu %s (busy %s after quiet)  %.1f KiB/proxy (changed %.1f KiB)",
		e.label, name, res.Matched, res.Total, fmtSec(st.Conv.P50), fmtSec(st.Conv.P99), fmtSec(st.Conv.Max),
		fmtSec(st.CPU), fmtSec(st.Tail), st.BytesPerProxy/1024, float64(st.ChangedBytes)/1024)
	if res.Matched < res.Total {
		return st, fmt.Errorf("%s: only %d of %d proxies reached the expected configuration within %s (not: %v; %v)",
			name, res.Matched, res.Total, r.cfg.StepTimeout, res.Unmatched, res.Sample)
	}
	return st, nil
}

// idlePoll is how often waitIdle reads the control plane's CPU.
const idlePoll = 100 * time.Millisecond

// idleSample is how long idleRate measures.
const idleSample = 2 * time.Second

// idleRate is inst's CPU, in cores, over the next d.
func idleRate(ctx context.Context, inst Instance, d time.Duration) (float64, bool) {
	cpu0, ok := inst.CPU()
	if !ok {
		return 0, false
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, false
	case <-t.C:
	}
	cpu1, ok := inst.CPU()
	if !ok || cpu1 < cpu0 {
		return 0, false
	}
	return float64(cpu1-cpu0) / float64(time.Since(start)), true
}

// tailSamples is what a step read of the control plane's CPU while it
// waited for it to go idle, with the step's start: enough to end its tail
// again at another threshold.
type tailSamples struct {
	samples        []cpuSample
	cpu0           time.Duration // the CPU at the step's start
	from, quietEnd time.Time     // the step's start; the end of its quiet period
}

// recountTail ends st's tail at the first of its samples where the
// control plane used at most cores over window, and recounts its CPU and
// window to there. It reports whether it did.
func recountTail(st *StepResult, cores float64, window time.Duration) bool {
	t := st.tail
	if t == nil {
		return false
	}
	i := firstIdle(t.samples, cores, window)
	if i < 0 {
		return false
	}
	s := t.samples[i]
	st.CPU = (s.cpu - t.cpu0).Seconds()
	st.Tail = s.at.Sub(t.quietEnd).Seconds()
	st.Window = s.at.Sub(t.from).Seconds()
	st.TailRecounted = true
	return true
}

// cpuSample is the control plane's CPU time read at a moment.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// waitIdle waits until inst used at most cores over the last window, for
// up to most. It returns how long it waited, whether inst went idle, and
// every sample it read.
func waitIdle(ctx context.Context, inst Instance, cores float64, window, most time.Duration) (time.Duration, bool, []cpuSample) {
	start := time.Now()
	var samples []cpuSample
	tick := time.NewTicker(idlePoll)
	defer tick.Stop()
	for {
		now := time.Now()
		cpu, ok := inst.CPU()
		if !ok {
			return now.Sub(start), false, samples
		}
		samples = append(samples, cpuSample{now, cpu})
		if idleAt(samples, len(samples)-1, cores, window) {
			return now.Sub(start), true, samples
		}
		if now.Sub(start) >= most {
			return now.Sub(start), false, samples
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false, samples
		case <-tick.C:
		}
	}
}

// idleAt reports whether, at samples[i], the CPU used over the window
// before it (anchored on the newest sample at least a window older) is at
// most cores.
func idleAt(samples []cpuSample, i int, cores float64, window time.Duration) bool {
	now, first := samples[i], -1
	for j := i - 1; j >= 0; j-- {
		if now.at.Sub(samples[j].at) >= window {
			first = j
			break
		}
	}
	if first < 0 {
		return false
	}
	return float64(now.cpu-samples[first].cpu)/float64(now.at.Sub(samples[first].at)) <= cores
}

// firstIdle is the index of the first of samples at which the CPU used
// over the window before it is at most cores, or -1.
func firstIdle(samples []cpuSample, cores float64, window time.Duration) int {
	for i := range samples {
		if idleAt(samples, i, cores, window) {
			return i
		}
	}
	return -1
}

// reference connects one fresh proxy and waits for it to hold want.
func (r *runner) reference(ctx context.Context, addr string, want xdsstate.State) error {
	r.refIndex++
	f, err := loadgen.New(loadgen.Options{Addr: addr, Proxies: 1, First: 9_000_000 + r.refIndex, Delta: r.cfg.Delta,
		BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second})
	if err != nil {
		return err
	}
	defer f.Close()
	_ = f.SetTarget(ctx, loadgen.Target{ID: 1, State: want})
	if err := f.Start(ctx); err != nil {
		return err
	}
	res, err := f.Wait(ctx, r.cfg.StepTimeout)
	if err != nil {
		return err
	}
	if res.Matched != 1 {
		return fmt.Errorf("a reference proxy did not get the expected configuration within %s: %v", r.cfg.StepTimeout, res.Sample)
	}
	return nil
}

// bare measures a bare gRPC ADS server's memory per stream.
func (r *runner) bare(ctx context.Context, spec mesh.Spec, n int) *BareResult {
	res := &BareResult{}
	fail := func(err error) *BareResult {
		res.Err = err.Error()
		r.printf("[bare n=%d] FAILED: %v", n, err)
		return res
	}
	dir := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("bare-n%d-%s", n, spec))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	inst, err := r.cfg.Bare.Start(ctx, dir)
	if err != nil {
		return fail(err)
	}
	defer inst.Stop()
	if err := r.reference(ctx, inst.ADSAddr(), xdsstate.State{}); err != nil {
		return fail(err)
	}
	res.RSSIdle, _ = inst.FrontendRSS()
	res.LiveIdle, _ = inst.FrontendLive(ctx)
	f, err := r.cfg.Fleets.NewFleet(ctx, loadgen.Options{Addr: inst.ADSAddr(), Proxies: n, Delta: r.cfg.Delta})
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	r.targetID++
	if err := f.SetTarget(ctx, loadgen.Target{ID: r.targetID}); err != nil {
		return fail(err)
	}
	if err := f.Start(ctx); err != nil {
		return fail(err)
	}
	w, err := f.Wait(ctx, r.cfg.StepTimeout)
	if err != nil {
		return fail(err)
	}
	if w.Matched != n {
		return fail(fmt.Errorf("%d of %d streams set up", w.Matched, n))
	}
	if err := f.Quiet(ctx, r.cfg.Quiet, r.cfg.QuietMax); err != nil {
		return fail(err)
	}
	res.RSSSynced, _ = inst.FrontendRSS()
	if res.RSSSynced > res.RSSIdle {
		res.RSSPerStream = float64(res.RSSSynced-res.RSSIdle) / float64(n)
	}
	if live, ok := inst.FrontendLive(ctx); ok && res.LiveIdle > 0 && live > res.LiveIdle {
		res.LiveSynced = live
		res.LivePerStream = float64(live-res.LiveIdle) / float64(n)
	}
	r.printf("[bare grpc n=%d] %.1f KiB resident, %.1f KiB live after two GCs, per stream", n, res.RSSPerStream/1024, res.LivePerStream/1024)
	return res
}

// records measures the change stream with the records lab.
func (r *runner) records(ctx context.Context) *RecordsResult {
	spec := r.cfg.RecordsMesh
	res := &RecordsResult{Mesh: spec.String()}
	fail := func(err error) *RecordsResult {
		res.Err = err.Error()
		r.printf("[records] FAILED: %v", err)
		return res
	}
	defer r.cfg.Records.Close()
	dir := filepath.Join(r.cfg.WorkDir, "records-"+spec.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	m, err := mesh.New(spec)
	if err != nil {
		return fail(err)
	}
	if err := m.WriteAll(dir); err != nil {
		return fail(err)
	}
	var publish, e2e, replay, net, empty, fromSnap []float64
	for i := range r.cfg.RecordsRepeat {
		prefix := fmt.Sprintf("rec%d", i)
		run, err := r.cfg.Records.Ingest(ctx, prefix, IngestSource{Dir: dir})
		if err != nil {
			return fail(err)
		}
		res.Records = run.Records
		if d := run.Last.Sub(run.First); d > 0 {
			publish = append(publish, float64(run.Records)/d.Seconds())
		}
		e2e = append(e2e, float64(run.Records)/run.Ready.Seconds())
		full, err := r.cfg.Records.Replay(ctx, prefix)
		if err != nil {
			return fail(err)
		}
		none, err := r.cfg.Records.Replay(ctx, fmt.Sprintf("empty%d", i))
		if err != nil {
			return fail(err)
		}
		replay = append(replay, float64(run.Records)/full.Seconds())
		empty = append(empty, none.Seconds())
		if full > none {
			net = append(net, float64(run.Records)/(full-none).Seconds())
		}
		if err := r.cfg.Records.Snapshot(ctx, prefix); err != nil {
			return fail(err)
		}
		snap, err := r.cfg.Records.Replay(ctx, prefix)
		if err != nil {
			return fail(err)
		}
		fromSnap = append(fromSnap, float64(run.Records)/snap.Seconds())
		r.printf("[records %s] %d records: ingest ready in %s (publish %.0f/s), replay ready in %s (empty stream %s, from a snapshot %s)",
			spec, run.Records, run.Ready.Round(time.Millisecond), last(publish), full.Round(time.Millisecond), none.Round(time.Millisecond), snap.Round(time.Millisecond))
	}
	res.IngestPublish, res.IngestEndToEnd = stats.Summarize(publish), stats.Summarize(e2e)
	res.Replay, res.ReplayNet, res.EmptyStart = stats.Summarize(replay), stats.Summarize(net), stats.Summarize(empty)
	res.ReplaySnapshot = stats.Summarize(fromSnap)
	if r.cfg.KubeServices > 0 {
		res.Kube = r.kubeIngest(ctx)
	}
	return res
}

// kubeIngest measures ingest from a Kubernetes informer source: it starts
// etcd and kube-apiserver (k8stest), writes kubemesh's mesh into them,
// and runs ingest on the cluster RecordsRepeat times, each on a fresh
// subject prefix.
func (r *runner) kubeIngest(ctx context.Context) *KubeIngestResult {
	res := &KubeIngestResult{Services: r.cfg.KubeServices, PodsPerService: min(r.cfg.KubePods, kubemesh.Endpoints)}
	fail := func(err error) *KubeIngestResult {
		res.Err = err.Error()
		r.printf("[records kube] FAILED: %v", err)
		return res
	}
	dir := filepath.Join(r.cfg.WorkDir, "kube")
	cluster, err := k8stest.Run(ctx, dir, r.printf)
	if err != nil {
		return fail(err)
	}
	defer cluster.Stop()
	kube, err := kubemesh.Client(cluster.Config)
	if err != nil {
		return fail(err)
	}
	setup := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	err = kubemesh.Create(sctx, kube, r.cfg.KubeServices, r.cfg.KubePods)
	if err == nil {
		res.Objects, err = kubemesh.Listed(sctx, kube)
	}
	cancel()
	if err != nil {
		return fail(fmt.Errorf("create the mesh: %w", err))
	}
	took := time.Since(setup)
	res.Setup = took.Seconds()
	r.printf("[records kube] %d services x %d endpoints (%d pods each) created in %s: %d objects to record",
		r.cfg.KubeServices, kubemesh.Endpoints, res.PodsPerService, took.Round(time.Millisecond), res.Objects)
	var publish, e2e []float64
	for i := range r.cfg.RecordsRepeat {
		run, err := r.cfg.Records.Ingest(ctx, fmt.Sprintf("kube%d", i), IngestSource{Kubeconfig: cluster.Kubeconfig})
		if err != nil {
			return fail(err)
		}
		if run.Records != res.Objects {
			return fail(fmt.Errorf("the stream holds %d records once ingest is ready, want %d (one per listed object)", run.Records, res.Objects))
		}
		if d := run.Last.Sub(run.First); d > 0 {
			publish = append(publish, float64(run.Records)/d.Seconds())
		}
		e2e = append(e2e, float64(run.Records)/run.Ready.Seconds())
		r.printf("[records kube] %d records: ingest ready in %s (publish %.0f/s)", run.Records, run.Ready.Round(time.Millisecond), last(publish))
	}
	res.Publish, res.EndToEnd = stats.Summarize(publish), stats.Summarize(e2e)
	return res
}

func last(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return v[len(v)-1]
}

// fmtSec formats seconds for progress lines and tables.
func fmtSec(s float64) string {
	switch {
	case math.IsNaN(s):
		return "n/a"
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}
