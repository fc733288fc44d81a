package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/bench/internal/baseline"
	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/runner"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
)

type benchConfig struct {
	Proxies          []int
	Meshes           []string
	Rounds, Warmup   int
	Delta, DecodeAll bool
	Reconnect        string
	Seed             uint64
	RestartEndpoints int
	RestartDuration  time.Duration
	RestartSteps     int
	StepTimeout      time.Duration
	Quiet            time.Duration
	EDSCache         string
	BaselineDebounce time.Duration
	OursEnv          []string
	OursLogLevel     string
	BinDir, WorkDir  string
	JSON, PNG        string
	Records          bool
	RecordsMesh      string
	RecordsRepeat    int
	KubeServices     int
	KubePods         int
	Bare             bool
	ProfileDir       string
}

func newBenchCmd() *cobra.Command { return newBenchCmdOn(new(benchConfig)) }

// newBenchCmdOn is `pwbench run` with its flags bound to c.
func newBenchCmdOn(c *benchConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Benchmark pilotwire against go-control-plane, side by side",
		Long: `bench runs the benchmark of docs/benchmarks.md. For each mesh (--mesh,
services x endpoints) and proxy count (--proxies) it runs a trace against
pilotwire (bin/pilotwire up: embedded NATS and the four services) and the
go-control-plane baseline (pwbench baseline), alternating between them
round by round (--warmup rounds first, dropped; then --rounds each), with a
separate load generator process (pwbench loadgen):

  initial sync   every proxy connects at once
  endpoint       one endpoint of one service changes
  service        one service is added
  restart        a rolling restart replaces --restart-endpoints endpoints
                 in --restart-steps writes over --restart-duration
  reconnect      every proxy drops its connection and reconnects at once

Changes are written into the served YAML directory (atomically); each
step is measured from the write to the ACK of the response that gave each
proxy the configuration pilotwire's model and generators expect. Then a
bare gRPC server measures grpc-go's own memory per stream, and bin/ingest
and bin/ads measure change records ingested and replayed per second.

It builds nothing: run make build first. The markdown table goes to
stdout, progress to stderr, raw numbers to --json and charts to --png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd.Context(), *c, os.Args) },
	}
	fs := cmd.Flags()
	fs.IntSliceVar(&c.Proxies, "proxies", []int{1000}, "proxy counts to run (comma-separated, e.g. 100,1000,5000)")
	fs.StringSliceVar(&c.Meshes, "mesh", []string{"100x10"}, "meshes to run, <services>x<endpoints per service> (comma-separated, e.g. 100x10,1000x10)")
	fs.IntVar(&c.Rounds, "rounds", 3, "measured rounds per system and configuration")
	fs.IntVar(&c.Warmup, "warmup", 1, "warm-up rounds per system, run first and dropped")
	fs.BoolVar(&c.Delta, "delta", false, "proxies use incremental (delta) xDS")
	fs.BoolVar(&c.DecodeAll, "decode-all", false, "the load generator unmarshals every resource of every response (default: once per distinct resource)")
	fs.StringVar(&c.Reconnect, "reconnect", "resume", "how proxies reconnect in the last step: resume (as Envoy: resubscribe with the versions they hold) or fresh (as new proxies)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the mesh and of the changes")
	fs.IntVar(&c.RestartEndpoints, "restart-endpoints", 500, "endpoints replaced by the rolling restart (0 skips it)")
	fs.DurationVar(&c.RestartDuration, "restart-duration", 10*time.Second, "time from the first to the last write of the rolling restart")
	fs.IntVar(&c.RestartSteps, "restart-steps", 20, "writes of the rolling restart")
	fs.DurationVar(&c.StepTimeout, "step-timeout", 2*time.Minute, "give up on a step when proxies have not converged after this long")
	fs.DurationVar(&c.Quiet, "quiet", 500*time.Millisecond, "a step ends once no response came for this long (its CPU and bytes are counted until then)")
	fs.StringVar(&c.EDSCache, "eds-cache", baseline.EDSSnapshot, "baseline: where load assignments live, snapshot or linear")
	fs.DurationVar(&c.BaselineDebounce, "baseline-debounce", 0, "baseline: quiet time after a file event before reading (default: what pilotwire's ingest waits, --file-debounce or PILOTWIRE_FILE_DEBOUNCE in --ours-env)")
	fs.StringArrayVar(&c.OursEnv, "ours-env", nil, "KEY=VALUE added to the environment of pilotwire's processes (repeatable), e.g. PILOT_DEBOUNCE_AFTER=50ms")
	fs.StringVar(&c.OursLogLevel, "ours-log-level", "info", "log level of pilotwire's services")
	fs.StringVar(&c.BinDir, "bin-dir", "", "directory of pilotwire's binaries (default: next to this pwbench)")
	fs.StringVar(&c.WorkDir, "work-dir", "", "directory for meshes, data and logs (default: a new temporary directory, kept)")
	fs.StringVar(&c.JSON, "json", "bench.json", "write the raw results here")
	fs.StringVar(&c.PNG, "png", "bench.png", "write the convergence chart here (one file per configuration, suffixed, when there are several)")
	fs.BoolVar(&c.Records, "records", true, "measure change records ingested and replayed per second")
	fs.StringVar(&c.RecordsMesh, "records-mesh", "10000x10", "mesh ingested and replayed by the records measurement")
	fs.IntVar(&c.RecordsRepeat, "records-repeat", 3, "repetitions of the records measurement")
	fs.IntVar(&c.KubeServices, "kube-services", 3000, "records measurement: Services (each with an EndpointSlice) written into a real kube-apiserver for ingest's informer source; needs make k8s-binaries (0 skips it)")
	fs.IntVar(&c.KubePods, "kube-pods", 0, "records measurement: Pods of each such Service (at most 10, those its EndpointSlice names), sidecar-injected")
	fs.BoolVar(&c.Bare, "bare", true, "measure a bare gRPC ADS server's memory per stream")
	fs.StringVar(&c.ProfileDir, "profile-dir", "", "write CPU profiles of the baseline and load generator processes here")
	return cmd
}

// newMeshCmd is `pwbench mesh`: the benchmark's mesh as YAML, to serve by
// hand or to feed another control plane.
func newMeshCmd() *cobra.Command {
	var m meshConfig
	meshCmd := &cobra.Command{
		Use:   "mesh",
		Short: "Write the benchmark's mesh as Kubernetes YAML into a directory",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runMesh(m) },
	}
	mf := meshCmd.Flags()
	mf.StringVar(&m.Dir, "dir", "", "directory to write (created; required)")
	mf.StringVar(&m.Mesh, "mesh", "100x10", "<services>x<endpoints per service>")
	mf.Uint64Var(&m.Seed, "seed", 1, "seed")
	return meshCmd
}

type meshConfig struct {
	Dir, Mesh string
	Seed      uint64
}

func runMesh(c meshConfig) error {
	if c.Dir == "" {
		return fmt.Errorf("--dir is required")
	}
	spec, err := parseMesh(c.Mesh, c.Seed)
	if err != nil {
		return err
	}
	m, err := mesh.New(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	if err := m.WriteAll(c.Dir); err != nil {
		return err
	}
	fmt.Printf("wrote %d services, %d endpoints to %s\n", len(m.Services()), m.EndpointCount(), c.Dir)
	return nil
}

// parseMesh reads "<services>x<endpoints>".
func parseMesh(s string, seed uint64) (mesh.Spec, error) {
	a, b, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	services, err1 := strconv.Atoi(a)
	endpoints, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || services <= 0 || endpoints <= 0 {
		return mesh.Spec{}, fmt.Errorf("mesh %q: want <services>x<endpoints>, e.g. 100x10", s)
	}
	return mesh.Spec{Services: services, Endpoints: endpoints, Seed: seed}, nil
}

func runBench(ctx context.Context, c benchConfig, argv []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if c.BinDir == "" {
		c.BinDir = filepath.Dir(exe)
	}
	for _, b := range []string{"pilotwire", "ingest", "debouncer", "pusher", "ads"} {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("%s missing in %s (run make build): %w", b, c.BinDir, err)
		}
	}
	if c.WorkDir == "" {
		if c.WorkDir, err = os.MkdirTemp("", "pilotwire-bench-"); err != nil {
			return err
		}
	}
	var meshes []mesh.Spec
	for _, s := range c.Meshes {
		spec, err := parseMesh(s, c.Seed)
		if err != nil {
			return err
		}
		meshes = append(meshes, spec)
	}
	if c.Reconnect != "resume" && c.Reconnect != "fresh" {
		return fmt.Errorf("--reconnect %q: want resume or fresh", c.Reconnect)
	}
	recordsMesh, err := parseMesh(c.RecordsMesh, c.Seed)
	if err != nil {
		return err
	}
	waits, err := c.resolveWaits()
	if err != nil {
		return err
	}
	if c.ProfileDir != "" {
		if err := os.MkdirAll(c.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	log, err := svc.NewLogger(os.Stderr, "warn", "text", "bench")
	if err != nil {
		return err
	}
	procs := &runner.Procs{
		Exe: exe, BinDir: c.BinDir, WorkDir: c.WorkDir, LogDir: filepath.Join(c.WorkDir, "logs"),
		OursEnv: c.OursEnv, LogLevel: c.OursLogLevel, ProfileDir: c.ProfileDir,
	}
	cfg := runner.Config{
		Systems:          []runner.System{procs.Ours(), procs.Baseline(c.EDSCache, c.BaselineDebounce)},
		Fleets:           procs.Fleets(),
		Proxies:          c.Proxies,
		Meshes:           meshes,
		Rounds:           c.Rounds,
		Warmup:           c.Warmup,
		Delta:            c.Delta,
		DecodeAll:        c.DecodeAll,
		ReconnectFresh:   c.Reconnect == "fresh",
		RestartEndpoints: c.RestartEndpoints,
		RestartDuration:  c.RestartDuration,
		RestartSteps:     c.RestartSteps,
		StepTimeout:      c.StepTimeout,
		Quiet:            c.Quiet,
		RecordsMesh:      recordsMesh,
		RecordsRepeat:    c.RecordsRepeat,
		KubeServices:     c.KubeServices,
		KubePods:         c.KubePods,
		WorkDir:          c.WorkDir,
		DebounceAfter:    waits.debounceAfter,
		FileDebounce:     waits.fileQuiet,
		Log:              log,
		Progress:         os.Stderr,
	}
	if c.Bare {
		cfg.Bare = procs.Bare()
	}
	if c.Records {
		lab, err := procs.RecordsLab()
		if err != nil {
			return err
		}
		defer lab.Close() // also closed by the run once it is measured
		cfg.Records = lab
	}
	fmt.Fprintf(os.Stderr, "bench: work dir %s (logs in %s)\n", c.WorkDir, procs.LogDir)
	rep, runErr := runner.Run(ctx, cfg)
	if rep == nil {
		return runErr
	}
	rep.CommandLine = commandLine(argv)
	rep.Settings.Notes = append(rep.Settings.Notes, fmt.Sprintf("baseline EDS cache: %s; baseline file debounce: %s", c.EDSCache, c.BaselineDebounce))
	if len(c.OursEnv) > 0 {
		rep.Settings.Notes = append(rep.Settings.Notes, "pilotwire environment: "+strings.Join(c.OursEnv, " "))
	}
	fmt.Printf("Command: `%s`\n\n", rep.CommandLine)
	rep.WriteMarkdown(os.Stdout)
	if c.JSON != "" {
		f, err := os.Create(c.JSON)
		if err != nil {
			return err
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: raw results in %s\n", c.JSON)
	}
	if c.PNG != "" {
		for i := range rep.Configs {
			path := c.PNG
			if len(rep.Configs) > 1 {
				ext := filepath.Ext(path)
				path = fmt.Sprintf("%s-n%d-%s%s", strings.TrimSuffix(path, ext), rep.Configs[i].Proxies, rep.Configs[i].Mesh, ext)
			}
			if err := rep.WritePNG(path, &rep.Configs[i]); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench: chart in %s\n", path)
		}
	}
	return runErr
}

// commandLine is the command a report names: bin/pwbench (make build puts
// it there) with the arguments it ran with.
func commandLine(argv []string) string {
	return strings.Join(append([]string{"bin/pwbench"}, argv[1:]...), " ")
}

// waits are the quiet times pilotwire's services wait before acting on a
// change: ingest's on a changed file, the debouncer's on the stream.
type waits struct {
	fileQuiet, debounceAfter time.Duration
}

// resolveWaits reads pilotwire's waits and gives the baseline ingest's
// file quiet time unless --baseline-debounce set one.
func (c *benchConfig) resolveWaits() (waits, error) {
	w, err := pilotwireWaits(c.OursEnv)
	if err == nil && c.BaselineDebounce <= 0 {
		c.BaselineDebounce = w.fileQuiet
	}
	return w, err
}

// pilotwireWaits reads the waits pilotwire's processes will run with from
// the environment --ours-env gives them, the services' defaults otherwise.
// The baseline waits the same time on a file as ingest does, so a change's
// latency compares the servers, not their debounce settings.
func pilotwireWaits(env []string) (waits, error) {
	w := waits{fileQuiet: filesource.DefaultQuiet, debounceAfter: debounce.DefaultDebounceAfter}
	for _, kv := range env {
		var dst *time.Duration
		var v string
		if val, ok := strings.CutPrefix(kv, "PILOT_DEBOUNCE_AFTER="); ok {
			dst, v = &w.debounceAfter, val
		} else if val, ok := strings.CutPrefix(kv, "PILOTWIRE_FILE_DEBOUNCE="); ok {
			dst, v = &w.fileQuiet, val
		} else {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return waits{}, fmt.Errorf("--ours-env %s: %w", kv, err)
		}
		*dst = d
	}
	return w, nil
}
