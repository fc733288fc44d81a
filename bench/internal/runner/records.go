package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/bench/internal/procstat"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
)

// RecordsLab measures ingest and replay with bin/ingest and bin/ads on a
// NATS server embedded in this process.
func (p *Procs) RecordsLab() (RecordsLab, error) {
	port, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	ns, err := natsembed.Start(natsembed.Options{Addr: addr(port), StoreDir: filepath.Join(p.WorkDir, "records-nats")})
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, err
	}
	return &procLab{p: p, ns: ns, nc: nc, js: js}, nil
}

type procLab struct {
	p    *Procs
	ns   *natsembed.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	once sync.Once // Close
}

func (l *procLab) Ingest(ctx context.Context, prefix string, src IngestSource) (IngestRun, error) {
	port, err := FreePorts(1)
	if err != nil {
		return IngestRun{}, err
	}
	args := []string{"--nats-url", l.ns.URL(), "--prefix", prefix, "--http-addr", addr(port), "--log-level", "warn"}
	if src.Dir != "" {
		args = append(args, "--config-dir", src.Dir)
	}
	if src.Kubeconfig != "" {
		args = append(args, "--kubeconfig", src.Kubeconfig)
	}
	start := time.Now()
	pr, err := l.p.start(l.p.next("ingest-"+prefix), filepath.Join(l.p.BinDir, "ingest"), nil, args...)
	if err != nil {
		return IngestRun{}, err
	}
	err = waitReady(ctx, pr, "http://"+addr(port)+"/readyz", 5*time.Minute)
	ready := time.Since(start)
	stopErr := pr.stop(30 * time.Second)
	if err != nil {
		return IngestRun{}, err
	}
	if stopErr != nil {
		return IngestRun{}, stopErr
	}
	names, err := bus.NewNames(prefix)
	if err != nil {
		return IngestRun{}, err
	}
	s, err := l.js.Stream(ctx, names.ChangesStream())
	if err != nil {
		return IngestRun{}, fmt.Errorf("stream %s: %w", names.ChangesStream(), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return IngestRun{}, err
	}
	return IngestRun{Ready: ready, Records: int(info.State.Msgs), First: info.State.FirstTime, Last: info.State.LastTime}, nil
}

func (l *procLab) Replay(ctx context.Context, prefix string) (time.Duration, error) {
	run, err := l.ReplayWith(ctx, l.p.BinDir, prefix)
	return run.Ready, err
}

// ReplayRun is one fresh frontend's start.
type ReplayRun struct {
	// Ready is the time from starting the process to its readiness; CPU
	// the process's CPU time then, and MinorFaults its page faults.
	Ready, CPU  time.Duration
	MinorFaults uint64
}

// ReplayWith starts the ADS frontend of binDir on prefix and times it
// until ready, as Replay does with the lab's own binaries.
func (l *procLab) ReplayWith(ctx context.Context, binDir, prefix string) (ReplayRun, error) {
	port, err := FreePorts(3)
	if err != nil {
		return ReplayRun{}, err
	}
	name := l.p.next("replay-" + prefix)
	start := time.Now()
	pr, err := l.p.start(name, filepath.Join(binDir, "ads"), nil,
		"--nats-url", l.ns.URL(), "--prefix", prefix, "--http-addr", addr(port), "--ads-addr", addr(port+1),
		"--debug-addr", addr(port+2), "--frontend-id", name, "--record-deliveries=false", "--drain-duration", "0s", "--log-level", "warn")
	if err != nil {
		return ReplayRun{}, err
	}
	err = waitReady(ctx, pr, "http://"+addr(port)+"/readyz", 5*time.Minute)
	run := ReplayRun{Ready: time.Since(start)}
	if err == nil {
		run.CPU, err = procstat.CPU(pr.pid())
	}
	if err == nil {
		run.MinorFaults, err = procstat.MinorFaults(pr.pid())
	}
	stopErr := pr.stop(30 * time.Second)
	if err != nil {
		return ReplayRun{}, err
	}
	return run, stopErr
}

// ReplayWith is procLab.ReplayWith for a lab of Procs.RecordsLab.
func ReplayWith(ctx context.Context, lab RecordsLab, binDir, prefix string) (ReplayRun, error) {
	l, ok := lab.(*procLab)
	if !ok {
		return ReplayRun{}, fmt.Errorf("not a lab of processes: %T", lab)
	}
	return l.ReplayWith(ctx, binDir, prefix)
}

func (l *procLab) Snapshot(ctx context.Context, prefix string) error {
	return WriteSnapshot(ctx, l.js, prefix)
}

// WriteSnapshot writes a snapshot of prefix's change stream as the
// debouncer's snapshotter does (with compact forms).
func WriteSnapshot(ctx context.Context, js jetstream.JetStream, prefix string) error {
	names, err := bus.NewNames(prefix)
	if err != nil {
		return err
	}
	sn := snapshot.New(snapshot.Options{JS: js, Names: names, Model: model.CompactRecord})
	defer sn.Close()
	_, err = sn.Step(ctx)
	return err
}

func (l *procLab) Close() error {
	l.once.Do(func() {
		l.nc.Close()
		l.ns.Shutdown()
	})
	return nil
}
