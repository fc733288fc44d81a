package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/bench/internal/faults"
)

type faultsConfig struct {
	opts       faults.Options
	out        string
	strictTime bool
	keep       bool
}

func newFaultsCmd() *cobra.Command {
	c := faultsConfig{opts: faults.DefaultOptions()}
	cmd := &cobra.Command{
		Use:   "faults",
		Short: "Run the fault matrix on a 3-node JetStream cluster (docs/reliability.md)",
		Long: `faults starts three nats-server processes clustered on loopback (every
stream and bucket at 3 replicas), ingest on a YAML directory, 2 debouncers,
2 pushers and 3 ADS frontends as separate processes from --bin-dir, and
--proxies simulated proxies. It writes --changes changes to the directory,
split over the faults; during each share it injects one fault: kill -9 of
ingest, the active debouncer, the active pusher, one frontend, one NATS
node and the node leading PW_CHANGES; SIGSTOP of the active debouncer past
its lease TTL; one frontend cut from NATS. After each it waits until every
proxy holds the configuration a fresh render of the directory gives, and
checks the change and push streams and the frontends' order counters.

It prints a table of figures per fault and exits non-zero if a fault lost,
duplicated or reordered anything, or a proxy did not converge; a fault
slower than --target is marked MISS (a failure only with --strict-time).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFaults(cmd.Context(), c) },
	}
	fs := cmd.Flags()
	o := &c.opts
	fs.StringVar(&o.BinDir, "bin-dir", "bin", "directory of ingest, debouncer, pusher and ads (make build)")
	fs.StringVar(&o.NATSServer, "nats-server", "bin/nats-server", "nats-server binary (make test-faults builds the go.mod version)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "directory for the mesh, JetStream stores and logs (default: a temporary one, removed unless --keep or a failure)")
	fs.IntVar(&o.Proxies, "proxies", o.Proxies, "simulated proxies, spread over the three frontends")
	fs.IntVar(&o.Changes, "changes", o.Changes, "changes written over the whole matrix")
	fs.IntVar(&o.Mesh.Services, "services", o.Mesh.Services, "services of the initial mesh")
	fs.IntVar(&o.Mesh.Endpoints, "endpoints", o.Mesh.Endpoints, "endpoints per service")
	fs.IntVar(&o.AddEvery, "add-every", o.AddEvery, "every this many changes adds a service; the others move one endpoint")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "changes per second")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", o.LeaseTTL, "lease TTL of ingest, debouncers and pushers")
	fs.DurationVar(&o.Restart, "restart-delay", o.Restart, "a killed service is started again after this long")
	fs.DurationVar(&o.NATSDown, "nats-down", o.NATSDown, "a killed NATS node is started again after this long")
	fs.DurationVar(&o.Cut, "cut", o.Cut, "how long one frontend is cut from NATS")
	fs.BoolVar(&o.Direct, "direct", o.Direct, "each third of the proxies dials its own frontend (default: one Service-like address in front of all three)")
	fs.DurationVar(&o.Target, "target", o.Target, "convergence target per fault")
	fs.DurationVar(&o.ConvergeTimeout, "converge-timeout", o.ConvergeTimeout, "give up waiting for the proxies after this long")
	fs.StringVar(&c.out, "out", "", "also write the table to this file")
	fs.BoolVar(&c.strictTime, "strict-time", false, "fail when a fault misses --target")
	fs.BoolVar(&c.keep, "keep", false, "keep --work-dir")
	return cmd
}

func runFaults(ctx context.Context, c faultsConfig) error {
	o := c.opts
	tmp := o.WorkDir == ""
	if tmp {
		d, err := os.MkdirTemp("", "pwfaults-")
		if err != nil {
			return err
		}
		o.WorkDir = d
	}
	var err error
	if o.BinDir, err = filepath.Abs(o.BinDir); err != nil {
		return err
	}
	if o.NATSServer, err = filepath.Abs(o.NATSServer); err != nil {
		return err
	}
	o.Progress = os.Stderr
	res, runErr := faults.Run(ctx, o)
	failed := runErr != nil
	if res != nil {
		var b bytes.Buffer
		faults.WriteTable(&b, res)
		fmt.Print(b.String())
		if c.out != "" {
			if err := os.WriteFile(c.out, b.Bytes(), 0o644); err != nil {
				return err
			}
		}
		if bad := faults.Failed(res, c.strictTime); len(bad) > 0 {
			failed = true
			if runErr == nil {
				runErr = fmt.Errorf("faults that missed their target: %s", strings.Join(bad, "; "))
			}
		}
	}
	if failed || c.keep || !tmp {
		fmt.Fprintf(os.Stderr, "logs and data kept in %s\n", o.WorkDir)
	} else {
		_ = os.RemoveAll(o.WorkDir)
	}
	return runErr
}
