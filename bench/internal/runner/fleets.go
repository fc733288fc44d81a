package runner

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/loadgen"
	"github.com/pilotwire/pilotwire/bench/internal/procstat"
)

// Fleets runs each fleet in a `pwbench loadgen --control` process.
func (p *Procs) Fleets() Fleets { return procFleets{p} }

type procFleets struct{ p *Procs }

func (f procFleets) NewFleet(_ context.Context, o loadgen.Options) (Fleet, error) {
	p := f.p
	name := p.next("loadgen")
	args := []string{"loadgen", "--control", "--addr", o.Addr, "--proxies", strconv.Itoa(o.Proxies), "--first", strconv.Itoa(o.First)}
	if o.Delta {
		args = append(args, "--delta")
	}
	if o.DecodeAll {
		args = append(args, "--decode-all")
	}
	if p.ProfileDir != "" {
		args = append(args, "--cpuprofile", filepath.Join(p.ProfileDir, name+".pprof"))
	}
	if err := os.MkdirAll(p.LogDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(p.LogDir, name+".log"))
	if err != nil {
		return nil, err
	}
	r, err := loadgen.StartRemote(p.Exe, args, os.Environ(), logf)
	if err != nil {
		logf.Close()
		return nil, err
	}
	return &procFleet{Remote: r, log: logf}, nil
}

func (procFleets) CPU(f Fleet) (time.Duration, bool) {
	pf, ok := f.(*procFleet)
	if !ok {
		return 0, false
	}
	c, err := procstat.CPU(pf.Pid())
	return c, err == nil
}

type procFleet struct {
	*loadgen.Remote
	log *os.File
}

func (f *procFleet) Close() error {
	err := f.Remote.Close()
	f.log.Close()
	return err
}
