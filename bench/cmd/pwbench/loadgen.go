package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/bench/internal/loadgen"
	"github.com/pilotwire/pilotwire/bench/internal/stats"
	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

type loadgenConfig struct {
	Addr       string
	Proxies    int
	First      int
	Delta      bool
	DecodeAll  bool
	Control    bool
	ExpectDir  string
	Timeout    time.Duration
	Out        string
	CPUProfile string
	LogLevel   string
}

func newLoadgenCmd() *cobra.Command {
	var c loadgenConfig
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Simulate Envoy sidecars on ADS and report when each got its configuration",
		Long: `loadgen opens --proxies ADS streams to --addr, one gRPC connection each,
with Istio-style sidecar node ids. Each subscribes as Envoy does (CDS
wildcard, EDS for its clusters, LDS wildcard once clusters are warm, RDS
for its listeners' route configurations), decodes and ACKs every response,
and keeps a content hash of what it holds.

With --expect-dir, it computes the configuration the manifests in that
directory should produce (pilotwire's model and generators) and waits until
every proxy holds it; otherwise until no response came for 2 s. It then
writes a JSON report (--out, default stdout): per-proxy arrival and ACK
times, bytes received, and the final configuration hashes.

With --control it serves the harness's control protocol on stdin/stdout
instead (used by pwbench run).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLoadgen(cmd.Context(), c) },
	}
	fs := cmd.Flags()
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:15010", "ADS address of the control plane (loopback)")
	fs.IntVar(&c.Proxies, "proxies", 100, "number of simulated proxies")
	fs.IntVar(&c.First, "first", 0, "number of the first proxy's node id")
	fs.BoolVar(&c.Delta, "delta", false, "use incremental (delta) xDS")
	fs.BoolVar(&c.DecodeAll, "decode-all", false, "unmarshal every resource of every response (default: once per distinct resource)")
	fs.BoolVar(&c.Control, "control", false, "serve the harness's control protocol on stdin/stdout")
	fs.StringVar(&c.ExpectDir, "expect-dir", "", "wait until every proxy holds the configuration of the manifests in this directory")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "give up waiting after this long")
	fs.StringVar(&c.Out, "out", "", "write the JSON report here instead of stdout")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile to this file")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level (stream errors are logged at debug)")
	return cmd
}

func runLoadgen(ctx context.Context, c loadgenConfig) error {
	log, err := svc.NewLogger(os.Stderr, c.LogLevel, "text", "loadgen")
	if err != nil {
		return err
	}
	stop, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	defer stop()
	f, err := loadgen.New(loadgen.Options{Addr: c.Addr, Proxies: c.Proxies, First: c.First, Delta: c.Delta, DecodeAll: c.DecodeAll, Log: log})
	if err != nil {
		return err
	}
	if c.Control {
		done := make(chan error, 1)
		go func() { done <- loadgen.Serve(f, loadgen.StdioConn{Reader: os.Stdin, Writer: os.Stdout}) }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return f.Close()
		}
	}
	defer f.Close()

	target := loadgen.Target{ID: 1}
	if c.ExpectDir != "" {
		store, err := yamldir.Load(c.ExpectDir, "Kubernetes")
		if err != nil {
			return err
		}
		cfg, err := xdsstate.Expected(store.Snapshot(), xdsgen.Envoy)
		if err != nil {
			return err
		}
		target.State = cfg.State()
		_ = f.SetTarget(ctx, target)
	}
	start := time.Now()
	if err := f.Start(ctx); err != nil {
		return err
	}
	var res loadgen.Result
	if c.ExpectDir != "" {
		if res, err = f.Wait(ctx, c.Timeout); err != nil {
			return err
		}
	} else if err := f.Quiet(ctx, 2*time.Second, c.Timeout); err != nil {
		return err
	}
	st, _ := f.Stats(ctx)
	fin, _ := f.Final(ctx)
	rep := newLoadgenReport(c, start, target, res, st, fin)
	var w io.Writer = os.Stdout
	if c.Out != "" {
		out, err := os.Create(c.Out)
		if err != nil {
			return err
		}
		defer out.Close()
		w = out
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if c.ExpectDir != "" && res.Matched < res.Total {
		return fmt.Errorf("%d of %d proxies reached the expected configuration within %s", res.Matched, res.Total, c.Timeout)
	}
	if c.ExpectDir == "" && len(fin.States) != 1 {
		return errors.New("proxies ended with different configurations")
	}
	return nil
}

// loadgenReport is the standalone loadgen's JSON output. Times are
// milliseconds since the proxies started.
type loadgenReport struct {
	Addr     string    `json:"addr"`
	Proxies  int       `json:"proxies"`
	Delta    bool      `json:"delta"`
	Started  time.Time `json:"started"`
	Expected string    `json:"expected_state,omitempty"`
	// Converged proxies and their sync times (ACK of the response that
	// completed the expected configuration), when --expect-dir was given.
	Converged int           `json:"converged"`
	SyncMS    *stats.Sample `json:"sync_ms,omitempty"`
	PerProxy  []proxyTimes  `json:"per_proxy,omitempty"`
	// Bytes received: whole responses, and resource bytes per type.
	MessageBytes  int64            `json:"message_bytes"`
	ResourceBytes map[string]int64 `json:"resource_bytes"`
	Responses     int64            `json:"responses"`
	Streams       int64            `json:"streams_opened"`
	Failures      int64            `json:"stream_failures"`
	// FinalStates counts proxies by the content hash of what they hold.
	FinalStates map[string]int `json:"final_states"`
	FinalCounts map[string]int `json:"resources_held_by_proxy_0"`
}

type proxyTimes struct {
	Proxy     int     `json:"proxy"`
	ArrivalMS float64 `json:"arrival_ms"`
	AckMS     float64 `json:"ack_ms"`
}

func newLoadgenReport(c loadgenConfig, start time.Time, target loadgen.Target, res loadgen.Result, st loadgen.Stats, fin loadgen.Final) loadgenReport {
	rep := loadgenReport{
		Addr: c.Addr, Proxies: c.Proxies, Delta: c.Delta, Started: start,
		MessageBytes: st.MessageBytes, Responses: st.Responses, Streams: st.StreamsOpened, Failures: st.StreamFailures,
		ResourceBytes: map[string]int64{}, FinalStates: map[string]int{}, FinalCounts: map[string]int{},
	}
	for t := range xdsstate.NumTypes {
		rep.ResourceBytes[xdsstate.Names[t]] = st.ByType[t].Bytes
		rep.FinalCounts[xdsstate.Names[t]] = fin.Resources[t]
	}
	for s, n := range fin.States {
		rep.FinalStates[s.String()] = n
	}
	if c.ExpectDir != "" {
		rep.Expected = target.State.String()
		rep.Converged = res.Matched
		var acks []float64
		for _, t := range res.Times {
			pt := proxyTimes{Proxy: t.Proxy, ArrivalMS: float64(t.Arrival-start.UnixNano()) / 1e6, AckMS: float64(t.Ack-start.UnixNano()) / 1e6}
			rep.PerProxy = append(rep.PerProxy, pt)
			acks = append(acks, pt.AckMS)
		}
		if len(acks) > 0 {
			s := stats.Describe(acks)
			rep.SyncMS = &s
		}
	}
	return rep
}
