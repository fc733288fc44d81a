package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/runner"
	"github.com/pilotwire/pilotwire/bench/internal/stats"
)

// replayConfig is `pwbench replay`: fresh ADS frontends of one or more
// builds replaying one change stream, alternated run by run, so that a
// before and an after meet the same machine.
type replayConfig struct {
	BinDirs  []string
	Runs     int
	Mesh     string
	Seed     uint64
	WorkDir  string
	Snapshot bool // only the start from a snapshot
}

func newReplayCmd() *cobra.Command {
	var c replayConfig
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Time fresh ADS frontends of several builds replaying one change stream, alternated",
		Long: `replay ingests a mesh once (the first --bin-dirs entry's bin/ingest, on a
NATS server embedded in this process), then starts fresh bin/ads processes
of each --bin-dirs entry in turn, --runs times each, and times each from
process start to ready: first replaying the change stream, then (after a
snapshot is written as the debouncer writes it) from the snapshot. Each
line gives the time to ready, the process's CPU time and minor page faults
at that point; the summary gives medians with (min – max).

Build the before in a git worktree (go build -o DIR/ads ./services/ads/cmd/ads)
and compare it with bin/: pwbench replay --bin-dirs /tmp/before,bin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runReplay(cmd.Context(), c, os.Stdout) },
	}
	f := cmd.Flags()
	f.StringSliceVar(&c.BinDirs, "bin-dirs", []string{"bin"}, "directories holding an ads binary (the first also ingest), comma-separated")
	f.IntVar(&c.Runs, "runs", 8, "starts per directory and kind of start")
	f.StringVar(&c.Mesh, "mesh", "10000x10", "mesh ingested, <services>x<endpoints per service>")
	f.Uint64Var(&c.Seed, "seed", 1, "seed of the mesh")
	f.StringVar(&c.WorkDir, "work-dir", "", "directory for the mesh, NATS data and logs (default: a new temporary directory, kept)")
	f.BoolVar(&c.Snapshot, "snapshot-only", false, "time only starts from a snapshot")
	return cmd
}

func runReplay(ctx context.Context, c replayConfig, out io.Writer) error {
	if len(c.BinDirs) == 0 || c.Runs < 1 {
		return fmt.Errorf("want at least one --bin-dirs entry and --runs of 1 or more")
	}
	spec, err := parseMesh(c.Mesh, c.Seed)
	if err != nil {
		return err
	}
	dirs := make([]string, len(c.BinDirs))
	for i, d := range c.BinDirs {
		if dirs[i], err = filepath.Abs(d); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(dirs[i], "ads")); err != nil {
			return fmt.Errorf("--bin-dirs %s: %w", d, err)
		}
	}
	if c.WorkDir == "" {
		if c.WorkDir, err = os.MkdirTemp("", "pilotwire-replay-"); err != nil {
			return err
		}
	}
	meshDir := filepath.Join(c.WorkDir, "mesh")
	if err := os.MkdirAll(meshDir, 0o755); err != nil {
		return err
	}
	m, err := mesh.New(spec)
	if err != nil {
		return err
	}
	if err := m.WriteAll(meshDir); err != nil {
		return err
	}
	procs := &runner.Procs{BinDir: dirs[0], WorkDir: c.WorkDir, LogDir: filepath.Join(c.WorkDir, "logs"), LogLevel: "warn"}
	lab, err := procs.RecordsLab()
	if err != nil {
		return err
	}
	defer lab.Close()
	const prefix = "replay"
	ing, err := lab.Ingest(ctx, prefix, runner.IngestSource{Dir: meshDir})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "mesh %s: %d records ingested in %s (work dir %s)\n", spec, ing.Records, ing.Ready.Round(time.Millisecond), c.WorkDir)

	type key struct{ kind, dir string }
	runs := make(map[key][]runner.ReplayRun)
	series := func(kind string) error {
		for range c.Runs {
			for _, d := range dirs {
				r, err := runner.ReplayWith(ctx, lab, d, prefix)
				if err != nil {
					return err
				}
				runs[key{kind, d}] = append(runs[key{kind, d}], r)
				fmt.Fprintf(out, "%-8s %s: ready in %s (%.0f records/s), CPU %s, %d minor faults\n", kind, d,
					r.Ready.Round(time.Millisecond), float64(ing.Records)/r.Ready.Seconds(), r.CPU, r.MinorFaults)
			}
		}
		return nil
	}
	kinds := []string{"stream", "snapshot"}
	if c.Snapshot {
		kinds = kinds[1:]
	} else if err := series("stream"); err != nil {
		return err
	}
	if err := lab.Snapshot(ctx, prefix); err != nil {
		return err
	}
	if err := series("snapshot"); err != nil {
		return err
	}

	fmt.Fprintf(out, "\n| Start | Build | Ready (ms) | Records/s | CPU (ms) | Minor faults |\n|---|---|---|---|---|---|\n")
	for _, kind := range kinds {
		for _, d := range dirs {
			rs := runs[key{kind, d}]
			ms := func(f func(runner.ReplayRun) time.Duration) stats.Summary {
				v := make([]float64, len(rs))
				for i, r := range rs {
					v[i] = float64(f(r)) / float64(time.Millisecond)
				}
				return stats.Summarize(v)
			}
			ready := ms(func(r runner.ReplayRun) time.Duration { return r.Ready })
			cpu := ms(func(r runner.ReplayRun) time.Duration { return r.CPU })
			faults := make([]float64, len(rs))
			for i, r := range rs {
				faults[i] = float64(r.MinorFaults)
			}
			fmt.Fprintf(out, "| %s | %s | %.0f (%.0f – %.0f) | %.0f | %.0f (%.0f – %.0f) | %.0f |\n", kind, d,
				ready.Median, ready.Min, ready.Max, float64(ing.Records)/(ready.Median/1000), cpu.Median, cpu.Min, cpu.Max, stats.Summarize(faults).Median)
		}
	}
	return nil
}
